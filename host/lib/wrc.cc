// Weighted receiver-based rate control (Nandagopal et al., Fig. 3). See wrc.h.
#include "oppsched/wrc.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "oppsched/validation.h"

namespace oppsched::wrc {
namespace {

bool finite_positive(double v) { return std::isfinite(v) && v > 0.0; }

time_ns seconds_to_ns(double s) { return static_cast<time_ns>(std::llround(s * 1e9)); }

}  // namespace

const char* to_string(differentiation d) {
    switch (d) {
        case differentiation::weighted_increase:
            return "weighted_increase";
        case differentiation::weighted_decrease:
            return "weighted_decrease";
    }
    return "?";
}

std::optional<differentiation> differentiation_from_string(const std::string& s) {
    if (s == "weighted_increase") return differentiation::weighted_increase;
    if (s == "weighted_decrease") return differentiation::weighted_decrease;
    return std::nullopt;
}

const char* to_string(decision d) {
    switch (d) {
        case decision::none:
            return "none";
        case decision::increase:
            return "increase";
        case decision::decrease:
            return "decrease";
        case decision::random_loss:
            return "random_loss";
        case decision::congestion_loss:
            return "congestion_loss";
        case decision::congestion_ignored:
            return "congestion_ignored";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------
// rate_controller

void rate_controller_params::validate() const {
    if (!finite_positive(weight)) throw_invalid("wrc.weight", weight, "not in (0, inf)");
    if (!finite_positive(epoch_s)) throw_invalid("wrc.epoch_s", epoch_s, "not in (0, inf)");
    if (!finite_positive(alpha_pps)) throw_invalid("wrc.alpha_pps", alpha_pps, "not in (0, inf)");
    if (!std::isfinite(delta_initial) || delta_initial <= 0.0 || delta_initial >= 1.0)
        throw_invalid("wrc.delta_initial", delta_initial, "not in (0, 1)");
    if (!std::isfinite(delta_max) || delta_max < delta_initial || delta_max >= 1.0)
        throw_invalid(
            "wrc.delta_max", delta_max,
            "not in [delta_initial, 1) (delta_initial = " + format_number(delta_initial) + ")");
    if (lavg_epochs < 1 || lavg_epochs > 1000)
        throw_invalid("wrc.lavg_epochs", lavg_epochs, "not in [1, 1000]");
    if (!std::isfinite(lavg_weight) || lavg_weight <= 0.0 || lavg_weight > 1.0)
        throw_invalid("wrc.lavg_weight", lavg_weight, "not in (0, 1]");
    if (!std::isfinite(loss_band_deviations) || loss_band_deviations < 0.0)
        throw_invalid("wrc.loss_band_deviations", loss_band_deviations, "not in [0, inf)");
    if (!std::isfinite(congestion_loss_factor) || congestion_loss_factor <= 0.0 ||
        congestion_loss_factor > 1.0)
        throw_invalid("wrc.congestion_loss_factor", congestion_loss_factor, "not in (0, 1]");
    if (!std::isfinite(separation_gain) || separation_gain <= 0.0 || separation_gain > 1.0)
        throw_invalid("wrc.separation_gain", separation_gain, "not in (0, 1]");
    if (!std::isfinite(deviation_gain) || deviation_gain <= 0.0 || deviation_gain > 1.0)
        throw_invalid("wrc.deviation_gain", deviation_gain, "not in (0, 1]");
    if (!finite_positive(min_rate_pps))
        throw_invalid("wrc.min_rate_pps", min_rate_pps, "not in (0, inf)");
    if (!std::isfinite(max_rate_pps) || (max_rate_pps != 0.0 && max_rate_pps < min_rate_pps))
        throw_invalid("wrc.max_rate_pps", max_rate_pps,
                      "not 0 (none) or >= min_rate_pps (" + format_number(min_rate_pps) + ")");
    // rate (1 - delta / w) must stay positive for the largest delta.
    if (mode == differentiation::weighted_decrease && delta_max / weight >= 1.0)
        throw_invalid("wrc.weight", weight,
                      "too small for weighted_decrease: delta_max / weight = " +
                          format_number(delta_max / weight) + " not < 1");
}

rate_controller::rate_controller(const rate_controller_params& params) : params_(params) {
    params_.validate();
    delta_ = params_.delta_initial;
}

void rate_controller::set_rate(double r) {
    r = std::max(r, params_.min_rate_pps);
    if (params_.max_rate_pps > 0.0) r = std::min(r, params_.max_rate_pps);
    if (r != rate_) {
        rate_ = r;
        ++rate_seq_;  // a new rate: samples count again once the sender echoes this number
    }
}

double rate_controller::lavg_of_history() const {
    // Normalised exponential weights over the last lavg_epochs short-term averages (wrc.h,
    // "Long-term average"): s_j (j = 0 newest) weighs g (1 - g)^j.
    const double g = params_.lavg_weight;
    double w = g, num = 0.0, den = 0.0;
    for (const double s : history_) {
        num += w * s;
        den += w;
        w *= (1.0 - g);
    }
    return num / den;
}

std::vector<rate_record> rate_controller::on_packet(time_ns now, const data_sample& pkt) {
    std::vector<rate_record> out = on_timer(now);
    ++stats_.packets;
    if (!finite_positive(pkt.snd_sep_s)) {
        ++stats_.invalid;
        return out;
    }
    if (!started_) {
        // The first packet: the epoch clock starts, the rate is the sender's own (wrc.h,
        // Choices).
        started_ = true;
        rate_ = 0.0;
        set_rate(1.0 / pkt.snd_sep_s);
        rate_seq_ = pkt.rate_seq;
        expected_ = pkt.seq + 1;
        prev_pkt_time_ = now;
        epoch_end_ = now + seconds_to_ns(params_.epoch_s);
        ++stats_.in_sequence;
        return out;
    }
    const std::int32_t d = seq_diff(pkt.seq, expected_);
    if (d < 0) {
        ++stats_.late;
        return out;
    }
    if (d > 0) {  // Fig. 3 lines 2-3: out of sequence, packets expected .. seq-1 lost
        const auto lost = static_cast<std::uint32_t>(d);
        ++stats_.gaps;
        stats_.lost += lost;
        out.push_back(on_gap(now, pkt, lost));
        expected_ = pkt.seq + 1;
        prev_pkt_time_ = now;
        return out;
    }
    // Lines 5-10.
    ++stats_.in_sequence;
    const double current_pktsep = to_seconds(now - prev_pkt_time_);
    if (!has_sep_) {
        sep_mean_ = current_pktsep;
        sep_mdev_ = current_pktsep / 2.0;
        has_sep_ = true;
    } else {
        const double err = current_pktsep - sep_mean_;
        sep_mean_ += params_.separation_gain * err;
        sep_mdev_ += params_.deviation_gain * (std::abs(err) - sep_mdev_);
    }
    if (pkt.rate_seq == rate_seq_) {  // line 6: the sender uses the latest computed rate
        aggregate_ratio_ += current_pktsep / pkt.snd_sep_s;
        aggregate_sep_s_ += pkt.snd_sep_s;
        ++num_samples_;
        ++stats_.samples;
    } else {
        ++stats_.stale_rate;
    }
    prev_pkt_time_ = now;
    expected_ = pkt.seq + 1;
    return out;
}

rate_record rate_controller::on_gap(time_ns now, const data_sample& pkt, std::uint32_t lost) {
    // §III-A.4 (a): packets i (the previous) and j (this one) received, i+1 .. j-1 lost:
    // per_pktsep = (recv_time_j - recv_time_i) / (j - i).
    rate_record r;
    r.t = now;
    r.epoch = epoch_;
    r.lost = lost;
    r.rate_before_pps = rate_;
    r.delta = delta_;
    r.per_pktsep_s = to_seconds(now - prev_pkt_time_) / (static_cast<double>(lost) + 1.0);
    r.band_lo_s = sep_mean_ - params_.loss_band_deviations * sep_mdev_;
    r.band_hi_s = sep_mean_ + params_.loss_band_deviations * sep_mdev_;
    const bool random =
        !has_sep_ || (r.per_pktsep_s >= r.band_lo_s && r.per_pktsep_s <= r.band_hi_s);
    if (random) {
        r.what = decision::random_loss;
        ++stats_.random_losses;
    } else if (pkt.rate_seq == rate_seq_ || !params_.ignore_stale_congestion) {
        r.what = decision::congestion_loss;
        ++stats_.congestion_losses;
        set_rate(rate_ * params_.congestion_loss_factor);
    } else {
        r.what = decision::congestion_ignored;
        ++stats_.congestion_stale;
    }
    r.rate_pps = rate_;
    return r;
}

rate_record rate_controller::end_epoch(time_ns t) {
    rate_record r;
    r.t = t;
    r.epoch = epoch_++;
    r.samples = num_samples_;
    r.rate_before_pps = rate_;
    ++stats_.epochs;
    if (num_samples_ == 0) {  // lines 13-14
        ++stats_.empty_epochs;
        r.what = decision::none;
        r.rate_pps = rate_;
        r.delta = delta_;
        r.lavg_ratio = lavg_;
        return r;
    }
    // Lines 15-19.
    const double savg_ratio = aggregate_ratio_ / num_samples_;
    const double send_packet_sep = aggregate_sep_s_ / num_samples_;
    history_.push_front(savg_ratio);
    while (history_.size() > params_.lavg_epochs) history_.pop_back();
    lavg_ = lavg_of_history();
    num_samples_ = 0;
    aggregate_ratio_ = 0.0;
    aggregate_sep_s_ = 0.0;

    const bool weighted_increase = params_.mode == differentiation::weighted_increase;
    const double w_inc = weighted_increase ? params_.weight : 1.0;
    // Line 20: savg_ratio * send_packet_sep is the average receive separation (line 21).
    const double threshold = 1.0 + savg_ratio * send_packet_sep * params_.alpha_pps * w_inc;
    r.savg_ratio = savg_ratio;
    r.lavg_ratio = lavg_;
    r.threshold = threshold;
    if (lavg_ < threshold) {
        set_rate(rate_ + params_.alpha_pps * w_inc);  // line 22: weighted increase
        delta_ = params_.delta_initial;               // line 23
        r.what = decision::increase;
        r.delta = delta_;
        ++stats_.increases;
    } else {
        // Line 25 (with §III-A.3's 1/w in weighted_decrease), line 26 with min (wrc.h).
        const double applied = weighted_increase ? delta_ : delta_ / params_.weight;
        set_rate(rate_ * (1.0 - applied));
        r.what = decision::decrease;
        r.delta = applied;
        delta_ = std::min(2.0 * delta_, params_.delta_max);
        ++stats_.decreases;
    }
    r.rate_pps = rate_;
    return r;
}

std::vector<rate_record> rate_controller::on_timer(time_ns now) {
    std::vector<rate_record> out;
    if (!started_) return out;
    const time_ns epoch_ns = std::max<time_ns>(seconds_to_ns(params_.epoch_s), 1);
    while (now >= epoch_end_) {
        out.push_back(end_epoch(epoch_end_));
        epoch_end_ += epoch_ns;
    }
    return out;
}

std::optional<time_ns> rate_controller::next_epoch_end() const {
    if (!started_) return std::nullopt;
    return epoch_end_;
}

// ---------------------------------------------------------------------------------------
// pacer

void pacer_params::validate() const {
    if (!finite_positive(min_rate_pps))
        throw_invalid("wrc.pacer.min_rate_pps", min_rate_pps, "not in (0, inf)");
    if (!std::isfinite(max_rate_pps) || max_rate_pps < min_rate_pps)
        throw_invalid(
            "wrc.pacer.max_rate_pps", max_rate_pps,
            "not in [min_rate_pps, inf) (min_rate_pps = " + format_number(min_rate_pps) + ")");
    if (!std::isfinite(initial_rate_pps) || initial_rate_pps < min_rate_pps ||
        initial_rate_pps > max_rate_pps)
        throw_invalid("wrc.pacer.initial_rate_pps", initial_rate_pps,
                      "not in [min_rate_pps, max_rate_pps] = [" + format_number(min_rate_pps) +
                          ", " + format_number(max_rate_pps) + "]");
}

pacer::pacer(const pacer_params& params) : params_(params) {
    params_.validate();
    rate_ = params_.initial_rate_pps;
}

void pacer::start(time_ns now) {
    started_ = true;
    last_due_ = now;
    next_ = now;
}

void pacer::on_sent(time_ns now) {
    const time_ns sep = seconds_to_ns(1.0 / rate_);
    ++stats_.sent;
    if (now > next_ + sep) ++stats_.late_sends;
    last_due_ = next_;
    next_ = std::max(last_due_ + sep, now);
}

bool pacer::on_feedback(double rate_pps, std::uint32_t rate_seq) {
    ++stats_.feedback;
    if (!finite_positive(rate_pps) || seq_diff(rate_seq, rate_seq_) <= 0) {
        ++stats_.feedback_stale;
        return false;
    }
    rate_ = std::clamp(rate_pps, params_.min_rate_pps, params_.max_rate_pps);
    rate_seq_ = rate_seq;
    ++stats_.rate_changes;
    // The new separation counts from the previous packet's due time.
    if (started_ && stats_.sent > 0) next_ = last_due_ + seconds_to_ns(1.0 / rate_);
    return true;
}

}  // namespace oppsched::wrc
