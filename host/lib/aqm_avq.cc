// AVQ: Kunniyur & Srikant, "An adaptive virtual queue (AVQ) algorithm for active queue
// management", IEEE/ACM ToN 12(2), 2004, the algorithm of Fig. 1 (a token bucket in effect).
#include <algorithm>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// At each arrival of b bytes at time t (s: time of the previous arrival, C: link capacity,
// C~: virtual capacity, B: virtual buffer = the real buffer):
//   VQ <- max(VQ - C~ (t - s), 0)
//   if VQ + b > B: mark (or drop) the packet in the real queue, else VQ <- VQ + b
//   C~ <- max(min(C~ + alpha gamma C (t - s), C) - alpha b, 0)
// The virtual capacity thus integrates gamma C - (arrival rate) and the virtual queue
// overflows when the input exceeds the desired utilisation gamma C. O(1) per arrival.
// C~ starts at C when the capacity first becomes known; C~ <= C holds after every update
// (and when a measured C falls, at the next arrival).
class avq_discipline final : public fifo_discipline {
  public:
    avq_discipline(const aqm_params& c, const avq_params& p) : fifo_discipline(c, true), p_(p) {
        if (p.virtual_buffer_bytes > 0) {
            buffer_ = static_cast<double>(p.virtual_buffer_bytes);
        } else if (c.limits.bytes > 0) {
            buffer_ = static_cast<double>(c.limits.bytes);
        } else {
            buffer_ = static_cast<double>(c.limits.packets) * p.mean_packet_size;
        }
    }
    aqm_kind kind() const override { return aqm_kind::avq; }

  protected:
    verdict decide(const ip_packet& pk, time_ns now) override {
        if (!rate_.known()) return verdict::accept;  // measuring: no capacity yet
        const double cap = rate_.rate_bps() / 8.0;   // C, bytes/s
        if (!started_) {
            started_ = true;
            ctilde_ = cap;
            last_ = now;
        }
        const double dt = to_seconds(std::max<time_ns>(0, now - last_));
        const double b = static_cast<double>(pk.size());
        vq_ = std::max(vq_ - ctilde_ * dt, 0.0);
        verdict v = verdict::accept;
        if (vq_ + b > buffer_) {
            v = verdict::signal;
        } else {
            vq_ += b;
        }
        ctilde_ =
            std::max(std::min(ctilde_ + p_.alpha * p_.gamma * cap * dt, cap) - p_.alpha * b, 0.0);
        last_ = now;
        return v;
    }
    void fill_stats(aqm_stats& s) const override {
        s.virtual_capacity_bps = ctilde_ * 8.0;
        s.virtual_queue_bytes = vq_;
    }

  private:
    avq_params p_;
    double buffer_;
    bool started_ = false;
    double ctilde_ = 0.0;  // bytes/s
    double vq_ = 0.0;      // bytes
    time_ns last_ = 0;
};

}  // namespace

std::unique_ptr<queue_discipline> make_avq(const aqm_params& c, const avq_params& p) {
    return std::make_unique<avq_discipline>(c, p);
}

}  // namespace oppsched::aqm::detail
