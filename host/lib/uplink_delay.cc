// The client's uplink delay: see oppsched/uplink_delay.h.
#include "oppsched/uplink_delay.h"

#include <stdexcept>
#include <utility>

#include "oppsched/validation.h"

namespace oppsched::client {
namespace {

constexpr time_ns kMaxUplinkDelay = 10 * kNsPerSec;

}  // namespace

void uplink_delay_params::validate() const {
    if (delay < 0 || delay > kMaxUplinkDelay)
        throw_invalid("client.uplink_delay", delay, "ns not in [0, 10 s]");
    if (hold_bytes < wire::kMaxFrameLen)
        throw_invalid("client.uplink_hold_bytes", hold_bytes, "not >= 70000 (one frame)");
}

uplink_delay::uplink_delay(const uplink_delay_params& params)
    : params_([&] {
          params.validate();
          return params;
      }()),
      line_([&] {
          wired::delay_line_params d;
          d.delay = params_.delay;
          d.hold_bytes = params_.hold_bytes;
          return d;
      }()) {}

bool uplink_delay::enqueue(time_ns now, const wire::message& m) {
    std::vector<std::uint8_t> frame;
    try {
        frame = wire::encode(m, next_seq_);
    } catch (const std::invalid_argument&) {
        ++stats_.encode_errors;
        return false;
    }
    ++next_seq_;  // consumed even if dropped below: the AP counts the gap
    if (line_.enqueue(now, std::move(frame)) != wired::enqueue_result::accepted) {
        ++stats_.dropped;
        return false;
    }
    ++stats_.enqueued;
    return true;
}

std::vector<std::vector<std::uint8_t>> uplink_delay::pop_due(time_ns now) {
    std::vector<std::vector<std::uint8_t>> out;
    while (auto f = line_.pop_due(now)) {
        out.push_back(std::move(f->data));
        ++stats_.released;
    }
    return out;
}

}  // namespace oppsched::client
