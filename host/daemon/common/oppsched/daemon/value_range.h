#pragma once
// value_range: the interval a numeric setting must lie in, as config_node's readers check it
// (config.h) and as a field table describes it (field_spec.h). No YAML here, so a program
// that takes its settings from the command line (oppsched-delay) checks them with it too.
#include <limits>
#include <string>

namespace oppsched::daemon {

// An interval a numeric value must lie in. Default: anything finite.
struct value_range {
    double lo = -std::numeric_limits<double>::infinity();
    double hi = std::numeric_limits<double>::infinity();
    bool lo_open = false;
    bool hi_open = false;

    static value_range any() { return {}; }
    static value_range non_negative() { return {0.0, inf(), false, false}; }            // [0,inf)
    static value_range positive() { return {0.0, inf(), true, false}; }                 // (0,inf)
    static value_range at_least(double lo) { return {lo, inf(), false, false}; }        // [lo,inf)
    static value_range closed(double lo, double hi) { return {lo, hi, false, false}; }  // [lo,hi]
    static value_range open_closed(double lo, double hi) {
        return {lo, hi, true, false};
    }                                                                               // (lo,hi]
    static value_range open(double lo, double hi) { return {lo, hi, true, true}; }  // (lo,hi)
    static value_range closed_open(double lo, double hi) {
        return {lo, hi, false, true};
    }  // [lo,hi)

    bool contains(double v) const;
    std::string describe() const;  // e.g. "(0,1]", "[0,inf)"

  private:
    static constexpr double inf() { return std::numeric_limits<double>::infinity(); }
};

}  // namespace oppsched::daemon
