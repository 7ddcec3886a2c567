// PIE, RFC 8033 (Pan et al.): the basic scheme of §4 (Appendix A's pseudocode) with the
// optional elements of §5 that are switches in pie_params.
#include <algorithm>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// Every T_UPDATE (processed lazily at the next event, period_clock):
//   p = alpha (qdelay - QDELAY_REF) + beta (qdelay - qdelay_old)         (§4.2)
//   p scaled down by 2048 .. 2 while drop_prob < 1e-6 .. 0.1 (auto-tuning, §4.2)
//   p <= 0.02 once drop_prob >= 0.1 (§5.5, optional)
//   drop_prob += p; drop_prob *= 0.98 when qdelay and qdelay_old are both 0; clamp to [0,1]
//   burst_allowance -= T_UPDATE (>= 0); reset to MAX_BURST when drop_prob = 0 and both
//   delays < QDELAY_REF/2 (§4.4)
// At each arrival (§4.1): no early drop while burst_allowance > 0, nor while
// (qdelay_old < QDELAY_REF/2 and drop_prob < 0.2), nor with <= 2 mean packets queued;
// otherwise drop with probability drop_prob. ECN (§5.1): mark instead of dropping while
// drop_prob <= mark_ecn_threshold.
// qdelay: the sojourn time of the last dequeued packet, 0 once the queue drained (timestamps,
// as Linux), or queue bytes / departure rate (§5.2; fixed or measured capacity).
// O(1) per packet; after an idle gap, O(updates until the fixed point) (see advance()).
class pie_discipline final : public fifo_discipline {
  public:
    pie_discipline(const aqm_params& c, const pie_params& p)
        : fifo_discipline(c, p.use_departure_rate), p_(p), clock_(p.tupdate), burst_(p.max_burst) {}
    aqm_kind kind() const override { return aqm_kind::pie; }

  protected:
    void advance(time_ns now) override {
        // Between events the delay input is constant, so the updates reach a fixed point
        // (drop_prob 0 or 1, burst allowance full or empty): stop there. This bounds the cost
        // of a long idle gap to a few hundred updates.
        for (std::int64_t n = clock_.advance(now); n > 0; --n) {
            const double prob = prob_, old = qdelay_old_;
            const time_ns burst = burst_;
            update();
            if (prob_ == prob && qdelay_old_ == old && burst_ == burst) break;
        }
    }

    verdict decide(const ip_packet& /*pk*/, time_ns /*now*/) override {
        if (burst_ > 0) return verdict::accept;
        const double ref = to_seconds(p_.target);
        if ((qdelay_old_ < ref / 2 && prob_ < 0.2) ||
            static_cast<double>(fifo_.bytes()) <= 2.0 * p_.mean_packet_size) {
            return verdict::accept;
        }
        if (p_.derandomize) {  // §5.4
            if (prob_ == 0.0) accu_prob_ = 0.0;
            accu_prob_ += prob_;
            if (accu_prob_ < 0.85) return verdict::accept;
            if (accu_prob_ < 8.5 && uniform() >= prob_) return verdict::accept;
            accu_prob_ = 0.0;
        } else if (uniform() >= prob_) {
            return verdict::accept;
        }
        return prob_ <= p_.mark_ecn_threshold ? verdict::signal : verdict::drop;
    }

    void on_dequeued(const ip_packet& pk, time_ns now) override {
        last_sojourn_ = fifo_.empty() ? 0 : now - pk.arrival;
    }
    void on_idle(time_ns /*now*/) override { last_sojourn_ = 0; }

    void fill_stats(aqm_stats& s) const override {
        s.drop_probability = prob_;
        s.queue_delay_s = qdelay_old_;
        s.burst_allowance_s = to_seconds(burst_);
    }

  private:
    double current_qdelay() const {
        if (p_.use_departure_rate && rate_.known())  // Little's law, §5.2
            return static_cast<double>(fifo_.bytes()) * 8.0 / rate_.rate_bps();
        return to_seconds(last_sojourn_);
    }

    void update() {
        const double qdelay = current_qdelay();
        const double ref = to_seconds(p_.target);
        double p = p_.alpha * (qdelay - ref) + p_.beta * (qdelay - qdelay_old_);
        if (prob_ < 0.000001) {
            p /= 2048;
        } else if (prob_ < 0.00001) {
            p /= 512;
        } else if (prob_ < 0.0001) {
            p /= 128;
        } else if (prob_ < 0.001) {
            p /= 32;
        } else if (prob_ < 0.01) {
            p /= 8;
        } else if (prob_ < 0.1) {
            p /= 2;
        }
        if (p_.cap_drop_adjustment && prob_ >= 0.1 && p > 0.02) p = 0.02;
        prob_ += p;
        if (qdelay == 0.0 && qdelay_old_ == 0.0) prob_ *= 0.98;
        prob_ = std::clamp(prob_, 0.0, 1.0);
        burst_ = std::max<time_ns>(0, burst_ - p_.tupdate);
        if (prob_ == 0.0 && qdelay < ref / 2 && qdelay_old_ < ref / 2) burst_ = p_.max_burst;
        qdelay_old_ = qdelay;
    }

    pie_params p_;
    period_clock clock_;
    time_ns burst_;
    double prob_ = 0.0;
    double accu_prob_ = 0.0;
    double qdelay_old_ = 0.0;  // seconds
    time_ns last_sojourn_ = 0;
};

}  // namespace

std::unique_ptr<queue_discipline> make_pie(const aqm_params& c, const pie_params& p) {
    return std::make_unique<pie_discipline>(c, p);
}

}  // namespace oppsched::aqm::detail
