// CoDel, RFC 8289 (Nichols, Jacobson, McGregor, Iyengar), the pseudocode of §5, with ECN
// marking where the RFC's code drops, as Linux include/net/codel_impl.h does.
#include <cmath>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// Drop-tail at enqueue (the limit); the AQM acts at dequeue on the sojourn time:
//   - a packet whose sojourn time stayed >= target for at least one interval (while more than
//     one MTU is queued) makes dequeue enter the dropping state and drop it;
//   - in the dropping state, the next drop is due interval / sqrt(count) after the previous,
//     so the drop rate rises until the sojourn falls below target, which ends the state;
//   - re-entering soon after leaving resumes from the previous drop count (RFC 8289 §5.5,
//     the Linux variant the RFC quotes).
// O(1) per packet, plus one sqrt per drop.
class codel_discipline final : public fifo_discipline {
  public:
    codel_discipline(const aqm_params& c, const codel_params& p)
        : fifo_discipline(c, false), p_(p) {}
    aqm_kind kind() const override { return aqm_kind::codel; }

    std::optional<ip_packet> dequeue(time_ns now) override {
        dequeue_step r = dodequeue(now);
        if (dropping_) {
            if (!r.ok_to_drop) {
                dropping_ = false;  // sojourn below target: leave the dropping state
            }
            while (dropping_ && now >= drop_next_) {
                ++count_;
                if (try_mark(*r.p)) {  // ECN: mark instead of dropping, deliver the packet
                    drop_next_ = control_law(drop_next_, count_);
                    break;
                }
                report_drop(std::move(*r.p), drop_reason::aqm_drop, now);
                r = dodequeue(now);
                if (!r.ok_to_drop) {
                    dropping_ = false;
                } else {
                    drop_next_ = control_law(drop_next_, count_);
                }
            }
        } else if (r.ok_to_drop) {
            if (!try_mark(*r.p)) {
                report_drop(std::move(*r.p), drop_reason::aqm_drop, now);
                r = dodequeue(now);
            }
            dropping_ = true;
            // If we were dropping recently, start from the drop rate that controlled the queue
            // then (now - drop_next approximates the time since the last drop).
            const std::uint32_t delta = count_ - lastcount_;
            count_ = 1;
            if (delta > 1 && now - drop_next_ < 16 * p_.interval) count_ = delta;
            drop_next_ = control_law(now, count_);
            lastcount_ = count_;
        }
        if (r.p) count_dequeued(*r.p);
        return std::move(r.p);
    }

  protected:
    void fill_stats(aqm_stats& s) const override {
        s.dropping = dropping_;
        s.codel_count = count_;
        s.queue_delay_s = to_seconds(sojourn_);
    }

  private:
    struct dequeue_step {
        std::optional<ip_packet> p;
        bool ok_to_drop = false;
    };

    dequeue_step dodequeue(time_ns now) {
        dequeue_step r;
        if (fifo_.empty()) {
            above_ = false;  // RFC: first_above_time_ = 0
            return r;
        }
        r.p = fifo_.pop();
        sojourn_ = now - r.p->arrival;
        if (sojourn_ < p_.target || fifo_.bytes() <= p_.mtu) {
            above_ = false;
        } else if (!above_) {
            above_ = true;
            first_above_time_ = now + p_.interval;
        } else if (now >= first_above_time_) {
            r.ok_to_drop = true;
        }
        return r;
    }

    time_ns control_law(time_ns t, std::uint32_t count) const {
        return t + static_cast<time_ns>(static_cast<double>(p_.interval) /
                                        std::sqrt(static_cast<double>(count)));
    }

    codel_params p_;
    bool above_ = false;  // first_above_time_ is set (the RFC uses 0 for "not set")
    time_ns first_above_time_ = 0;
    time_ns drop_next_ = 0;
    std::uint32_t count_ = 0;
    std::uint32_t lastcount_ = 0;
    bool dropping_ = false;
    time_ns sojourn_ = 0;
};

}  // namespace

std::unique_ptr<queue_discipline> make_codel(const aqm_params& c, const codel_params& p) {
    return std::make_unique<codel_discipline>(c, p);
}

}  // namespace oppsched::aqm::detail
