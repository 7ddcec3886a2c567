#pragma once
// A daemon's field table: the settings its configuration reader takes, each described once
// (dotted key, type, default, range, unit, help) and read through that description, so the
// table the daemon prints (`--schema`, JSON) is the one its reader applies. The experiment
// schema maps its keys onto these and takes their types, defaults and ranges from them (the
// committed copy: DAEMON_FIELDS in tools/oppsched/_generated.py; docs/architecture.md,
// "Field tables").
#include <optional>
#include <string>
#include <type_traits>

#include "oppsched/daemon/config.h"
#include "oppsched/daemon/field_spec.h"

namespace oppsched::daemon {

// Throws std::logic_error unless `n` is the mapping at f.section: a reader that reads a
// field from another mapping than its table says is a bug, found by the first test to run.
void check_section(const config_node& n, const field_spec& f);

// The value of `f` in `n` (its default when absent), checked against f.range; errors as
// config_node's, naming the dotted key and the value.
template <class T>
T read_field(const config_node& n, const field_spec& f) {
    check_section(n, f);  // and refuses a zero_off entry (no YAML reader takes one)
    if constexpr (std::is_same_v<T, bool>) {
        return n.get<bool>(f.name, f.default_number != 0.0);
    } else if constexpr (std::is_same_v<T, std::string>) {
        if (f.type == field_type::choice) return n.get_choice(f.name, f.default_text, f.choices);
        return n.get<std::string>(f.name, f.default_text);
    } else {
        return n.get<T>(f.name, static_cast<T>(f.default_number), f.range);
    }
}

// The value of numeric `f` in `n` where an explicit null also means "not set" (get_optional),
// checked against f.range; nullopt when absent or null (the caller's default, f's or another).
template <class T>
std::optional<T> read_optional_field(const config_node& n, const field_spec& f) {
    check_section(n, f);
    return n.get_optional<T>(f.name, f.range);
}

}  // namespace oppsched::daemon
