#pragma once
// The description of one parameter of a pluggable algorithm (a scheduler kind of sched.h, an
// AQM kind of aqm.h): its name, type, default, range, unit and help. Each family registers
// every kind once with the specs of its parameters (sched::scheduler_kinds(),
// aqm::param_fields()); the library's validators check values against these ranges, the apd's
// YAML reader and the Python bindings read parameters through them, and the experiment
// schema, macsim and docs/algorithms.md take kinds, defaults and ranges from what the bindings
// export (oppsched.mac.scheduler_registry(), aqm_registry()). Nothing else lists them.
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace oppsched {

// seconds: a time given in seconds (the name ends in _s); number_list: a list of numbers,
// each in the range.
enum class param_type : std::uint8_t { number, integer, boolean, seconds, choice, number_list };
std::string_view to_string(param_type t);

using param_value = std::variant<bool, std::uint64_t, double, std::string, std::vector<double>>;

// An interval of the real line, each end open or closed (infinite ends are always open).
// A value is in it iff it is finite and between the ends, so NaN and infinities never are.
struct param_range {
    double min = -std::numeric_limits<double>::infinity();
    double max = std::numeric_limits<double>::infinity();
    bool min_open = true;
    bool max_open = true;

    static param_range any() { return {}; }
    static param_range positive() { return {0.0, kInf, true, true}; }         // (0, inf)
    static param_range non_negative() { return {0.0, kInf, false, true}; }    // [0, inf)
    static param_range above(double a) { return {a, kInf, true, true}; }      // (a, inf)
    static param_range at_least(double a) { return {a, kInf, false, true}; }  // [a, inf)
    static param_range open_closed(double a, double b) { return {a, b, true, false}; }
    static param_range closed(double a, double b) { return {a, b, false, false}; }

    bool contains(double v) const;
    // How a value outside reads in an error, after the value: "must be > 0", "must be >= 1",
    // "not in (0,1]", "not in [1,1000000]".
    std::string violation() const;

    static constexpr double kInf = std::numeric_limits<double>::infinity();
};

// Throws std::invalid_argument("<label>: <value> <range.violation()>") if v is outside.
void check_in_range(std::string_view label, double v, const param_range& range);

}  // namespace oppsched
