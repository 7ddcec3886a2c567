// LAS and threshold LAS (T-LAS), Wu, Gong & Williamson, §6.2, after Rai, Urvoy-Keller, Vernon,
// Biersack (SIGMETRICS 2003/2004).
#include <map>
#include <unordered_map>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// LAS: "always gives service to the job that has received the least service so far". The
// router counts the service attained by each flow (5-tuple from tcpip::parse; packets that do
// not parse share one flow) and inserts an arriving packet into a priority queue "according
// to its sequence number": its priority is the flow's attained service when it arrives, in
// bytes, i.e. the bytes of that flow served before it plus those queued ahead of it. Serving
// the smallest priority first therefore always serves the head packet of the flow with the
// least bytes sent so far; ties go in arrival order.
// When full, "the LAS queue discards the lowest priority one, which may be the arriving
// packet or the packet at the tail of the queue": the queued packets that rank below the
// arrival are evicted from the tail (as many as a byte limit needs) if that makes room,
// otherwise the arrival is dropped. An evicted packet is the last queued one of its flow, so
// its bytes are taken off the flow's attained service: the flow was never served them.
//
// T-LAS: a flow's first threshold_packets packets get LAS priority; from then on the flow is
// served FIFO, behind every LAS-priority packet ("Once the threshold is reached, FIFO
// scheduling is employed on this flow").
//
// Flow state is forgotten once a flow has nothing queued and has been idle for
// flow_idle_timeout (a returning flow then starts again at zero).
// Cost: one parse and O(log n) per packet (std::map); the idle sweep is amortised O(1).
class las_discipline final : public discipline_base {
  public:
    las_discipline(const aqm_params& c, bool threshold, std::size_t threshold_packets,
                   time_ns idle_timeout)
        : discipline_base(c),
          threshold_(threshold),
          threshold_packets_(threshold_packets),
          idle_timeout_(idle_timeout) {}
    aqm_kind kind() const override { return threshold_ ? aqm_kind::tlas : aqm_kind::las; }

    bool enqueue(ip_packet p, time_ns now) override {
        ++stats_.offered;
        p.arrival = now;
        sweep(now);
        tcpip::flow_key key;
        if (auto r = tcpip::parse(p.data)) key = r->flow;
        las_flow& f = flows_[key];
        f.last_active = now;

        las_key k;
        k.seq = next_seq_++;
        if (threshold_ && f.packets >= threshold_packets_) {
            k.cls = 1;  // T-LAS: past the threshold, FIFO behind the LAS class
        } else {
            k.prio = f.bytes;
        }
        const std::size_t size = p.size();

        // Evict lower-priority packets from the tail if that makes room.
        std::size_t freed_bytes = 0, freed_packets = 0;
        auto it = q_.end();
        while (!fits(size, freed_bytes, freed_packets) && it != q_.begin()) {
            auto prev = std::prev(it);
            if (!(k < prev->first)) break;  // the arrival ranks lowest
            it = prev;
            freed_bytes += it->second.p.size();
            ++freed_packets;
        }
        if (!fits(size, freed_bytes, freed_packets)) {
            report_drop(std::move(p), drop_reason::overflow, now);
            return false;
        }
        while (freed_packets-- > 0) {
            auto last = std::prev(q_.end());
            las_flow& vf = *last->second.flow;
            vf.bytes -= last->second.p.size();
            --vf.packets;
            --vf.queued;
            bytes_ -= last->second.p.size();
            report_drop(std::move(last->second.p), drop_reason::evicted_las, now);
            q_.erase(last);
        }

        f.bytes += size;
        ++f.packets;
        ++f.queued;
        count_enqueued(p);
        bytes_ += size;
        q_.emplace(k, las_entry{std::move(p), &f});
        return true;
    }

    std::optional<ip_packet> dequeue(time_ns now) override {
        if (q_.empty()) return std::nullopt;
        auto it = q_.begin();
        ip_packet p = std::move(it->second.p);
        las_flow& f = *it->second.flow;
        --f.queued;
        f.last_active = now;
        q_.erase(it);
        bytes_ -= p.size();
        count_dequeued(p);
        return p;
    }

    const ip_packet* peek() const override { return q_.empty() ? nullptr : &q_.begin()->second.p; }
    std::size_t bytes() const override { return bytes_; }
    std::size_t packets() const override { return q_.size(); }
    aqm_stats stats() const override {
        aqm_stats s = stats_;
        s.flows = flows_.size();
        return s;
    }
    void clear(time_ns now) override {
        for (auto& [k, e] : q_) {
            // Flushed packets were never served: take them off the attained service.
            e.flow->bytes -= e.p.size();
            --e.flow->packets;
            --e.flow->queued;
            report_drop(std::move(e.p), drop_reason::flushed, now);
        }
        q_.clear();
        bytes_ = 0;
    }

  private:
    struct las_flow {
        std::uint64_t bytes = 0;    // attained service: served + queued bytes
        std::uint64_t packets = 0;  // served + queued packets (T-LAS threshold)
        std::uint32_t queued = 0;
        time_ns last_active = 0;
    };
    struct las_key {
        std::uint8_t cls = 0;    // 0: LAS priority, 1: T-LAS FIFO class
        std::uint64_t prio = 0;  // attained service at arrival (class 0)
        std::uint64_t seq = 0;   // arrival order: FIFO within equal priority
        bool operator<(const las_key& o) const {
            if (cls != o.cls) return cls < o.cls;
            if (prio != o.prio) return prio < o.prio;
            return seq < o.seq;
        }
    };
    struct las_entry {
        ip_packet p;
        las_flow* flow;  // unordered_map nodes are stable; a flow with packets queued is kept
    };

    bool fits(std::size_t size, std::size_t freed_bytes, std::size_t freed_packets) const {
        return (limits_.bytes == 0 || bytes_ - freed_bytes + size <= limits_.bytes) &&
               (limits_.packets == 0 || q_.size() - freed_packets + 1 <= limits_.packets);
    }

    void sweep(time_ns now) {
        if (now - last_sweep_ < idle_timeout_ / 2) return;
        last_sweep_ = now;
        for (auto it = flows_.begin(); it != flows_.end();) {
            if (it->second.queued == 0 && now - it->second.last_active >= idle_timeout_) {
                it = flows_.erase(it);
            } else {
                ++it;
            }
        }
    }

    bool threshold_;
    std::size_t threshold_packets_;
    time_ns idle_timeout_;
    std::map<las_key, las_entry> q_;
    std::unordered_map<tcpip::flow_key, las_flow, tcpip::flow_key_hash> flows_;
    std::size_t bytes_ = 0;
    std::uint64_t next_seq_ = 0;
    time_ns last_sweep_ = 0;
};

}  // namespace

std::unique_ptr<queue_discipline> make_las(const aqm_params& c, const las_params& p) {
    return std::make_unique<las_discipline>(c, false, 0, p.flow_idle_timeout);
}
std::unique_ptr<queue_discipline> make_tlas(const aqm_params& c, const tlas_params& p) {
    return std::make_unique<las_discipline>(c, true, p.threshold_packets, p.flow_idle_timeout);
}

}  // namespace oppsched::aqm::detail
