// Parameter ranges of the pluggable families (see oppsched/param_spec.h).
#include "oppsched/param_spec.h"

#include <array>
#include <cmath>

#include "oppsched/validation.h"

namespace oppsched {

std::string_view to_string(param_type t) {
    static constexpr std::array<std::string_view, 6> kNames = {"number",  "integer", "boolean",
                                                               "seconds", "choice",  "number_list"};
    return kNames.at(static_cast<std::size_t>(t));
}

namespace {
// A bound as errors print it: whole numbers in full ("1000000", not "1e+06"), others as
// format_number does.
std::string bound(double v) {
    if (std::fabs(v) < 1e15 && v == std::floor(v)) return std::to_string(std::llround(v));
    return format_number(v);
}
}  // namespace

bool param_range::contains(double v) const {
    if (!std::isfinite(v)) return false;
    const bool lo = min_open ? v > min : v >= min;
    const bool hi = max_open ? v < max : v <= max;
    return lo && hi;
}

std::string param_range::violation() const {
    const bool has_min = std::isfinite(min);
    const bool has_max = std::isfinite(max);
    if (has_min && !has_max) return (min_open ? "must be > " : "must be >= ") + bound(min);
    if (!has_min && has_max) return (max_open ? "must be < " : "must be <= ") + bound(max);
    if (!has_min && !has_max) return "must be finite";
    return std::string("not in ") + (min_open ? "(" : "[") + bound(min) + "," + bound(max) +
           (max_open ? ")" : "]");
}

void check_in_range(std::string_view label, double v, const param_range& range) {
    if (!range.contains(v)) throw_invalid(label, format_number(v), range.violation());
}

}  // namespace oppsched
