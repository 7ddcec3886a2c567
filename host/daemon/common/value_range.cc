// value_range: see oppsched/daemon/value_range.h.
#include "oppsched/daemon/value_range.h"

#include <cmath>
#include <sstream>

namespace oppsched::daemon {

namespace {

std::string fmt_num(double v) {
    std::ostringstream os;
    os.precision(12);
    os << v;
    return os.str();
}

}  // namespace

bool value_range::contains(double v) const {
    if (std::isnan(v)) return false;
    if (lo_open ? !(v > lo) : !(v >= lo)) return false;
    if (hi_open ? !(v < hi) : !(v <= hi)) return false;
    return true;
}

std::string value_range::describe() const {
    auto b = [](double x) {
        if (std::isinf(x)) return std::string(x < 0 ? "-inf" : "inf");
        return fmt_num(x);
    };
    return std::string(lo_open || std::isinf(lo) ? "(" : "[") + b(lo) + "," + b(hi) +
           (hi_open || std::isinf(hi) ? ")" : "]");
}

}  // namespace oppsched::daemon
