// Rate-limited logging: see oppsched/daemon/log.h.
#include "oppsched/daemon/log.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <ctime>

#include "oppsched/validation.h"

namespace oppsched::daemon {

void init_logging(const std::string& name, const std::string& level) {
    const auto lvl = spdlog::level::from_str(level);
    // from_str maps unknown names to off; only "off" itself may mean off.
    if (lvl == spdlog::level::off && level != "off")
        throw_invalid("log_level: '" + level +
                      "' not one of trace, debug, info, warn, error, critical, off");
    spdlog::drop(name);
    auto logger = spdlog::stderr_logger_mt(name);
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
    logger->set_level(lvl);
    logger->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(logger);
}

time_ns monotonic_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<time_ns>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

bool rate_limited_log::allow(std::string_view kind, time_ns now) {
    auto it = entries_.find(kind);
    if (it == entries_.end()) it = entries_.emplace(std::string(kind), log_entry{}).first;
    log_entry& e = it->second;
    if (!e.seen || now - e.last >= interval_) {
        e.seen = true;
        e.last = now;
        return true;
    }
    ++e.suppressed;
    return false;
}

std::uint64_t rate_limited_log::suppressed(std::string_view kind) const {
    const auto it = entries_.find(kind);
    return it == entries_.end() ? 0 : it->second.suppressed;
}

std::uint64_t rate_limited_log::take_suppressed(std::string_view kind) {
    const auto it = entries_.find(kind);
    if (it == entries_.end()) return 0;
    const std::uint64_t n = it->second.suppressed;
    it->second.suppressed = 0;
    return n;
}

}  // namespace oppsched::daemon
