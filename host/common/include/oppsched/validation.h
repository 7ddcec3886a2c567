#pragma once
// The one way configuration errors are reported: std::invalid_argument whose message names
// the field and the value ("pf.alpha: 1.5 must be in (0, 1)"). pybind11 turns it into a
// Python ValueError. Untrusted input (packets, frames, messages) uses Result<T> instead.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace oppsched {

/// A number as every error message prints it: std::ostream's default format (%g, six
/// significant digits), so "0.5", "1e+12", "nan".
inline std::string format_number(double v) {
    std::ostringstream s;
    s << v;
    return s.str();
}

/// Throws std::invalid_argument("<field>: <value> <why>"); a double value prints as
/// format_number() prints it.
template <class T>
[[noreturn]] void throw_invalid(std::string_view field, const T& value, std::string_view why) {
    std::ostringstream s;
    s << field << ": " << value << " " << why;
    throw std::invalid_argument(s.str());
}

/// Throws std::invalid_argument(message), for checks that involve several fields.
[[noreturn]] inline void throw_invalid(const std::string& message) {
    throw std::invalid_argument(message);
}

}  // namespace oppsched
