// The CLAMP slot link model (Andrew & Hanly, CLAMP, §V-B, eq. 18). See clamp_link.h.
#include "oppsched/clamp_link.h"

#include <algorithm>
#include <cmath>

#include "oppsched/validation.h"

namespace oppsched::channel {

// ---------------------------------------------------------------------------------------
// clamp_link (Andrew & Hanly, CLAMP, §V-B)

clamp_link_params clamp_link_params::high_rate(int max_attempts) {
    clamp_link_params p;
    p.w0_hz = 4.3e6;
    p.cmax_bps = 10e6;
    p.max_attempts = max_attempts;
    return p;
}

clamp_link_params clamp_link_params::low_rate(int max_attempts) {
    clamp_link_params p;
    p.w0_hz = 620e3;
    p.cmax_bps = 1.44e6;
    p.max_attempts = max_attempts;
    return p;
}

void clamp_link_params::validate() const {
    if (!std::isfinite(slot_s) || slot_s <= 0.0)
        throw_invalid("clamp_link.slot_s", slot_s, "not in (0, inf)");
    if (!std::isfinite(w0_hz) || w0_hz <= 0.0)
        throw_invalid("clamp_link.w0_hz", w0_hz, "not in (0, inf)");
    if (!std::isfinite(cmax_bps) || cmax_bps <= 0.0)
        throw_invalid("clamp_link.cmax_bps", cmax_bps, "not in (0, inf)");
    if (!std::isfinite(target_loss) || target_loss <= 0.0 || target_loss >= 1.0)
        throw_invalid("clamp_link.target_loss", target_loss, "not in (0, 1)");
    if (max_attempts < 1) throw_invalid("clamp_link.max_attempts", max_attempts, "not in [1, inf)");
    if (scope != margin_scope::after_retransmissions && scope != margin_scope::per_attempt)
        throw_invalid("clamp_link.scope", static_cast<int>(scope), "not a margin_scope");
    if (!std::isfinite(margin_step) || margin_step < 0.0 || margin_step > 1.0)
        throw_invalid("clamp_link.margin_step", margin_step, "not in [0, 1]");
    if (!std::isfinite(margin_min) || margin_min < kClampMarginFloor || margin_min >= 1.0)
        throw_invalid("clamp_link.margin_min", margin_min, "not in [-1000, 1)");
    if (!std::isfinite(margin_max) || margin_max < margin_min || margin_max >= 1.0)
        throw_invalid("clamp_link.margin_max", margin_max, "not in [margin_min, 1)");
    if (!std::isfinite(margin_init) || margin_init < margin_min || margin_init > margin_max)
        throw_invalid("clamp_link.margin_init", margin_init, "not in [margin_min, margin_max]");
}

const char* to_string(slot_outcome o) {
    switch (o) {
        case slot_outcome::delivered:
            return "delivered";
        case slot_outcome::retry:
            return "retry";
        case slot_outcome::dropped:
            return "dropped";
    }
    return "?";
}

clamp_link::clamp_link(const clamp_link_params& params) : params_(params) {
    params_.validate();
    reset();
}

void clamp_link::reset() {
    state_ = {};
    state_.margin = params_.margin_init;
    stats_ = {};
}

double clamp_link::rate_bps(double snr_start) const {
    // Eq. 18 (per second). log2: C_max = W0 log2(1 + SNR_ave) in both of the paper's rate
    // cases, see clamp_link_params::high_rate. A negative or NaN SNR carries nothing.
    const double n = std::isnan(snr_start) ? 0.0 : std::max(snr_start, 0.0);
    const double shannon = params_.w0_hz * std::log2(1.0 + (1.0 - state_.margin) * n);
    return std::min(shannon, params_.cmax_bps);
}

double clamp_link::capacity_bits(double snr_end) const {
    const double n = std::isnan(snr_end) ? 0.0 : std::max(snr_end, 0.0);
    // Same association as rate_bits() (slot * (W0 log2)), so equal SNRs compare equal.
    return params_.slot_s * (params_.w0_hz * std::log2(1.0 + n));
}

void clamp_link::observe(double e) {
    // Robbins-Monro: m <- clamp(m + gamma (e - target)); fixed point P(e = 1 | m) = target.
    const double m = state_.margin + params_.margin_step * (e - params_.target_loss);
    state_.margin = std::clamp(m, params_.margin_min, params_.margin_max);
}

slot_outcome clamp_link::on_feedback(bool success) {
    ++stats_.attempts;
    slot_outcome out;
    if (success) {
        state_.consecutive_failures = 0;
        ++stats_.delivered;
        out = slot_outcome::delivered;
    } else {
        ++stats_.errors;
        // §V-B: "If n consecutive attempts to a given destination fail, then all packets
        // which would have been completed by that transmission are dropped."
        if (++state_.consecutive_failures >= params_.max_attempts) {
            state_.consecutive_failures = 0;
            ++stats_.dropped;
            out = slot_outcome::dropped;
        } else {
            out = slot_outcome::retry;
        }
    }
    if (params_.scope == margin_scope::per_attempt) {
        observe(success ? 0.0 : 1.0);
    } else if (out != slot_outcome::retry) {
        observe(out == slot_outcome::dropped ? 1.0 : 0.0);
    }
    return out;
}

clamp_link::attempt clamp_link::transmit(double snr_start, double snr_end) {
    const double bps = rate_bps(snr_start);
    if (bps >= params_.cmax_bps) ++stats_.capped;
    const double bits = params_.slot_s * bps;
    const bool error = is_error(bits, snr_end);
    const slot_outcome outcome = on_feedback(!error);
    if (!error) stats_.bits_delivered += bits;
    return {bits, error, outcome};
}

}  // namespace oppsched::channel
