// The client agent's logic: see oppsched/client_core.h.
#include "oppsched/client_core.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "oppsched/byte_order.h"
#include "oppsched/validation.h"

namespace oppsched::client {
namespace {

// RFC 1982 serial-number order on 32-bit TCP sequence numbers.
inline bool seq_after(std::uint32_t a, std::uint32_t b) {
    return static_cast<std::int32_t>(a - b) > 0;
}

constexpr time_ns kMaxPriceTimeout = 60 * kNsPerSec;
constexpr std::uint32_t kMaxCqiPeriod = 1'000'000;
// Idle CLAMP flows are looked for at most this often (an O(flows) scan).
constexpr time_ns kExpireEvery = kNsPerSec;

std::string addr(const tcpip::FlowKey& k, const std::array<std::uint8_t, 16>& a) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (k.ip_version == 4) {
        inet_ntop(AF_INET, a.data(), buf, sizeof buf);
        return buf;
    }
    inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
    return std::string("[") + buf + "]";
}

}  // namespace

const char* to_string(ClampEvent::Kind k) {
    switch (k) {
        case ClampEvent::Kind::fail_open:
            return "fail_open";
        case ClampEvent::Kind::resume:
            return "resume";
    }
    return "?";
}

std::string flow_name(const tcpip::FlowKey& k) {
    return addr(k, k.src) + ":" + std::to_string(k.sport) + ">" + addr(k, k.dst) + ":" +
           std::to_string(k.dport);
}

void ClientCoreParams::validate() const {
    if (cqi_period_slots < 1 || cqi_period_slots > kMaxCqiPeriod)
        throw_invalid("client.cqi_period_slots", cqi_period_slots, "not in [1, 1000000]");
    reassembly.validate();
    clamp.agent.validate();
    if (clamp.mss_bytes != 0 && (clamp.mss_bytes < 64 || clamp.mss_bytes > 65535))
        throw_invalid("client.clamp.mss_bytes", clamp.mss_bytes, "not 0 (learn) or in [64, 65535]");
    if (clamp.price_timeout <= 0 || clamp.price_timeout > kMaxPriceTimeout)
        throw_invalid("client.clamp.price_timeout", clamp.price_timeout, "ns not in (0, 60 s]");
    if (clamp.max_flows < 1 || clamp.max_flows > 1'000'000)
        throw_invalid("client.clamp.max_flows", clamp.max_flows, "not in [1, 1000000]");
    if (clamp.flow_idle_timeout <= 0)
        throw_invalid("client.clamp.flow_idle_timeout", clamp.flow_idle_timeout, "ns not > 0");
    if (clamp.max_pending_records < 1)
        throw_invalid("client.clamp.max_pending_records", clamp.max_pending_records, "not >= 1");
}

// One TCP connection seen from its SYN, keyed by its downlink direction.
struct ClientCore::Flow {
    tcpip::FlowKey key;  // server -> client
    std::string name;
    std::unique_ptr<clamp::ClientAgent> agent;  // once the SYN-ACK is seen
    std::optional<std::uint16_t> mss_client;    // MSS option sent by the client
    std::optional<std::uint16_t> mss_server;    // ... by the server
    // AWND_os of the flow's latest uplink segment (eq. 17's "AWND from the OS"); until an
    // ACK is seen, the handshake's unscaled window.
    std::uint32_t awnd_os = std::numeric_limits<std::uint32_t>::max();
    bool have_ack = false;
    std::uint32_t last_ack = 0;  // highest ACK number sent uplink
    bool have_data = false;
    std::uint32_t data_end = 0;  // highest downlink seq + payload received
    time_ns last_seen = 0;
};

ClientCore::ClientCore(const ClientCoreParams& params)
    : params_([&] {
          ClientCoreParams p = params;
          p.reassembly.user = p.user;
          p.validate();
          return p;
      }()),
      reassembler_(params_.reassembly),
      tracker_([&] {
          tcpip::WindowTrackerParams t;
          t.max_flows = params_.clamp.max_flows;
          t.idle_timeout = params_.clamp.flow_idle_timeout;
          return t;
      }()) {}

ClientCore::~ClientCore() = default;

bool ClientCore::clamping() const {
    return params_.clamp.enabled && price_.has_value() && !failed_open_;
}

std::size_t ClientCore::clamp_flows() const { return flows_.size(); }

const clamp::ClientAgent* ClientCore::agent(const tcpip::FlowKey& downlink_flow) const {
    auto it = flows_.find(downlink_flow);
    return it == flows_.end() ? nullptr : it->second->agent.get();
}

std::vector<WindowRecord> ClientCore::take_window_records() {
    std::vector<WindowRecord> out;
    out.swap(records_);
    return out;
}

std::vector<ClampEvent> ClientCore::take_events() {
    std::vector<ClampEvent> out;
    out.swap(events_);
    return out;
}

void ClientCore::push_event(time_ns now, ClampEvent::Kind kind, std::string detail) {
    if (events_.size() >= params_.clamp.max_pending_records) {
        ++stats_.clamp_records_dropped;
        return;
    }
    events_.push_back(ClampEvent{now, kind, std::move(detail)});
}

// ---------------------------------------------------------------------------------------
// Downlink.

RxOutput ClientCore::on_rx_indication(time_ns now, const wire::RxIndication& ind) {
    RxOutput out;
    ++stats_.rx_indications;

    // HARQ feedback (docs/daemons.md "Uplink"): for every TB addressed to this client
    // whose header decoded; ACK iff the TB's CRC checked.
    if (ind.addressed) {
        if (!ind.header_ok) {
            ++stats_.rx_header_failed;
        } else if (ind.user != params_.user) {
            // The PHY says "addressed" for another user id: a misconfigured PHY. Feedback in
            // our name about someone else's TB would corrupt the AP's HARQ state.
            ++stats_.rx_other_user;
        } else {
            ++stats_.rx_addressed;
            out.uplink.emplace_back(
                wire::HarqFeedback{params_.user, ind.slot, ind.harq_pid, ind.crc_ok});
            if (ind.crc_ok) {
                ++stats_.harq_acks;
                ++stats_.rx_crc_ok;
                const std::uint64_t malformed_before = reassembler_.stats().malformed;
                auto pkts = reassembler_.on_pdu(ind.tb.data(), ind.tb.size(), now);
                if (reassembler_.stats().malformed == malformed_before) {
                    on_pdu_accepted(now, ind.tb);
                } else {
                    ++stats_.pdu_errors;
                }
                deliver(now, std::move(pkts), out.delivered);
            } else {
                ++stats_.harq_nacks;
                ++stats_.rx_crc_failed;
            }
        }
    }

    // CQI (docs/daemons.md "Uplink"): every cqi_period_slots slots, from the slot heard,
    // with the SNR and CQI the PHY measured on it. Slot numbers, not a count of slots
    // heard, so that missed slots do not stretch the period; a slot number going back
    // (PHY restart) reports at once.
    if (!std::isfinite(ind.snr_db)) {
        ++stats_.cqi_bad_snr;
    } else if (!last_cqi_slot_ || ind.slot < *last_cqi_slot_ ||
               ind.slot - *last_cqi_slot_ >= params_.cqi_period_slots) {
        out.uplink.emplace_back(wire::CqiReport{params_.user, ind.slot, ind.snr_db, ind.cqi});
        last_cqi_slot_ = ind.slot;
        ++stats_.cqi_reports;
    }

    deliver(now, reassembler_.poll(now), out.delivered);
    return out;
}

void ClientCore::on_pdu_accepted(time_ns now, const std::vector<std::uint8_t>& tb) {
    // The reassembler parsed the PDU (version, flags, CRC checked), so the fixed header
    // is valid: pdu.h offsets 1 (flags), 4 (seq), 8 (price, binary32, finite, >= 0).
    if (!first_pdu_t_) first_pdu_t_ = now;
    if (tb[1] & pdu::kFlagPrice) {
        ++stats_.pdus_priced;
        const std::uint32_t bits = load_be32(tb.data() + 8);
        float p;
        std::memcpy(&p, &bits, sizeof p);
        // The latest PDU to arrive carries the latest price we know of. (A HARQ
        // retransmission completes a few slots late with a price a few slots old; against
        // the router's 0.5 s averaging, §IV-A, that is nothing, and arrival order survives
        // an AP restart where sequence numbers do not.)
        price_ = PriceSample{p, now, load_be32(tb.data() + 4)};
        last_priced_pdu_t_ = now;
        if (failed_open_) {
            failed_open_ = false;
            ++stats_.clamp_resume_events;
            if (params_.clamp.enabled)
                push_event(now, ClampEvent::Kind::resume, "price received again");
        }
        return;
    }
    ++stats_.pdus_unpriced;
    if (!params_.clamp.enabled || failed_open_) return;
    const time_ns ref = last_priced_pdu_t_ ? *last_priced_pdu_t_ : *first_pdu_t_;
    if (now - ref > params_.clamp.price_timeout) {
        failed_open_ = true;
        ++stats_.clamp_fail_open_events;
        const double ms = static_cast<double>(now - ref) / kNsPerMs;
        std::ostringstream os;
        if (last_priced_pdu_t_)
            os << "PDUs without a price for " << ms << " ms since the last priced one";
        else
            os << "no PDU has carried a price in " << ms << " ms";
        os << " (price_timeout " << static_cast<double>(params_.clamp.price_timeout) / kNsPerMs
           << " ms): ACKs pass unchanged";
        push_event(now, ClampEvent::Kind::fail_open, os.str());
    }
}

void ClientCore::deliver(time_ns now, pdu::Reassembler::Delivered&& pkts,
                         std::vector<std::vector<std::uint8_t>>& out) {
    for (auto& p : pkts) {
        ++stats_.delivered_packets;
        stats_.delivered_bytes += p.size();
        if (params_.clamp.enabled) downlink_clamp(now, p);
        out.push_back(std::move(p));
    }
}

void ClientCore::downlink_clamp(time_ns now, const std::vector<std::uint8_t>& pkt) {
    auto r = tcpip::parse(pkt);
    if (!r || !r->tcp) return;
    const tcpip::PacketInfo& info = r.value();
    const tcpip::TcpHeader& t = *info.tcp;
    tracker_.learn(info, now);
    const tcpip::FlowKey& key = info.flow;  // downlink direction
    if (t.flags & tcpip::kRst) {
        auto it = flows_.find(key);
        if (it != flows_.end()) {
            flows_.erase(it);
            ++stats_.clamp_flows_closed;
        }
        return;
    }
    const bool syn = (t.flags & tcpip::kSyn) != 0;
    const bool ack = (t.flags & tcpip::kAck) != 0;
    if (syn && !ack) {  // the server opens a connection to the client
        Flow& f = create_flow(now, key);
        f.mss_server = t.mss;
        return;
    }
    Flow* f = find_flow(key);
    if (!f) return;
    f->last_seen = now;
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
    if (!f->agent) return;
    if (!clamping()) {
        ++stats_.clamp_data_unpriced;
        return;
    }
    // §IV-B: packet k of s_k bytes at t_k carrying price p; eqs. 14-17.
    f->agent->on_data(now, static_cast<std::uint32_t>(t.payload_len),
                      static_cast<double>(price_->price_s), f->awnd_os);
    ++stats_.clamp_data_packets;
}

// ---------------------------------------------------------------------------------------
// Uplink.

std::vector<wire::Message> ClientCore::on_uplink_packet(time_ns now,
                                                        std::vector<std::uint8_t> packet) {
    std::vector<wire::Message> out;
    if (packet.empty() || packet.size() > 0xFFFF) {
        ++stats_.uplink_dropped_size;
        return out;
    }
    if (params_.clamp.enabled) uplink_clamp(now, packet);
    ++stats_.uplink_packets;
    stats_.uplink_bytes += packet.size();
    out.emplace_back(wire::UplinkPacket{params_.user, std::move(packet)});
    return out;
}

void ClientCore::uplink_clamp(time_ns now, std::vector<std::uint8_t>& pkt) {
    auto r = tcpip::parse(pkt);
    if (!r) {
        ++stats_.uplink_unparsed;
        return;
    }
    const tcpip::PacketInfo& info = r.value();
    if (!info.tcp) return;
    const tcpip::TcpHeader& t = *info.tcp;
    const tcpip::FlowKey key = info.flow.reversed();  // the downlink direction
    const bool syn = (t.flags & tcpip::kSyn) != 0;
    const bool ack = (t.flags & tcpip::kAck) != 0;
    if (t.flags & tcpip::kRst) {
        tracker_.learn(info, now);
        auto it = flows_.find(key);
        if (it != flows_.end()) {
            flows_.erase(it);
            ++stats_.clamp_flows_closed;
        }
        return;
    }
    if (syn && !ack) {  // the client opens a connection: SYN never rewritten
        tracker_.learn(info, now);
        Flow& f = create_flow(now, key);
        f.mss_client = t.mss;
        f.awnd_os = t.window;  // SYN windows are never scaled (RFC 7323 §2.2)
        return;
    }
    Flow* f = find_flow(key);
    if (!f) {
        tracker_.learn(info, now);
        if (ack && !syn) ++stats_.clamp_acks_unknown;
        return;
    }
    f->last_seen = now;
    if (syn) {  // our SYN-ACK to a server-opened connection: handshake complete
        tracker_.learn(info, now);
        f->mss_client = t.mss;
        f->awnd_os = t.window;
        ensure_agent(*f);
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

    if (!clamping()) {
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
    if (outcome != tcpip::RewriteOutcome::rewritten) {
        ++stats_.clamp_acks_unknown;
        return;
    }
    const std::uint8_t shift = tracker_.shift(info.flow).value_or(0);
    const std::uint8_t* th = pkt.data() + t.offset;
    const std::uint64_t advertised =
        std::uint64_t{static_cast<std::uint16_t>((th[14] << 8) | th[15])} << shift;
    ++stats_.clamp_acks_rewritten;
    if (advertised < *os) ++stats_.clamp_acks_reduced;
    if (records_.size() >= params_.clamp.max_pending_records) {
        ++stats_.clamp_records_dropped;
        return;
    }
    records_.push_back(
        WindowRecord{now, f->name, static_cast<double>(price_->price_s), w, *os, advertised});
}

// ---------------------------------------------------------------------------------------
// Flows.

ClientCore::Flow* ClientCore::find_flow(const tcpip::FlowKey& downlink) {
    auto it = flows_.find(downlink);
    return it == flows_.end() ? nullptr : it->second.get();
}

ClientCore::Flow& ClientCore::create_flow(time_ns now, const tcpip::FlowKey& downlink) {
    auto it = flows_.find(downlink);
    if (it != flows_.end()) flows_.erase(it);  // a new SYN restarts the connection
    if (flows_.size() >= params_.clamp.max_flows) expire_flows(now);
    if (flows_.size() >= params_.clamp.max_flows) {
        // Evict the least recently seen: O(flows), only when the table is full.
        auto victim = std::min_element(
            flows_.begin(), flows_.end(),
            [](const auto& a, const auto& b) { return a.second->last_seen < b.second->last_seen; });
        flows_.erase(victim);
        ++stats_.clamp_flows_evicted;
    }
    auto f = std::make_unique<Flow>();
    f->key = downlink;
    f->name = flow_name(downlink);
    f->last_seen = now;
    ++stats_.clamp_flows_created;
    return *flows_.emplace(downlink, std::move(f)).first->second;
}

void ClientCore::ensure_agent(Flow& f) {
    if (f.agent) return;
    clamp::ClientParams p = params_.clamp.agent;
    if (params_.clamp.mss_bytes != 0) {
        p.mss_bytes = params_.clamp.mss_bytes;
    } else if (f.mss_client || f.mss_server) {
        // The sender's segments are at most the MSS each side announced (RFC 9293 §3.7.1).
        std::uint32_t m = std::numeric_limits<std::uint32_t>::max();
        if (f.mss_client) m = std::min<std::uint32_t>(m, *f.mss_client);
        if (f.mss_server) m = std::min<std::uint32_t>(m, *f.mss_server);
        if (m >= 1) p.mss_bytes = m;
    }
    f.agent = std::make_unique<clamp::ClientAgent>(p);
    ++stats_.clamp_agents_created;
}

void ClientCore::expire_flows(time_ns now) {
    for (auto it = flows_.begin(); it != flows_.end();) {
        if (now - it->second->last_seen > params_.clamp.flow_idle_timeout) {
            it = flows_.erase(it);
            ++stats_.clamp_flows_expired;
        } else {
            ++it;
        }
    }
}

std::vector<std::vector<std::uint8_t>> ClientCore::poll(time_ns now) {
    std::vector<std::vector<std::uint8_t>> out;
    deliver(now, reassembler_.poll(now), out);
    if (params_.clamp.enabled) {
        if (!last_expire_ || now - *last_expire_ >= kExpireEvery) {
            last_expire_ = now;
            expire_flows(now);
            tracker_.expire(now);
        }
    }
    return out;
}

std::optional<time_ns> ClientCore::next_deadline() const { return reassembler_.next_deadline(); }

}  // namespace oppsched::client
