// The client's CLAMP flow table and ACK window rewrite: see oppsched/clamp_rewriter.h.
#include "oppsched/clamp_rewriter.h"

#include <arpa/inet.h>

#include <algorithm>
#include <limits>
#include <list>
#include <utility>

#include "oppsched/client_core.h"

namespace oppsched::client {
namespace {

// RFC 1982 serial-number order on 32-bit TCP sequence numbers.
inline bool seq_after(std::uint32_t a, std::uint32_t b) {
    return static_cast<std::int32_t>(a - b) > 0;
}

std::string addr(const tcpip::flow_key& k, const std::array<std::uint8_t, 16>& a) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (k.ip_version == 4) {
        inet_ntop(AF_INET, a.data(), buf, sizeof buf);
        return buf;
    }
    inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
    return std::string("[") + buf + "]";
}

}  // namespace

std::string flow_name(const tcpip::flow_key& k) {
    return addr(k, k.src) + ":" + std::to_string(k.sport) + ">" + addr(k, k.dst) + ":" +
           std::to_string(k.dport);
}

// One TCP connection seen from its SYN, keyed by its downlink direction.
struct clamp_rewriter::flow_record {
    tcpip::flow_key key;  // server -> client
    std::string name;
    std::unique_ptr<clamp::client_agent> agent;  // once the SYN-ACK is seen
    std::optional<std::uint16_t> mss_client;     // MSS option sent by the client
    std::optional<std::uint16_t> mss_server;     // ... by the server
    // AWND_os of the flow's latest uplink segment (eq. 17's "AWND from the OS"); until an
    // ACK is seen, the handshake's unscaled window.
    std::uint32_t awnd_os = std::numeric_limits<std::uint32_t>::max();
    bool have_ack = false;
    std::uint32_t last_ack = 0;  // highest ACK number sent uplink
    bool have_data = false;
    std::uint32_t data_end = 0;  // highest downlink seq + payload received
    // The client sent data before any came down: an upload (the client is TCP's sender,
    // flows[].direction up), whose segments pass with the OS's window until downlink data
    // arrives (a request answered: the client is a receiver again). See the header.
    bool upload = false;
    // The opening SYN's sender (true: the client) and ISN: a SYN repeating both is a
    // retransmission and keeps the record (create_flow).
    bool client_opened = false;
    std::uint32_t syn_seq = 0;
    time_ns last_seen = 0;
    std::list<flow_record*>::iterator lru_pos;  // its place in lru_
};

clamp_rewriter::clamp_rewriter(const clamp_rewriter_params& config, client_core_stats& stats)
    : config_(config), stats_(stats), tracker_([&] {
          tcpip::window_tracker_params t;
          t.max_flows = config_.max_flows;
          t.idle_timeout = config_.flow_idle_timeout;
          return t;
      }()) {}

clamp_rewriter::~clamp_rewriter() = default;

std::size_t clamp_rewriter::flows() const { return flows_.size(); }

const clamp::client_agent* clamp_rewriter::agent(const tcpip::flow_key& downlink_flow) const {
    auto it = flows_.find(downlink_flow);
    return it == flows_.end() ? nullptr : it->second->agent.get();
}

std::vector<window_record> clamp_rewriter::take_records() {
    std::vector<window_record> out;
    out.swap(records_);
    return out;
}

void clamp_rewriter::expire(time_ns now) {
    expire_flows(now);
    tracker_.expire(now);
}

void clamp_rewriter::on_downlink(time_ns now, const std::vector<std::uint8_t>& pkt,
                                 std::optional<float> price) {
    auto r = tcpip::parse(pkt);
    if (!r || !r->tcp) return;
    const tcpip::packet_info& info = r.value();
    const tcpip::tcp_header& t = *info.tcp;
    tracker_.learn(info, now);
    const tcpip::flow_key& key = info.flow;  // downlink direction
    if (t.flags & tcpip::kRst) {
        auto it = flows_.find(key);
        if (it != flows_.end()) close_flow(it);
        return;
    }
    const bool syn = (t.flags & tcpip::kSyn) != 0;
    const bool ack = (t.flags & tcpip::kAck) != 0;
    if (syn && !ack) {  // the server opens a connection to the client
        flow_record& f = create_flow(now, key, false, t.seq);
        f.mss_server = t.mss;
        return;
    }
    flow_record* f = find_flow(key);
    if (!f) return;
    touch(*f, now);
    if (syn) {  // SYN-ACK of a connection the client opened: the handshake is complete
        f->mss_server = t.mss;
        ensure_agent(*f);
        return;
    }
    if (t.payload_len == 0 || info.is_fragment) return;
    const std::uint32_t end = t.seq + static_cast<std::uint32_t>(t.payload_len);
    if (!f->have_data || seq_after(end, f->data_end)) {
        f->data_end = end;
        f->have_data = true;
    }
    f->upload = false;
    if (!f->agent) return;
    if (!price) {
        ++stats_.clamp_data_unpriced;
        return;
    }
    // §IV-B: packet k of s_k bytes at t_k carrying price p; eqs. 14-17. s_k is the IP
    // length, the unit in which the AP counts q and mu_c; the payload is the sequence space
    // the window counts (clamp.h, "One byte unit").
    f->agent->on_data(now, static_cast<std::uint32_t>(info.total_len), static_cast<double>(*price),
                      f->awnd_os, static_cast<std::uint32_t>(t.payload_len));
    ++stats_.clamp_data_packets;
}

void clamp_rewriter::on_uplink(time_ns now, std::vector<std::uint8_t>& pkt,
                               std::optional<float> price) {
    auto r = tcpip::parse(pkt);
    if (!r) {
        ++stats_.uplink_unparsed;
        return;
    }
    const tcpip::packet_info& info = r.value();
    if (!info.tcp) return;
    const tcpip::tcp_header& t = *info.tcp;
    const tcpip::flow_key key = info.flow.reversed();  // the downlink direction
    const bool syn = (t.flags & tcpip::kSyn) != 0;
    const bool ack = (t.flags & tcpip::kAck) != 0;
    if (t.flags & tcpip::kRst) {
        tracker_.learn(info, now);
        auto it = flows_.find(key);
        if (it != flows_.end()) close_flow(it);
        return;
    }
    if (syn && !ack) {  // the client opens a connection: SYN never rewritten
        tracker_.learn(info, now);
        flow_record& f = create_flow(now, key, true, t.seq);
        if (f.agent) return;  // a retransmitted SYN of a connection already complete
        f.mss_client = t.mss;
        f.awnd_os = t.window;  // SYN windows are never scaled (RFC 7323 §2.2)
        return;
    }
    flow_record* f = find_flow(key);
    if (!f) {
        tracker_.learn(info, now);
        if (ack && !syn) {
            if (recently_closed(key))
                ++stats_.clamp_acks_after_close;
            else
                ++stats_.clamp_acks_unknown;
        }
        return;
    }
    touch(*f, now);
    if (syn) {  // our SYN-ACK to a server-opened connection: handshake complete
        tracker_.learn(info, now);
        f->mss_client = t.mss;
        f->awnd_os = t.window;
        ensure_agent(*f);
        return;
    }
    if (t.payload_len > 0 && !f->have_data) f->upload = true;
    if (f->upload) {  // the client's own data and ACKs of an upload: not CLAMP's to clamp
        tracker_.learn(info, now);
        return;
    }
    if (!ack || !f->agent || info.is_fragment) {
        tracker_.learn(info, now);
        if (ack && !f->agent) ++stats_.clamp_acks_unknown;
        return;
    }
    const std::optional<std::uint64_t> os = tracker_.advertised_bytes(info);
    if (!os) {  // the tracker forgot the connection (evicted): its scale is unknown
        tracker_.learn(info, now);
        ++stats_.clamp_acks_unknown;
        return;
    }
    f->awnd_os = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(*os, std::numeric_limits<std::uint32_t>::max()));

    // §IV-C: three duplicate ACKs end receiver slow start. A duplicate: a pure ACK (no
    // data, SYN, FIN) repeating the last ACK number while data beyond it has arrived.
    const bool pure = t.payload_len == 0 && !(t.flags & tcpip::kFin);
    if (f->have_ack && t.ack == f->last_ack) {
        if (pure && f->have_data && seq_after(f->data_end, t.ack)) {
            f->agent->on_dupack();
            ++stats_.clamp_dupacks;
        }
    } else if (!f->have_ack || seq_after(t.ack, f->last_ack)) {
        f->agent->on_new_ack();
        f->last_ack = t.ack;
        f->have_ack = true;
    }

    if (!price) {
        // Fail open: the ACK keeps the OS's window. Through rewrite() all the same, so the
        // tracker keeps the right edge the sender now knows (see the header comment).
        tracker_.rewrite(pkt.data(), pkt.size(), info, *os, now);
        ++stats_.clamp_acks_fail_open;
        return;
    }
    // Eq. 17: AWND = min(w, AWND_os). The tracker rounds up to the scale granularity and
    // holds the right edge (Delta w >= -s_k alone cannot: the ACK and the window move
    // separately).
    const double w = f->agent->window();
    const std::uint64_t target = std::min<std::uint64_t>(static_cast<std::uint64_t>(w), *os);
    const auto outcome = tracker_.rewrite(pkt.data(), pkt.size(), info, target, now);
    if (outcome != tcpip::rewrite_outcome::rewritten) {
        ++stats_.clamp_acks_unknown;
        return;
    }
    const std::uint8_t shift = tracker_.shift(info.flow).value_or(0);
    const std::uint8_t* th = pkt.data() + t.offset;
    const std::uint64_t advertised =
        std::uint64_t{static_cast<std::uint16_t>((th[14] << 8) | th[15])} << shift;
    ++stats_.clamp_acks_rewritten;
    if (advertised < *os) ++stats_.clamp_acks_reduced;
    if (records_.size() >= config_.max_pending_records) {
        ++stats_.clamp_records_dropped;
        return;
    }
    records_.push_back(
        window_record{now, f->name, static_cast<double>(*price), w, *os, advertised});
}

clamp_rewriter::flow_record* clamp_rewriter::find_flow(const tcpip::flow_key& downlink) {
    auto it = flows_.find(downlink);
    return it == flows_.end() ? nullptr : it->second.get();
}

clamp_rewriter::flow_record& clamp_rewriter::create_flow(time_ns now,
                                                         const tcpip::flow_key& downlink,
                                                         bool client_opened,
                                                         std::uint32_t syn_seq) {
    auto it = flows_.find(downlink);
    if (it != flows_.end()) {
        flow_record& old = *it->second;
        if (old.client_opened == client_opened && old.syn_seq == syn_seq) {
            // A retransmitted SYN: the SYN-ACK answering the first may have been handled
            // already (the two cross in the client), and none may follow. Kept as it is.
            touch(old, now);
            return old;
        }
        erase_flow(it);  // a new SYN (a new ISN) restarts the connection
    }
    if (flows_.size() >= config_.max_flows) expire_flows(now);
    if (flows_.size() >= config_.max_flows) {
        // Evict the least recently seen: the front of lru_, O(1).
        erase_flow(flows_.find(lru_.front()->key));
        ++stats_.clamp_flows_evicted;
    }
    auto f = std::make_unique<flow_record>();
    f->key = downlink;
    f->client_opened = client_opened;
    f->syn_seq = syn_seq;
    f->name = flow_name(downlink);
    f->last_seen = now;
    f->lru_pos = lru_.insert(lru_.end(), f.get());
    ++stats_.clamp_flows_created;
    return *flows_.emplace(downlink, std::move(f)).first->second;
}

void clamp_rewriter::close_flow(flow_map::iterator it) {
    if (closed_.size() >= kClosedKept) closed_.pop_front();
    closed_.push_back(it->first);
    erase_flow(it);
    ++stats_.clamp_flows_closed;
}

bool clamp_rewriter::recently_closed(const tcpip::flow_key& downlink) const {
    return std::find(closed_.begin(), closed_.end(), downlink) != closed_.end();
}

void clamp_rewriter::touch(flow_record& f, time_ns now) {
    f.last_seen = now;
    lru_.splice(lru_.end(), lru_, f.lru_pos);  // iterators stay valid
}

void clamp_rewriter::erase_flow(flow_map::iterator it) {
    lru_.erase(it->second->lru_pos);
    flows_.erase(it);
}

void clamp_rewriter::ensure_agent(flow_record& f) {
    if (f.agent) return;
    clamp::client_agent_params p = config_.agent;
    if (config_.mss_bytes != 0) {
        p.mss_bytes = config_.mss_bytes;
    } else if (f.mss_client || f.mss_server) {
        // The sender's segments are at most the MSS each side announced (RFC 9293 §3.7.1).
        std::uint32_t m = std::numeric_limits<std::uint32_t>::max();
        if (f.mss_client) m = std::min<std::uint32_t>(m, *f.mss_client);
        if (f.mss_server) m = std::min<std::uint32_t>(m, *f.mss_server);
        if (m >= 1) p.mss_bytes = m;
    }
    f.agent = std::make_unique<clamp::client_agent>(p);
    ++stats_.clamp_agents_created;
}

void clamp_rewriter::expire_flows(time_ns now) {
    // lru_ is in order of last_seen (times never go back): only its front can have expired.
    while (!lru_.empty() && now - lru_.front()->last_seen > config_.flow_idle_timeout) {
        erase_flow(flows_.find(lru_.front()->key));
        ++stats_.clamp_flows_expired;
    }
}

}  // namespace oppsched::client
