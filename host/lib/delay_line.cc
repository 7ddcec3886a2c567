// Delay line of the wired-path emulator. See oppsched/delay_line.h for the model.
#include "oppsched/delay_line.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "oppsched/validation.h"

namespace oppsched::wired {
namespace {

constexpr time_ns kMaxDelay = 60 * kNsPerSec;
constexpr double kMinRate = 1e3;
constexpr double kMaxRate = 1e12;

}  // namespace

void delay_line_params::validate() const {
    if (delay < 0 || delay > kMaxDelay)
        throw_invalid("delay_line.delay", delay, "ns not in [0, 60 s]");
    if (!std::isfinite(rate_bps) ||
        (rate_bps != 0.0 && (rate_bps < kMinRate || rate_bps > kMaxRate)))
        throw_invalid("delay_line.rate_bps", rate_bps, "not 0 (unlimited) or in [1e3, 1e12]");
}

delay_line::delay_line(const delay_line_params& params) : params_(params) {
    params_.validate();
    if (params_.rate_bps > 0.0) ns_per_byte_ = 8.0e9 / params_.rate_bps;
}

void delay_line::expire_serialised(time_ns now) {
    while (!serialising_.empty() && serialising_.front().end <= now) {
        serialising_bytes_ -= serialising_.front().wire_bytes;
        serialising_.pop_front();
    }
}

std::size_t delay_line::backlog_bytes(time_ns now) {
    expire_serialised(now);
    return serialising_bytes_;
}

enqueue_result delay_line::enqueue(time_ns now, std::vector<std::uint8_t> data,
                                   std::size_t wire_bytes) {
    // Keep t_k non-decreasing: this is what makes e_k, due_k non-decreasing (no reordering).
    if (any_arrival_ && now < last_arrival_) {
        now = last_arrival_;
        ++stats_.clamped_arrivals;
    }
    last_arrival_ = now;
    any_arrival_ = true;

    const bool rate_limited = ns_per_byte_ > 0.0;
    if (rate_limited) {
        expire_serialised(now);
        if (params_.limit_bytes != 0 && serialising_bytes_ + wire_bytes > params_.limit_bytes) {
            ++stats_.dropped_limit;
            return enqueue_result::dropped_limit;
        }
    }
    if (params_.hold_bytes != 0 && held_bytes_ + data.size() > params_.hold_bytes) {
        ++stats_.dropped_hold;
        return enqueue_result::dropped_hold;
    }

    time_ns end = now;
    if (rate_limited) {
        // e_k = max(t_k, e_{k-1}) + 8 L_k / R, whole ns, fraction carried forward.
        const time_ns start = std::max(now, last_end_);
        const double tx = static_cast<double>(wire_bytes) * ns_per_byte_ + carry_ns_;
        const double whole = std::floor(tx);
        carry_ns_ = tx - whole;
        end = start + static_cast<time_ns>(whole);
        serialising_.push_back({end, wire_bytes});
        serialising_bytes_ += wire_bytes;
    }
    last_end_ = end;

    delayed_frame f;
    f.wire_bytes = wire_bytes;
    f.arrival = now;
    f.due = end + params_.delay;
    held_bytes_ += data.size();
    stats_.enqueued_bytes += data.size();
    ++stats_.enqueued;
    f.data = std::move(data);
    frames_.push_back(std::move(f));
    return enqueue_result::accepted;
}

std::optional<time_ns> delay_line::next_due() const {
    if (frames_.empty()) return std::nullopt;
    return frames_.front().due;
}

std::optional<delayed_frame> delay_line::pop_due(time_ns now) {
    if (frames_.empty() || frames_.front().due > now) return std::nullopt;
    delayed_frame f = std::move(frames_.front());
    frames_.pop_front();
    held_bytes_ -= f.data.size();
    ++stats_.released;
    stats_.released_bytes += f.data.size();
    return f;
}

}  // namespace oppsched::wired
