#pragma once
// Rate-limited logging through spdlog (docs/daemons.md: "a bad message is logged at most once
// a second per kind"), and the daemons' clock.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "oppsched/common.h"

namespace oppsched::daemon {

// Makes spdlog's default logger write to stderr (never stdout) as
// "[2024-01-01 12:00:00.123] [name] [warning] message", at `level`: trace, debug, info, warn,
// error, critical or off. Throws std::invalid_argument("log_level: 'x' not one of ...").
void init_logging(const std::string& name, const std::string& level = "info");

// CLOCK_MONOTONIC in ns (the slot clock of docs/daemons.md is on this clock).
time_ns monotonic_ns();

class rate_limited_log final {
  public:
    explicit rate_limited_log(time_ns interval = kNsPerSec) : interval_(interval) {}

    // true if a message of `kind` may be logged at `now` (the first one always may; then at
    // most one per interval). A false is counted as suppressed for that kind.
    bool allow(std::string_view kind, time_ns now);
    // Suppressed since the last allowed message of this kind (reset by allow() == true after
    // being read by warn()).
    std::uint64_t suppressed(std::string_view kind) const;

    // spdlog::warn with the monotonic clock, appending "(N similar suppressed)" when some were.
    template <class... Args>
    void warn(std::string_view kind, spdlog::format_string_t<Args...> fmt, Args&&... args) {
        if (!allow(kind, monotonic_ns())) return;
        const std::uint64_t n = take_suppressed(kind);
        std::string msg = fmt::format(fmt, std::forward<Args>(args)...);
        if (n > 0) msg += fmt::format(" ({} similar suppressed)", n);
        spdlog::warn("{}", msg);
    }

  private:
    struct log_entry {
        time_ns last = 0;
        bool seen = false;
        std::uint64_t suppressed = 0;
    };
    std::uint64_t take_suppressed(std::string_view kind);
    time_ns interval_;
    std::map<std::string, log_entry, std::less<>> entries_;
};

}  // namespace oppsched::daemon
