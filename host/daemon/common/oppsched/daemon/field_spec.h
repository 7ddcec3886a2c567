#pragma once
// A field table's entries (dotted key, type, default, range, unit, help) and the JSON that
// prints them (`--schema`), apart from any reader: the YAML daemons read theirs through
// field_table.h, oppsched-delay checks its command-line options against its own
// (host/delay/main.cc). docs/architecture.md, "Field tables".
#include <string>
#include <utility>
#include <vector>

#include "oppsched/daemon/value_range.h"

namespace oppsched::daemon {

enum class field_type { integer, number, boolean, string, choice };

struct field_spec {
    std::string section;  // dotted path of the mapping that holds it: "" (the root), "harq"
    std::string name;     // its key in that mapping: "lead_slots", "processes"
    field_type type = field_type::number;
    double default_number = 0.0;       // integer, number, boolean (0 or 1)
    std::string default_text;          // string, choice
    value_range range;                 // integer, number
    std::vector<std::string> choices;  // choice
    std::string unit;                  // "" when dimensionless
    std::string help;
    // integer, number: 0 is accepted too, as "off" (no rate limit); the YAML readers
    // (read_field) take no such entry, a command line's may (oppsched-delay's --rate-bps).
    bool zero_off = false;

    std::string key() const { return section.empty() ? name : section + "." + name; }
    // Whether v is in range (or 0 with zero_off); violation() is the error's wording.
    bool accepts(double v) const { return (zero_off && v == 0.0) || range.contains(v); }
    std::string violation() const {
        return (zero_off ? "not 0 or in " : "not in ") + range.describe();
    }
};

// The entries of a table, one constructor per type.
inline field_spec integer_field(std::string section, std::string name, double def,
                                value_range range, std::string unit, std::string help) {
    return {std::move(section), std::move(name), field_type::integer, def, "", range, {},
            std::move(unit),    std::move(help)};
}
inline field_spec number_field(std::string section, std::string name, double def, value_range range,
                               std::string unit, std::string help) {
    return {std::move(section), std::move(name), field_type::number, def, "", range, {},
            std::move(unit),    std::move(help)};
}
inline field_spec boolean_field(std::string section, std::string name, bool def, std::string help) {
    return {
        std::move(section), std::move(name), field_type::boolean, def ? 1.0 : 0.0, "", {}, {}, "",
        std::move(help)};
}
inline field_spec choice_field(std::string section, std::string name, std::string def,
                               std::vector<std::string> choices, std::string help) {
    return {std::move(section), std::move(name),
            field_type::choice, 0.0,
            std::move(def),     {},
            std::move(choices), "",
            std::move(help)};
}

// The table as one JSON document: {"daemon": NAME, "fields": [{"key", "type", "default",
// "min", "max", "min_open", "max_open", "zero_off", "violation", "choices", "unit", "help"}]},
// the range keys as the MAC library's registries export theirs (null: unbounded / none).
std::string fields_json(const std::string& daemon, const std::vector<field_spec>& fields);

}  // namespace oppsched::daemon
