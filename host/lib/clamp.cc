// CLAMP router and client agents (Andrew & Hanly, CLAMP, §IV). See clamp.h.
#include "oppsched/clamp.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "oppsched/validation.h"

namespace oppsched::clamp {
namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

// ---------------------------------------------------------------------------------------
// router_agent

void router_agent_params::validate() const {
    if (!std::isfinite(a_bytes) || a_bytes < 0.0)
        throw_invalid("clamp.router.a_bytes", a_bytes, "not in [0, inf)");
    // Theorem 1 (§III-B): the fluid loop converges iff b < pi/2; outside that the
    // equilibrium q* = (k tau + a)/b is never reached, so we refuse it here.
    if (!std::isfinite(b) || b <= 0.0 || b >= kPi / 2.0)
        throw_invalid("clamp.router.b", b, "not in (0, pi/2) (Theorem 1: stable iff b < pi/2)");
    if (!std::isfinite(ema_rate_per_s) || ema_rate_per_s <= 0.0)
        throw_invalid("clamp.router.ema_rate_per_s", ema_rate_per_s, "not in (0, inf)");
}

router_agent::router_agent(const router_agent_params& params) : params_(params) {
    params_.validate();
}

void router_agent::on_arrival(time_ns now, std::size_t queue_bytes) {
    const double big_q = static_cast<double>(queue_bytes);
    if (!state_.has_arrival) {
        // No arrival n-1: I = infinity, exp(-2I) = 0, so q(1) = Q(1).
        state_.q_bytes = big_q;
        state_.has_arrival = true;
    } else {
        // §IV-A: q(n) = exp(-2I) q(n-1) + (1 - exp(-2I)) Q(n), I in seconds.
        const double interval_s = to_seconds(std::max<time_ns>(now - state_.last_arrival, 0));
        const double keep = std::exp(-params_.ema_rate_per_s * interval_s);
        state_.q_bytes = keep * state_.q_bytes + (1.0 - keep) * big_q;
    }
    state_.last_arrival = std::max(now, state_.last_arrival);
    ++stats_.arrivals;
}

double router_agent::peek_price(double mu_c_bytes_per_s) const {
    if (!std::isfinite(mu_c_bytes_per_s) || mu_c_bytes_per_s <= 0.0)
        throw_invalid("clamp.router.mu_c", mu_c_bytes_per_s, "not in (0, inf) bytes/s");
    // Eq. 13 (with eq. 7's b; the paper's b = 1): the explicit max(., 0) keeps a queue
    // below a/b from producing a negative price, i.e. "multiplicative increase".
    return std::max((params_.b * state_.q_bytes - params_.a_bytes) / mu_c_bytes_per_s, 0.0);
}

double router_agent::price(double mu_c_bytes_per_s) {
    const double p = peek_price(mu_c_bytes_per_s);
    ++stats_.prices;
    if (p > 0.0) ++stats_.positive_prices;
    return p;
}

void router_agent::reset() {
    state_ = {};
    stats_ = {};
}

// ---------------------------------------------------------------------------------------
// client_agent

void client_agent_params::validate() const {
    if (!std::isfinite(tau_bytes) || tau_bytes <= 0.0)
        throw_invalid("clamp.client.tau_bytes", tau_bytes, "not in (0, inf)");
    if (alpha_packets < 1 || alpha_packets > 100'000'000)
        throw_invalid("clamp.client.alpha_packets", alpha_packets, "not in [1, 100000000]");
    if (!std::isfinite(beta) || beta <= 0.0 || beta >= 1.0)
        throw_invalid("clamp.client.beta", beta, "not in (0, 1)");
    if (mss_bytes < 1) throw_invalid("clamp.client.mss_bytes", mss_bytes, "not in [1, inf)");
    if (!std::isfinite(max_increase_bytes) || max_increase_bytes <= 0.0)
        throw_invalid("clamp.client.max_increase_bytes", max_increase_bytes, "not in (0, inf)");
    if (!std::isfinite(min_window_bytes) || min_window_bytes < 0.0)
        throw_invalid("clamp.client.min_window_bytes", min_window_bytes, "not in [0, inf)");
    if (!std::isfinite(slow_start_threshold_bytes) || slow_start_threshold_bytes < 0.0)
        throw_invalid("clamp.client.slow_start_threshold_bytes", slow_start_threshold_bytes,
                      "not in [0, inf)");
    if (dupack_threshold < 1)
        throw_invalid("clamp.client.dupack_threshold", dupack_threshold, "not in [1, inf)");
    if (!std::isfinite(mu_min_span_s) || mu_min_span_s < 0.0 || mu_min_span_s > 3600.0)
        throw_invalid("clamp.client.mu_min_span_s", mu_min_span_s, "not in [0, 3600]");
}

client_agent::client_agent(const client_agent_params& params) : params_(params) {
    params_.validate();
    ring_t_.assign(params_.alpha_packets + 1, 0);
    ring_s_.assign(params_.alpha_packets + 1, 0);
    ring_seq_.assign(params_.alpha_packets + 1, 0);
    reset();
}

double client_agent::min_window() const {
    return params_.min_window_bytes > 0.0 ? params_.min_window_bytes
                                          : static_cast<double>(params_.mss_bytes);
}

void client_agent::reset() {
    state_ = {};
    stats_ = {};
    // §IV-C: "a new CLAMP connection starts with w(0) = MSS".
    state_.w_bytes = static_cast<double>(params_.mss_bytes);
    state_.awnd_bytes = state_.w_bytes;
    ring_head_ = 0;
    ring_count_ = 0;
    ring_bytes_ = 0;
    ring_seq_bytes_ = 0;
}

void client_agent::end_slow_start_halving() {
    // §IV-C: "The receiver then sets w(t_{k+1}) <- w(t_k)/2 ~ w(t_k - RTT)": the congestion
    // seen now reflects the window of one RTT ago. We apply it at once, so the ACK for
    // this packet already carries it (the ACK rewriter keeps the right edge from moving
    // left, so the sender sees the reduction as the window drains).
    state_.slow_start = false;
    state_.w_bytes = std::max(state_.w_bytes / 2.0, min_window());
}

std::uint32_t client_agent::on_data(time_ns now, std::uint32_t size_bytes, double price_s,
                                    std::uint32_t awnd_os_bytes, std::uint32_t seq_bytes) {
    if (!std::isfinite(price_s) || price_s < 0.0)
        throw_invalid("clamp.client.price_s", price_s, "not in [0, inf)");
    if (seq_bytes == 0) seq_bytes = size_bytes;  // one unit (clamp.h)
    const bool first = state_.packets == 0;
    const double dt_s = first ? 0.0 : to_seconds(std::max<time_ns>(now - state_.last_t, 0));

    // --- 1. Eq. 15: mu_hat(t_k) = sum_{i=k-alpha}^{k} s_i / (t_k - t_{k-alpha}), s_i in IP
    // bytes, the unit of the AP's q and mu_c (clamp.h), so that p mu_hat = tau is eq. 11.
    // As printed the sum has alpha+1 terms over alpha intervals; we keep it exactly (the
    // bias, a factor (alpha+1)/alpha = 1.001, is common to all flows and so does not
    // change the fair share). Before alpha+1 packets have arrived, all packets so far.
    const std::size_t cap = ring_t_.size();  // alpha + 1
    if (ring_count_ == cap) {
        ring_bytes_ -= ring_s_[ring_head_];
        ring_seq_bytes_ -= ring_seq_[ring_head_];
        ring_t_[ring_head_] = now;
        ring_s_[ring_head_] = size_bytes;
        ring_seq_[ring_head_] = seq_bytes;
        ring_head_ = (ring_head_ + 1) % cap;
    } else {
        const std::size_t idx = (ring_head_ + ring_count_) % cap;
        ring_t_[idx] = now;
        ring_s_[idx] = size_bytes;
        ring_seq_[idx] = seq_bytes;
        ++ring_count_;
    }
    ring_bytes_ += size_bytes;
    ring_seq_bytes_ += seq_bytes;
    // Window (sequence-space) bytes per IP byte over the same packets: converts eq. 14's
    // step and eq. 16's rate into the unit of w and AWND. 1 when the caller gives one unit.
    const double seq_per_ip =
        ring_bytes_ > 0 ? static_cast<double>(ring_seq_bytes_) / static_cast<double>(ring_bytes_)
                        : 1.0;
    if (ring_count_ >= 2) {
        const time_ns span = now - ring_t_[ring_head_];
        // Start-up: trusted once the window spans mu_min_span_s or is full (clamp.h).
        const bool spans = ring_count_ == cap || to_seconds(span) >= params_.mu_min_span_s;
        if (span > 0 && (state_.mu_valid || spans)) {
            state_.mu_hat = static_cast<double>(ring_bytes_) / to_seconds(span);
            state_.mu_valid = true;
        }  // else: every sample at one instant; keep the previous estimate
    }

    // --- 2. Eq. 16: d_hat(t_k) = (1 - beta) d_hat(t_{k-1}) + beta AWND / mu_hat(t_k), with
    // AWND (payload bytes) over the payload rate, so that d_hat is the RTT in seconds.
    if (state_.mu_valid) {
        // AWND in force at t_k
        const double sample = state_.awnd_bytes / (seq_per_ip * state_.mu_hat);
        if (!state_.d_valid) {
            state_.d_hat = sample;
            state_.d_valid = true;
        } else {
            state_.d_hat = (1.0 - params_.beta) * state_.d_hat + params_.beta * sample;
        }
    }

    // --- 3. Eq. 14: Delta w(t_k) = [(tau - p mu_hat)/d_hat] (t_k - t_{k-1}), IP bytes.
    const bool dw_defined = state_.mu_valid && state_.d_valid && state_.d_hat > 0.0 && !first;
    const double dw =
        dw_defined ? (params_.tau_bytes - price_s * state_.mu_hat) / state_.d_hat * dt_s : 0.0;
    state_.last_delta_w = dw;

    // --- 4. Window update.
    if (state_.slow_start) {
        if (dw_defined && dw < 0.0) {
            ++stats_.slow_start_exits_delta_w;
            end_slow_start_halving();
        } else {
            // §IV-C: w(t_k) <- w(t_k) + MSS "instead of using (14)".
            state_.w_bytes += static_cast<double>(params_.mss_bytes);
            if (params_.slow_start_threshold_bytes > 0.0 &&
                state_.w_bytes >= params_.slow_start_threshold_bytes) {
                state_.slow_start = false;  // like TCP's ssthresh: no halving
                ++stats_.slow_start_exits_threshold;
            }
        }
    } else {
        // Eq. 14's step in the window's unit (sequence space, clamp.h). §IV-B: clipped
        // above at 10 kB ("to avoid sudden increases after idle periods") and below at
        // -s_k counted as the packet's payload: the ACK for it advances by its payload, so
        // the right edge of the window never moves left (RFC 793 p. 42).
        double step = seq_per_ip * dw;
        const double lo = -static_cast<double>(seq_bytes);
        if (step > params_.max_increase_bytes) {
            step = params_.max_increase_bytes;
            ++stats_.clipped_high;
        } else if (step < lo) {
            step = lo;
            ++stats_.clipped_low;
        }
        state_.w_bytes += step;
        if (state_.w_bytes < min_window()) {
            state_.w_bytes = min_window();
            ++stats_.floored;
        }
    }

    // --- 5. Eq. 17: AWND(t_k) = min(w(t_k), AWND_os).
    const double os = static_cast<double>(awnd_os_bytes);
    if (os < state_.w_bytes) ++stats_.os_limited;
    state_.awnd_bytes = std::min(state_.w_bytes, os);

    state_.last_t = first ? now : std::max(now, state_.last_t);
    ++state_.packets;
    ++stats_.packets;
    return static_cast<std::uint32_t>(std::floor(state_.awnd_bytes));
}

void client_agent::on_dupack() {
    if (!state_.slow_start) return;  // CLAMP congestion avoidance does not react to loss
    if (++state_.dupacks >= params_.dupack_threshold) {
        ++stats_.slow_start_exits_dupack;
        state_.dupacks = 0;
        end_slow_start_halving();
        state_.awnd_bytes = std::min(state_.awnd_bytes, state_.w_bytes);
    }
}

void client_agent::on_new_ack() { state_.dupacks = 0; }

// ---------------------------------------------------------------------------------------
// mu_c_estimator

void mu_c_params::validate() const {
    if (init_slots < 1) throw_invalid("clamp.mu_init_slots", "0", "not >= 1");
    if (!(ema_weight > 0 && ema_weight <= 1))
        throw_invalid("clamp.mu_ema_weight", format_number(ema_weight), "not in (0,1]");
    if (!(slot_s > 0) || !std::isfinite(slot_s))
        throw_invalid("clamp.mu_slot_s", format_number(slot_s), "not > 0");
}

mu_c_estimator::mu_c_estimator(const mu_c_params& params) : params_(params) { params_.validate(); }

void mu_c_estimator::on_backlogged_slot(std::uint64_t served_bytes) {
    const double sample_bps = static_cast<double>(served_bytes) * 8.0 / params_.slot_s;
    if (!known_) {
        acc_bytes_ += static_cast<double>(served_bytes);
        if (++n_ >= params_.init_slots) {
            bps_ = acc_bytes_ * 8.0 / (n_ * params_.slot_s);
            known_ = true;
        }
    } else {
        bps_ = (1.0 - params_.ema_weight) * bps_ + params_.ema_weight * sample_bps;
    }
}

std::optional<double> mu_c_estimator::bps() const {
    if (!known_) return std::nullopt;
    return bps_;
}

}  // namespace oppsched::clamp
