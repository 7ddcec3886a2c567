// Drop-tail and RED (gentle).
#include <cmath>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// No AQM: the limit alone drops (overflow). The baseline of Srinivasan & Baras and of Wu, Gong &
// Williamson.
class drop_tail_discipline final : public fifo_discipline {
  public:
    explicit drop_tail_discipline(const aqm_params& c) : fifo_discipline(c, false) {}
    aqm_kind kind() const override { return aqm_kind::droptail; }
};

// RED, Floyd & Jacobson 1993 (§4, Fig. 2), with the "gentle" modification (Floyd 2000):
//   avg <- (1 - w_q) avg + w_q q                       at each arrival (q: packets queued)
//   avg <- (1 - w_q)^(m+1) avg                          on an arrival into an empty queue, m =
//        idle time / transmission time of a mean_packet_size packet (ns-2's form; needs the
//        service rate, so with a measured rate the decay starts after the first sample)
//   min_th <= avg < max_th:    p_b = max_p (avg - min_th) / (max_th - min_th)
//   gentle, max_th <= avg < 2 max_th: p_b = max_p + (1 - max_p)(avg - max_th) / max_th
//   above (2) max_th:          every arrival is marked/dropped
//   p_a = p_b / (1 - count p_b): marks spread uniformly between 1 and 1/p_b arrivals apart.
// O(1) per arrival (one pow() only after idle periods).
class red_discipline final : public fifo_discipline {
  public:
    red_discipline(const aqm_params& c, const red_params& p) : fifo_discipline(c, true), p_(p) {}
    aqm_kind kind() const override { return aqm_kind::red; }

  protected:
    verdict decide(const ip_packet& /*pk*/, time_ns now) override {
        if (!fifo_.empty()) {
            avg_ = (1.0 - p_.w_q) * avg_ + p_.w_q * static_cast<double>(fifo_.packets());
        } else {
            double m = 0.0;
            if (idle_ && rate_.known() && now > idle_since_) {
                m = to_seconds(now - idle_since_) * rate_.rate_bps() / (8.0 * p_.mean_packet_size);
            }
            avg_ *= std::pow(1.0 - p_.w_q, m + 1.0);
            idle_ = false;
        }

        const double upper = p_.gentle ? 2.0 * p_.max_th : p_.max_th;
        if (avg_ < p_.min_th) {
            pb_ = 0.0;
            count_ = -1;
            return verdict::accept;
        }
        if (avg_ >= upper) {
            pb_ = 1.0;
            count_ = 0;
            return verdict::signal;
        }
        if (avg_ < p_.max_th) {
            pb_ = p_.max_p * (avg_ - p_.min_th) / (p_.max_th - p_.min_th);
        } else {  // gentle region
            pb_ = p_.max_p + (1.0 - p_.max_p) * (avg_ - p_.max_th) / p_.max_th;
        }
        ++count_;
        const double cp = static_cast<double>(count_) * pb_;
        const double pa = cp >= 1.0 ? 1.0 : pb_ / (1.0 - cp);
        if (uniform() < pa) {
            count_ = 0;
            return verdict::signal;
        }
        return verdict::accept;
    }

    void on_dequeued(const ip_packet& /*p*/, time_ns now) override {
        if (fifo_.empty()) on_idle(now);
    }
    void on_idle(time_ns now) override {
        idle_ = true;
        idle_since_ = now;
    }
    void fill_stats(aqm_stats& s) const override {
        s.avg_queue = avg_;
        s.drop_probability = pb_;
    }

  private:
    red_params p_;
    double avg_ = 0.0;
    double pb_ = 0.0;
    long count_ = -1;
    bool idle_ = false;
    time_ns idle_since_ = 0;
};

}  // namespace

std::unique_ptr<queue_discipline> make_droptail(const aqm_params& c) {
    return std::make_unique<drop_tail_discipline>(c);
}
std::unique_ptr<queue_discipline> make_red(const aqm_params& c, const red_params& p) {
    return std::make_unique<red_discipline>(c, p);
}

}  // namespace oppsched::aqm::detail
