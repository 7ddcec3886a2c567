// A string as a JSON string literal, for the few JSON documents the daemons write by hand
// (the stats file, `--schema`'s field table, a plugin's params): RFC 8259 §7, with '"' and
// '\\' escaped, \n \r \t as such and every other control character as \u00XX. Bytes from
// 0x80 up pass through unchanged (the daemons' strings are UTF-8).
#pragma once

#include <string>
#include <string_view>

namespace oppsched::daemon {

// Appends v, quoted and escaped, to out.
void append_json_string(std::string& out, std::string_view v);

// v quoted and escaped.
std::string json_string(std::string_view v);

}  // namespace oppsched::daemon
