#pragma once
// Small helpers shared by the block implementations (not public API).
#include <gnuradio/logger.h>
#include <gnuradio/oppsched/numerology.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

//! The numerology of a block: a named profile at \p sample_rate, with the slot duration
//! overridden when \p slot_duration_s > 0, payload FEC \p fec ("ldpc" / "conv"). Throws
//! std::invalid_argument naming the field.
inline numerology block_numerology(const std::string& profile, double sample_rate,
                                   double slot_duration_s, const std::string& fec = "ldpc") {
    if (!(sample_rate > 0) || !std::isfinite(sample_rate))
        throw std::invalid_argument("sample_rate: " + std::to_string(sample_rate) + " must be > 0");
    if (!std::isfinite(slot_duration_s) || slot_duration_s < 0)
        throw std::invalid_argument("slot_duration_s: " + std::to_string(slot_duration_s) +
                                    " must be >= 0");
    numerology n = numerology::profile(profile, sample_rate, fec);
    if (slot_duration_s == 0) return n;
    numerology_params p = n.params();
    p.slot_duration = slot_duration_s;
    return numerology(p);
}

//! Lets a message through at most once per second per kind (docs/daemons.md: a bad
//! message is counted always, logged at most once a second).
class log_limiter final {
  public:
    bool allow() {
        const auto now = std::chrono::steady_clock::now();
        if (now - d_last < std::chrono::seconds(1) && d_any) return false;
        d_last = now;
        d_any = true;
        return true;
    }

  private:
    std::chrono::steady_clock::time_point d_last{};
    bool d_any = false;
};

}  // namespace oppsched
}  // namespace gr
