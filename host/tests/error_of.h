#pragma once
// The message of the std::invalid_argument a call throws, for tests of configuration
// checks ("(no exception)" when it throws none).

#include <stdexcept>
#include <string>

template <class F>
std::string error_of(F&& f) {
    try {
        f();
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "(no exception)";
}
