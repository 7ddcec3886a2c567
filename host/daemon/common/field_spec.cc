// A field table's entries as JSON (see oppsched/daemon/field_spec.h).
#include "oppsched/daemon/field_spec.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "oppsched/daemon/json.h"

namespace oppsched::daemon {

namespace {

// A finite number as JSON: whole numbers of an integer field in full, others round-trip.
std::string number(double v, bool integer) {
    char buf[40];
    if (integer || (std::fabs(v) < 1e15 && v == std::floor(v)))
        std::snprintf(buf, sizeof buf, integer ? "%.0f" : "%.1f", v);
    else  // the shortest text that reads back as v
        for (int digits = 15; digits <= 17; ++digits) {
            std::snprintf(buf, sizeof buf, "%.*g", digits, v);
            if (std::strtod(buf, nullptr) == v) break;
        }
    return buf;
}

std::string bound(double v, bool integer) { return std::isfinite(v) ? number(v, integer) : "null"; }

const char* type_name(field_type t) {
    switch (t) {
        case field_type::integer:
            return "integer";
        case field_type::number:
            return "number";
        case field_type::boolean:
            return "boolean";
        case field_type::string:
            return "string";
        case field_type::choice:
            return "choice";
    }
    return "";
}

}  // namespace

std::string fields_json(const std::string& daemon, const std::vector<field_spec>& fields) {
    std::string out = "{\"daemon\": " + json_string(daemon) + ", \"fields\": [";
    bool first = true;
    for (const auto& f : fields) {
        const bool integer = f.type == field_type::integer;
        const bool ranged = integer || f.type == field_type::number;
        out += first ? "\n  {" : ",\n  {";
        first = false;
        out += "\"key\": " + json_string(f.key()) + ", \"type\": \"" + type_name(f.type) + "\"";
        out += ", \"default\": ";
        switch (f.type) {
            case field_type::boolean:
                out += f.default_number != 0.0 ? "true" : "false";
                break;
            case field_type::string:
            case field_type::choice:
                out += json_string(f.default_text);
                break;
            default:
                out += number(f.default_number, integer);
        }
        if (ranged) {
            out += ", \"min\": " + bound(f.range.lo, integer) +
                   ", \"max\": " + bound(f.range.hi, integer);
            out += std::string(", \"min_open\": ") +
                   (f.range.lo_open || !std::isfinite(f.range.lo) ? "true" : "false");
            out += std::string(", \"max_open\": ") +
                   (f.range.hi_open || !std::isfinite(f.range.hi) ? "true" : "false");
            out += std::string(", \"zero_off\": ") + (f.zero_off ? "true" : "false");
            out += ", \"violation\": " + json_string(f.violation());
        } else {
            out +=
                ", \"min\": null, \"max\": null, \"min_open\": true, \"max_open\": true, "
                "\"zero_off\": false, \"violation\": null";
        }
        out += ", \"choices\": [";
        for (std::size_t i = 0; i < f.choices.size(); ++i)
            out += (i ? ", " : "") + json_string(f.choices[i]);
        out += "], \"unit\": " + json_string(f.unit) + ", \"help\": " + json_string(f.help) + "}";
    }
    return out + "\n]}\n";
}

}  // namespace oppsched::daemon
