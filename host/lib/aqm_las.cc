// LAS and threshold LAS (T-LAS), Wu, Gong & Williamson, §6.2, after Rai, Urvoy-Keller, Vernon,
// Biersack (SIGMETRICS 2003/2004).
#include <algorithm>
#include <list>
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
// A flow is a connection, in either direction (the record of a TCP connection is found by
// its 5-tuple or the reverse one). An upstream flow crosses this downlink queue only as its
// pure ACKs, 52-byte packets whose own bytes would rank it first for ever; the paper's ns-2
// queue ranks by the TCP header's sequence number, which on an ns-2 ACK is the cumulative
// acknowledgement: the data the flow has had delivered. So a pure ACK (no payload, no
// SYN/FIN/RST) raises its connection's attained service to the bytes it acknowledges since
// the first ACK seen (ack - first ack, mod 2^32), and every packet of the connection ranks
// by max(bytes through this queue, bytes acknowledged). For T-LAS the acknowledged bytes
// count as packets of kAckSegmentBytes (an MSS of a 1500-byte MTU with timestamps).
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
//
// Flow limit (max_flows; the papers assume unbounded state): a new flow arriving with
// max_flows flows known takes the place of the least recently seen flow that has nothing
// queued, which is forgotten exactly as the idle timeout would forget it later (counted in
// flows_evicted). Forgetting only flows with nothing queued keeps every queued packet's
// priority consistent with its flow's record; picking the least recently seen keeps the
// flows in progress, whose attained service is what LAS ranks by. If every known flow has
// packets queued, the new flow's packets share one record with all other such arrivals
// (counted in shared_flow_packets): together they rank as one flow, by their joint attained
// service, so flows beyond the limit cannot claim a fresh flow's top priority each.
//
// The flow table is keyed by a SipHash of the 5-tuple (tcpip::keyed_flow_hash) whose key
// comes from the AQM's seed: the run seed, so runs repeat, while a sender that does not
// know it cannot aim 5-tuples at one bucket.
// Cost: one parse, one SipHash and O(log n) per packet (std::map); idle flows are kept in
// order of their last activity, so forgetting them costs O(1) per flow forgotten.
// Bytes of one data segment, for the T-LAS threshold of a connection seen by its ACKs.
constexpr std::uint64_t kAckSegmentBytes = 1448;

class las_discipline final : public discipline_base {
  public:
    las_discipline(const aqm_params& c, bool threshold, std::size_t threshold_packets,
                   time_ns idle_timeout, std::size_t max_flows)
        : discipline_base(c),
          threshold_(threshold),
          threshold_packets_(threshold_packets),
          idle_timeout_(idle_timeout),
          max_flows_(max_flows),
          flows_(16, tcpip::keyed_flow_hash(c.seed)) {}
    aqm_kind kind() const override { return threshold_ ? aqm_kind::tlas : aqm_kind::las; }

    bool enqueue(ip_packet p, time_ns now) override {
        ++stats_.offered;
        p.arrival = now;
        sweep(now);
        tcpip::flow_key key;
        const auto r = tcpip::parse(p.data);
        if (r) key = r->flow;
        las_flow& f = flow_for(key);
        f.last_active = now;
        mark_busy(f);  // about to hold a packet: no longer a candidate for forgetting
        if (r && r->tcp) note_ack(f, *r->tcp);

        las_key k;
        k.seq = next_seq_++;
        const std::uint64_t acked_packets = (f.acked + kAckSegmentBytes - 1) / kAckSegmentBytes;
        if (threshold_ && std::max(f.packets, acked_packets) >= threshold_packets_) {
            k.cls = 1;  // T-LAS: past the threshold, FIFO behind the LAS class
        } else {
            k.prio = std::max(f.bytes, f.acked);
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
            if (f.queued == 0) make_idle(f, now);  // back among the flows it may forget
            report_drop(std::move(p), drop_reason::overflow, now);
            return false;
        }
        while (freed_packets-- > 0) {
            auto last = std::prev(q_.end());
            las_flow& vf = *last->second.flow;
            vf.bytes -= last->second.p.size();
            --vf.packets;
            bytes_ -= last->second.p.size();
            report_drop(std::move(last->second.p), drop_reason::evicted_las, now);
            q_.erase(last);
            release(vf, now);
        }
        mark_busy(f);  // in case an eviction above took its last queued packet

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
        q_.erase(it);
        release(f, now);
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
        s.flows_evicted = flows_evicted_;
        s.shared_flow_packets = shared_flow_packets_;
        return s;
    }
    void clear(time_ns now) override {
        for (auto& [k, e] : q_) {
            // Flushed packets were never served: take them off the attained service.
            e.flow->bytes -= e.p.size();
            --e.flow->packets;
            report_drop(std::move(e.p), drop_reason::flushed, now);
            release(*e.flow, now);
        }
        q_.clear();
        bytes_ = 0;
    }

  private:
    struct las_flow {
        std::uint64_t bytes = 0;        // attained service: served + queued bytes
        std::uint64_t packets = 0;      // served + queued packets (T-LAS threshold)
        std::uint64_t acked = 0;        // bytes acknowledged by its pure ACKs (see above)
        std::uint32_t ack_base = 0;     // the first ACK number seen
        std::uint32_t acked_low32 = 0;  // ack - ack_base of the newest ACK (mod 2^32)
        bool ack_seen = false;
        std::uint32_t queued = 0;
        time_ns last_active = 0;
        tcpip::flow_key key;  // its key in flows_ (the shared record: unused)
        bool idle = false;    // in idle_ (nothing queued)
        std::list<las_flow*>::iterator idle_pos;
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

    // A pure ACK: the bytes it acknowledges since the connection's first ACK seen here.
    static void note_ack(las_flow& f, const tcpip::tcp_header& t) {
        constexpr std::uint8_t not_pure = tcpip::kSyn | tcpip::kFin | tcpip::kRst;
        if (t.payload_len != 0 || !(t.flags & tcpip::kAck) || (t.flags & not_pure)) return;
        if (!f.ack_seen) {
            f.ack_seen = true;
            f.ack_base = t.ack;
            return;
        }
        const std::uint32_t progress = t.ack - f.ack_base;  // mod 2^32
        if (progress < (1u << 31) && progress > f.acked_low32) {
            f.acked += progress - f.acked_low32;
            f.acked_low32 = progress;
        }
    }

    // The record of `key` or of the reverse direction of the same connection, created if
    // new (see the flow limit above).
    las_flow& flow_for(const tcpip::flow_key& key) {
        auto it = flows_.find(key);
        if (it != flows_.end()) return it->second;
        it = flows_.find(key.reversed());
        if (it != flows_.end()) return it->second;
        if (flows_.size() >= max_flows_) {
            if (idle_.empty()) {
                ++shared_flow_packets_;
                return shared_;
            }
            las_flow* victim = idle_.front();  // least recently seen, nothing queued
            idle_.pop_front();
            flows_.erase(victim->key);
            ++flows_evicted_;
        }
        las_flow& f = flows_.emplace(key, las_flow{}).first->second;
        f.key = key;
        return f;
    }

    void mark_busy(las_flow& f) {
        if (!f.idle) return;
        idle_.erase(f.idle_pos);
        f.idle = false;
    }

    // f has nothing queued from `now` on: it goes to the back of idle_, which thus stays in
    // order of last_active (times never go back).
    void make_idle(las_flow& f, time_ns now) {
        f.last_active = now;
        if (f.idle || &f == &shared_) return;
        f.idle_pos = idle_.insert(idle_.end(), &f);
        f.idle = true;
    }

    // One of f's queued packets left (served, evicted or flushed) at `now`.
    void release(las_flow& f, time_ns now) {
        --f.queued;
        f.last_active = now;
        if (f.queued == 0) make_idle(f, now);
    }

    // Forgets the flows idle for idle_timeout_: the front of idle_ only, O(1) per flow.
    void sweep(time_ns now) {
        while (!idle_.empty() && now - idle_.front()->last_active >= idle_timeout_) {
            las_flow* f = idle_.front();
            idle_.pop_front();
            flows_.erase(f->key);
        }
        if (shared_.queued == 0 && now - shared_.last_active >= idle_timeout_) shared_ = {};
    }

    bool threshold_;
    std::size_t threshold_packets_;
    time_ns idle_timeout_;
    std::size_t max_flows_;
    std::map<las_key, las_entry> q_;
    std::unordered_map<tcpip::flow_key, las_flow, tcpip::keyed_flow_hash> flows_;
    std::list<las_flow*> idle_;  // flows with nothing queued, least recently active first
    las_flow shared_;            // the flows beyond max_flows while all known ones are busy
    std::uint64_t flows_evicted_ = 0;
    std::uint64_t shared_flow_packets_ = 0;
    std::size_t bytes_ = 0;
    std::uint64_t next_seq_ = 0;
};

}  // namespace

std::unique_ptr<queue_discipline> make_las(const aqm_params& c, const las_params& p) {
    return std::make_unique<las_discipline>(c, false, 0, p.flow_idle_timeout, p.max_flows);
}
std::unique_ptr<queue_discipline> make_tlas(const aqm_params& c, const tlas_params& p) {
    return std::make_unique<las_discipline>(c, true, p.threshold_packets, p.flow_idle_timeout,
                                            p.max_flows);
}

}  // namespace oppsched::aqm::detail
