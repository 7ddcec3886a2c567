#pragma once
// A daemon's field table: the settings its configuration reader takes, each described once
// (dotted key, type, default, range, unit, help) and read through that description, so the
// table the daemon prints (`--schema`, JSON) is the one its reader applies. The experiment
// schema maps its keys onto these and takes their types, defaults and ranges from them (the
// committed copy: DAEMON_FIELDS in tools/oppsched/_generated.py; docs/architecture.md,
// "Field tables").
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "oppsched/daemon/config.h"

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

    std::string key() const { return section.empty() ? name : section + "." + name; }
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

// Throws std::logic_error unless `n` is the mapping at f.section: a reader that reads a
// field from another mapping than its table says is a bug, found by the first test to run.
void check_section(const config_node& n, const field_spec& f);

// The value of `f` in `n` (its default when absent), checked against f.range; errors as
// config_node's, naming the dotted key and the value.
template <class T>
T read_field(const config_node& n, const field_spec& f) {
    check_section(n, f);
    if constexpr (std::is_same_v<T, bool>) {
        return n.get<bool>(f.name, f.default_number != 0.0);
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (f.type == field_type::choice) return n.get_choice(f.name, f.default_text, f.choices);
        return n.get<std::string>(f.name, f.default_text);
    } else {
        return n.get<T>(f.name, static_cast<T>(f.default_number), f.range);
    }
}

// The table as one JSON document: {"daemon": NAME, "fields": [{"key", "type", "default",
// "min", "max", "min_open", "max_open", "violation", "choices", "unit", "help"}]}, the range
// keys as the MAC library's registries export theirs (null: unbounded / none).
std::string fields_json(const std::string& daemon, const std::vector<field_spec>& fields);

}  // namespace oppsched::daemon
