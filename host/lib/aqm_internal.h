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
class AqmBase : public Aqm {
  public:
    explicit AqmBase(const AqmConfig& config)
        : limits_(config.limits), ecn_(config.ecn), rng_(config.seed) {}

    const QueueLimits& limits() const override { return limits_; }
    void set_drop_sink(DropSink sink) override { sink_ = std::move(sink); }
    std::vector<Drop> take_drops() override { return std::exchange(drops_, {}); }

  protected:
    void report_drop(Packet&& p, DropReason reason, time_ns now) {
        ++stats_.dropped[static_cast<std::size_t>(reason)];
        stats_.dropped_bytes += p.size();
        Drop d{std::move(p), reason, now};
        if (sink_) {
            sink_(std::move(d));
        } else {
            drops_.push_back(std::move(d));
        }
    }
    // Congestion signal on a packet that will be queued: CE-mark it if ECN is on and the
    // packet is ECN-capable. Returns false if it must be dropped instead.
    bool try_mark(Packet& p) {
        if (!ecn_ || ecn_field(p.data) == tcpip::kNotEct) return false;
        if (!tcpip::mark_ce(p.data)) return false;  // malformed: cannot mark, so drop
        ++stats_.marked;
        return true;
    }
    bool can_mark(const Packet& p) const { return ecn_ && ecn_field(p.data) != tcpip::kNotEct; }
    double uniform() { return std::uniform_real_distribution<double>(0.0, 1.0)(rng_); }
    void count_enqueued(const Packet& p) {
        ++stats_.enqueued;
        stats_.enqueued_bytes += p.size();
    }
    void count_dequeued(const Packet& p) {
        ++stats_.dequeued;
        stats_.dequeued_bytes += p.size();
    }

    QueueLimits limits_;
    bool ecn_;
    std::mt19937_64 rng_;
    AqmStats stats_;

  private:
    DropSink sink_;
    std::vector<Drop> drops_;
};

// What a FIFO AQM decides for an arrival.
enum class Verdict : std::uint8_t {
    accept,
    signal,  // congestion: mark if ECN-capable (and ECN on), else drop
    drop,    // drop even if ECN-capable (PIE above its ECN threshold)
};

// A FIFO AQM that decides at arrival: the template every enqueue-time AQM shares.
// Order of an arrival: advance(now) (periodic state), verdict = decide(); a signalled packet
// that cannot be marked is an early drop; then the limit (overflow); then mark and queue.
class FifoAqm : public AqmBase {
  public:
    FifoAqm(const AqmConfig& config, bool uses_rate)
        : AqmBase(config), fifo_(config.limits), rate_(config.rate), uses_rate_(uses_rate) {}

    bool enqueue(Packet p, time_ns now) override {
        ++stats_.offered;
        p.arrival = now;
        advance(now);
        const Verdict v = decide(p, now);
        if (v == Verdict::drop || (v == Verdict::signal && !can_mark(p))) {
            report_drop(std::move(p), DropReason::early_drop, now);
            return false;
        }
        if (!fifo_.fits(p.size())) {
            report_drop(std::move(p), DropReason::overflow, now);
            return false;
        }
        if (v == Verdict::signal && !try_mark(p)) {
            report_drop(std::move(p), DropReason::early_drop, now);
            return false;
        }
        if (uses_rate_) rate_.on_enqueue(fifo_.empty(), now);
        count_enqueued(p);
        fifo_.push(std::move(p));
        return true;
    }

    std::optional<Packet> dequeue(time_ns now) override {
        advance(now);
        if (fifo_.empty()) return std::nullopt;
        Packet p = fifo_.pop();
        if (uses_rate_) rate_.on_dequeue(p.size(), fifo_.empty(), now);
        count_dequeued(p);
        on_dequeued(p, now);
        return p;
    }

    const Packet* peek() const override { return fifo_.empty() ? nullptr : &fifo_.front(); }
    std::size_t bytes() const override { return fifo_.bytes(); }
    std::size_t packets() const override { return fifo_.packets(); }
    void clear(time_ns now) override {
        while (!fifo_.empty()) report_drop(fifo_.pop(), DropReason::flushed, now);
        on_idle(now);
    }
    AqmStats stats() const override {
        AqmStats s = stats_;
        s.service_rate_bps = uses_rate_ ? rate_.rate_bps() : 0.0;
        fill_stats(s);
        return s;
    }

  protected:
    virtual void advance(time_ns /*now*/) {}
    virtual Verdict decide(const Packet& /*p*/, time_ns /*now*/) { return Verdict::accept; }
    // After a dequeue (fifo_ already without the packet).
    virtual void on_dequeued(const Packet& /*p*/, time_ns /*now*/) {}
    // After clear(): the queue became empty at `now`.
    virtual void on_idle(time_ns /*now*/) {}
    virtual void fill_stats(AqmStats& /*s*/) const {}

    PacketFifo fifo_;
    ServiceRateEstimator rate_;
    bool uses_rate_;
};

// One factory per discipline, each in its own aqm_<kind>.cc.
std::unique_ptr<Aqm> make_droptail(const AqmConfig& c);
std::unique_ptr<Aqm> make_red(const AqmConfig& c, const RedParams& p);
std::unique_ptr<Aqm> make_rem(const AqmConfig& c, const RemParams& p);
std::unique_ptr<Aqm> make_reaqm(const AqmConfig& c, const ReaqmParams& p);
std::unique_ptr<Aqm> make_avq(const AqmConfig& c, const AvqParams& p);
std::unique_ptr<Aqm> make_codel(const AqmConfig& c, const CodelParams& p);
std::unique_ptr<Aqm> make_pie(const AqmConfig& c, const PieParams& p);
std::unique_ptr<Aqm> make_spmaf(const AqmConfig& c, const SpmAfParams& p);
std::unique_ptr<Aqm> make_las(const AqmConfig& c, const LasParams& p);
std::unique_ptr<Aqm> make_tlas(const AqmConfig& c, const TlasParams& p);

// Periodic update clock driven by events: the algorithms have no timers, so the periods that
// ended before `now` are processed at the next enqueue/dequeue. Returns how many periods
// ended since the last call (0 on the first call, which starts the clock).
class PeriodClock final {
  public:
    explicit PeriodClock(time_ns period) : period_(period) {}
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
