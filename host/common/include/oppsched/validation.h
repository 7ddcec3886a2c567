#pragma once
// The one way configuration errors are reported: std::invalid_argument whose message names
// the field and the value ("pf.alpha: 1.5 must be in (0, 1)"). pybind11 turns it into a
// Python ValueError. Untrusted input (packets, frames, messages) uses Result<T> instead.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace oppsched {

/// Throws std::invalid_argument("<field>: <value> <why>").
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
