// SPM-AF: Selective Packet Marking with ACK Filtering (Wu, Gong & Williamson, §6.1,
// "TCP Fairness Issues in IEEE 802.11 Wireless LANs"), at the AP's bottleneck queue.
#include <list>

#include "aqm_internal.h"

namespace oppsched::aqm::detail {
namespace {

// What SPM-AF needs to know about a queued packet, parsed once at arrival.
struct tcp_meta {
    bool pure_ack = false;   // TCP, ACK set, no SYN/FIN/RST, no payload
    bool removable = false;  // pure ACK that a newer ACK may supersede (also no URG/CWR)
    std::size_t flow_hash = 0;
    tcpip::flow_key flow;
    std::uint32_t ack = 0;
    bool ece = false;
    std::uint8_t nsack = 0;
    std::array<std::pair<std::uint32_t, std::uint32_t>, 4> sack{};
};

tcp_meta classify(const ip_packet& p) {
    tcp_meta m;
    auto r = tcpip::parse(p.data);
    if (!r || !r->tcp || r->is_fragment) return m;
    const tcpip::tcp_header& t = *r->tcp;
    const bool ack = (t.flags & tcpip::kAck) != 0;
    const bool ctl = (t.flags & (tcpip::kSyn | tcpip::kFin | tcpip::kRst)) != 0;
    m.pure_ack = ack && !ctl && t.payload_len == 0;
    if (!m.pure_ack) return m;
    m.flow = r->flow;
    m.flow_hash = tcpip::flow_key_hash{}(m.flow);
    m.ack = t.ack;
    m.ece = (t.flags & tcpip::kEce) != 0;
    if (t.sack_blocks.size() > m.sack.size()) return m;  // cannot be a valid TCP option
    m.nsack = static_cast<std::uint8_t>(t.sack_blocks.size());
    std::copy(t.sack_blocks.begin(), t.sack_blocks.end(), m.sack.begin());
    // URG carries an urgent pointer, CWR an ECN state change towards the peer: keep both.
    m.removable = (t.flags & (tcpip::kUrg | tcpip::kCwr)) == 0;
    return m;
}

// Sequence-space comparisons (RFC 793 / RFC 1982 serial arithmetic).
bool seq_after(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) > 0; }
bool seq_leq(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) <= 0; }

// Is the queued ACK `old` made redundant by the arriving ACK `nw` of the same connection?
// Only if `nw` acknowledges strictly more (a duplicate ACK is information: fast retransmit
// counts them), `old` carries no ECE change, and every SACK block of `old` is either below
// the new cumulative ACK or inside one of `nw`'s blocks (no SACK information is lost).
bool superseded(const tcp_meta& old, const tcp_meta& nw) {
    if (!old.removable || !nw.pure_ack) return false;
    if (old.flow_hash != nw.flow_hash || old.flow != nw.flow) return false;
    if (!seq_after(nw.ack, old.ack)) return false;
    if (old.ece != nw.ece) return false;
    for (std::size_t i = 0; i < old.nsack; ++i) {
        const auto [l, r] = old.sack[i];
        if (seq_leq(r, nw.ack)) continue;
        bool covered = false;
        for (std::size_t j = 0; j < nw.nsack && !covered; ++j)
            covered = seq_leq(nw.sack[j].first, l) && seq_leq(r, nw.sack[j].second);
        if (!covered) return false;
    }
    return true;
}

// The queue is a FIFO (removals never reorder it).
//  * ACK filtering: when a pure ACK arrives, every queued ACK of the same connection that it
//    supersedes (see superseded()) is removed, "relying on the cumulative acknowledgment
//    nature of the newly queued ACK" (§6.1). This happens whether or not the queue is full,
//    but only if the new ACK is then queued (otherwise the old ones are kept).
//  * Priority: a low-priority arrival at a full queue is dropped; a high-priority one
//    (Packet::high_priority, set by the SPM sender while cwnd < 4) evicts an ACK, or if
//    there is none a low-priority packet, and is queued at the tail; with neither, it is
//    dropped. The paper does not say which ACK / packet: we take the oldest (head first),
//    and with a byte limit evict as many as needed (all or nothing).
// Cost: one parse per arrival; O(queue length) scan per ACK arrival and per eviction.
class spm_af_discipline final : public discipline_base {
  public:
    explicit spm_af_discipline(const aqm_params& c) : discipline_base(c) {}
    aqm_kind kind() const override { return aqm_kind::spmaf; }

    bool enqueue(ip_packet p, time_ns now) override {
        ++stats_.offered;
        p.arrival = now;
        tcp_meta meta = classify(p);  // before p is moved from
        queued_entry e{std::move(p), meta};
        const std::size_t size = e.p.size();

        victims_.clear();
        std::size_t freed_bytes = 0;
        if (e.m.pure_ack) {
            for (auto it = q_.begin(); it != q_.end(); ++it) {
                if (superseded(it->m, e.m)) {
                    victims_.push_back(it);
                    freed_bytes += it->p.size();
                }
            }
        }
        const std::size_t n_superseded = victims_.size();

        if (!fits(size, freed_bytes, victims_.size()) && e.p.high_priority) {
            // Eviction candidates: ACKs first, then low-priority packets, oldest first.
            for (int pass = 0; pass < 2 && !fits(size, freed_bytes, victims_.size()); ++pass) {
                for (auto it = q_.begin(); it != q_.end(); ++it) {
                    if (fits(size, freed_bytes, victims_.size())) break;
                    const bool candidate =
                        pass == 0 ? it->m.pure_ack : (!it->m.pure_ack && !it->p.high_priority);
                    if (!candidate || chosen(it)) continue;
                    victims_.push_back(it);
                    freed_bytes += it->p.size();
                }
            }
        }
        if (!fits(size, freed_bytes, victims_.size())) {
            report_drop(std::move(e.p), drop_reason::overflow, now);
            return false;
        }
        for (std::size_t i = 0; i < victims_.size(); ++i) {
            auto it = victims_[i];
            bytes_ -= it->p.size();
            report_drop(
                std::move(it->p),
                i < n_superseded ? drop_reason::superseded_ack : drop_reason::evicted_low_priority,
                now);
            q_.erase(it);
        }
        count_enqueued(e.p);
        bytes_ += size;
        q_.push_back(std::move(e));
        return true;
    }

    std::optional<ip_packet> dequeue(time_ns /*now*/) override {
        if (q_.empty()) return std::nullopt;
        ip_packet p = std::move(q_.front().p);
        q_.pop_front();
        bytes_ -= p.size();
        count_dequeued(p);
        return p;
    }

    const ip_packet* peek() const override { return q_.empty() ? nullptr : &q_.front().p; }
    std::size_t bytes() const override { return bytes_; }
    std::size_t packets() const override { return q_.size(); }
    aqm_stats stats() const override { return stats_; }
    void clear(time_ns now) override {
        while (!q_.empty()) {
            bytes_ -= q_.front().p.size();
            report_drop(std::move(q_.front().p), drop_reason::flushed, now);
            q_.pop_front();
        }
    }

  private:
    struct queued_entry {
        ip_packet p;
        tcp_meta m;
    };
    using entry_iter = std::list<queued_entry>::iterator;

    // Would `size` more bytes fit once `freed_bytes` / `freed_packets` have been removed?
    bool fits(std::size_t size, std::size_t freed_bytes, std::size_t freed_packets) const {
        return (limits_.bytes == 0 || bytes_ - freed_bytes + size <= limits_.bytes) &&
               (limits_.packets == 0 || q_.size() - freed_packets + 1 <= limits_.packets);
    }
    bool chosen(entry_iter it) const {
        for (auto v : victims_)
            if (v == it) return true;
        return false;
    }

    std::list<queued_entry> q_;
    std::size_t bytes_ = 0;
    std::vector<entry_iter> victims_;  // reused to avoid an allocation per arrival
};

}  // namespace

std::unique_ptr<queue_discipline> make_spmaf(const aqm_params& c, const spm_af_params& /*p*/) {
    return std::make_unique<spm_af_discipline>(c);
}

}  // namespace oppsched::aqm::detail
