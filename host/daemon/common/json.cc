// JSON string literals: see oppsched/daemon/json.h.
#include "oppsched/daemon/json.h"

#include <cstdio>

namespace oppsched::daemon {

void append_json_string(std::string& out, std::string_view v) {
    out += '"';
    for (const char ch : v) {
        const auto c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof b, "\\u%04x", c);
                    out += b;
                } else {
                    out += ch;
                }
        }
    }
    out += '"';
}

std::string json_string(std::string_view v) {
    std::string out;
    out.reserve(v.size() + 2);
    append_json_string(out, v);
    return out;
}

}  // namespace oppsched::daemon
