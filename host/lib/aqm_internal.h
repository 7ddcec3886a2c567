#pragma once
// Shared machinery of the AQM implementations (not part of the public API).
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "oppsched/aqm.h"
#include "oppsched/queue.h"
#include "oppsched/tcpip.h"

namespace oppsched::aqm::detail {

// Drop reporting, statistics, ECN marking and the random source every AQM needs.
class discipline_base : public queue_discipline {
  public:
    explicit discipline_base(const aqm_params& config)
        : limits_(config.limits),
          ecn_(config.ecn),
          spare_handshake_(config.spare_handshake),
          mark_not_ect_(config.mark_not_ect),
          rng_(config.seed) {}

    const queue_limits& limits() const override { return limits_; }
    void set_drop_sink(drop_sink sink) override { sink_ = std::move(sink); }
    std::vector<dropped_packet> take_drops() override { return std::exchange(drops_, {}); }

  protected:
    void report_drop(ip_packet&& p, drop_reason reason, time_ns now) {
        ++stats_.dropped[static_cast<std::size_t>(reason)];
        stats_.dropped_bytes += p.size();
        dropped_packet d{std::move(p), reason, now};
        if (sink_) {
            sink_(std::move(d));
        } else {
            drops_.push_back(std::move(d));
        }
    }
    // Congestion signal on a packet that will be queued: CE-mark it if ECN is on and the
    // packet is ECN-capable. Returns false if it must be dropped instead.
    bool try_mark(ip_packet& p) {
        if (!ecn_) return false;
        const bool not_ect = ecn_field(p.data) == tcpip::kNotEct;
        if (not_ect && !marks_not_ect(p)) return false;
        if (!tcpip::mark_ce(p.data, not_ect)) return false;  // malformed: cannot mark, so drop
        ++stats_.marked;
        if (not_ect) ++stats_.marked_not_ect;
        return true;
    }
    bool can_mark(const ip_packet& p) const {
        return ecn_ && (ecn_field(p.data) != tcpip::kNotEct || marks_not_ect(p));
    }
    // aqm_params::mark_not_ect: a Not-ECT TCP segment other than a SYN is markable.
    bool marks_not_ect(const ip_packet& p) const {
        if (!mark_not_ect_) return false;
        const auto info = tcpip::parse(p.data);
        return info && info->tcp && !(info->tcp->flags & tcpip::kSyn);
    }
    // aqm_params::spare_handshake: a TCP SYN or SYN-ACK the AQM's signal must not drop.
    bool spared(const ip_packet& p) {
        if (!spare_handshake_) return false;
        const auto info = tcpip::parse(p.data);
        if (!info || !info->tcp || !(info->tcp->flags & tcpip::kSyn)) return false;
        ++stats_.spared_handshakes;
        return true;
    }
    double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
    void count_enqueued(const ip_packet& p) {
        ++stats_.enqueued;
        stats_.enqueued_bytes += p.size();
    }
    void count_dequeued(const ip_packet& p) {
        ++stats_.dequeued;
        stats_.dequeued_bytes += p.size();
    }

    queue_limits limits_;
    bool ecn_;
    bool spare_handshake_;
    bool mark_not_ect_;
    std::mt19937_64 rng_;
    aqm_stats stats_;

  private:
    drop_sink sink_;
    std::vector<dropped_packet> drops_;
};

// What a FIFO AQM decides for an arrival.
enum class verdict : std::uint8_t {
    accept,
    signal,  // congestion: mark if ECN-capable (and ECN on), else drop
    drop,    // drop even if ECN-capable (PIE above its ECN threshold)
};

// A FIFO AQM that decides at arrival: the template every enqueue-time AQM shares.
// Order of an arrival: advance(now) (periodic state), verdict = decide(); a signalled packet
// that cannot be marked is an early drop; then the limit (overflow); then mark and queue.
class fifo_discipline : public discipline_base {
  public:
    fifo_discipline(const aqm_params& config, bool uses_rate)
        : discipline_base(config),
          fifo_(config.limits),
          rate_(config.rate),
          uses_rate_(uses_rate) {}

    bool enqueue(ip_packet p, time_ns now) override {
        ++stats_.offered;
        p.arrival = now;
        advance(now);
        verdict v = decide(p, now);
        if (v != verdict::accept && !can_mark(p) && spared(p)) v = verdict::accept;
        if (v == verdict::drop || (v == verdict::signal && !can_mark(p))) {
            report_drop(std::move(p), drop_reason::early_drop, now);
            return false;
        }
        if (!fifo_.fits(p.size())) {
            report_drop(std::move(p), drop_reason::overflow, now);
            return false;
        }
        if (v == verdict::signal && !try_mark(p)) {
            report_drop(std::move(p), drop_reason::early_drop, now);
            return false;
        }
        count_enqueued(p);
        fifo_.push(std::move(p));
        return true;
    }

    std::optional<ip_packet> dequeue(time_ns now) override {
        advance(now);
        if (fifo_.empty()) return std::nullopt;
        ip_packet p = fifo_.pop();
        if (uses_rate_) rate_.on_dequeue(p.size(), fifo_.empty(), now);
        count_dequeued(p);
        on_dequeued(p, now);
        return p;
    }

    const ip_packet* peek() const override { return fifo_.empty() ? nullptr : &fifo_.front(); }
    std::size_t bytes() const override { return fifo_.bytes(); }
    std::size_t packets() const override { return fifo_.packets(); }
    void clear(time_ns now) override {
        while (!fifo_.empty()) report_drop(fifo_.pop(), drop_reason::flushed, now);
        on_idle(now);
    }
    void on_service(std::size_t bytes, time_ns busy) override {
        if (uses_rate_) rate_.on_service(bytes, busy);
    }
    aqm_stats stats() const override {
        aqm_stats s = stats_;
        s.service_rate_bps = uses_rate_ ? rate_.rate_bps() : 0.0;
        fill_stats(s);
        return s;
    }

  protected:
    virtual void advance(time_ns /*now*/) {}
    virtual verdict decide(const ip_packet& /*p*/, time_ns /*now*/) { return verdict::accept; }
    // After a dequeue (fifo_ already without the packet).
    virtual void on_dequeued(const ip_packet& /*p*/, time_ns /*now*/) {}
    // After clear(): the queue became empty at `now`.
    virtual void on_idle(time_ns /*now*/) {}
    virtual void fill_stats(aqm_stats& /*s*/) const {}

    packet_fifo fifo_;
    service_rate_estimator rate_;
    bool uses_rate_;
};

// One factory per discipline, each in its own aqm_<kind>.cc.
std::unique_ptr<queue_discipline> make_droptail(const aqm_params& c);
std::unique_ptr<queue_discipline> make_red(const aqm_params& c, const red_params& p);
std::unique_ptr<queue_discipline> make_rem(const aqm_params& c, const rem_params& p);
std::unique_ptr<queue_discipline> make_reaqm(const aqm_params& c, const reaqm_params& p);
std::unique_ptr<queue_discipline> make_avq(const aqm_params& c, const avq_params& p);
std::unique_ptr<queue_discipline> make_codel(const aqm_params& c, const codel_params& p);
std::unique_ptr<queue_discipline> make_pie(const aqm_params& c, const pie_params& p);
std::unique_ptr<queue_discipline> make_spmaf(const aqm_params& c, const spm_af_params& p);
std::unique_ptr<queue_discipline> make_las(const aqm_params& c, const las_params& p);
std::unique_ptr<queue_discipline> make_tlas(const aqm_params& c, const tlas_params& p);

// Periodic update clock driven by events: the algorithms have no timers, so the periods that
// ended before `now` are processed at the next enqueue/dequeue. Returns how many periods
// ended since the last call (0 on the first call, which starts the clock).
class period_clock final {
  public:
    explicit period_clock(time_ns period) : period_(period) {}
    std::int64_t advance(time_ns now) {
        if (!started_) {
            started_ = true;
            next_ = now + period_;
            return 0;
        }
        if (now < next_) return 0;
        const std::int64_t n = (now - next_) / period_ + 1;
        next_ += n * period_;
        return n;
    }
    time_ns period() const { return period_; }

  private:
    time_ns period_;
    time_ns next_ = 0;
    bool started_ = false;
};

}  // namespace oppsched::aqm::detail
