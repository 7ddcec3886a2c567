#pragma once
// Types shared by the MAC library and the PHY: the caller's clock and the result of an
// operation on untrusted input.
#include <cstdint>
#include <string>
#include <utility>
#include <variant>

namespace oppsched {

// Time on the caller's clock, in nanoseconds. Algorithms never read a clock themselves:
// `now` is passed in, so the daemon uses CLOCK_MONOTONIC and tests use a fake clock.
using time_ns = std::int64_t;
constexpr time_ns kNsPerSec = 1'000'000'000;
constexpr time_ns kNsPerMs = 1'000'000;
constexpr double to_seconds(time_ns t) { return static_cast<double>(t) * 1e-9; }
constexpr time_ns from_seconds(double s) { return static_cast<time_ns>(s * 1e9); }

// Result of an operation on untrusted input: a value, or an error that names the field
// and the value that was wrong.
struct error_info {
    std::string message;
};

template <class T>
class expected {
  public:
    expected(T value) : v_(std::move(value)) {}           // NOLINT: implicit by design
    expected(error_info error) : v_(std::move(error)) {}  // NOLINT: implicit by design
    bool ok() const { return std::holds_alternative<T>(v_); }
    explicit operator bool() const { return ok(); }
    const T& value() const& { return std::get<T>(v_); }
    T& value() & { return std::get<T>(v_); }
    T&& value() && { return std::get<T>(std::move(v_)); }
    const T* operator->() const { return &std::get<T>(v_); }
    const std::string& error() const { return std::get<error_info>(v_).message; }

  private:
    std::variant<T, error_info> v_;
};

}  // namespace oppsched
