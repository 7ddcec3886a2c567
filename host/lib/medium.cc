#include "oppsched/medium.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <stdexcept>
#include <string_view>

#include "oppsched/fading.h"
#include "oppsched/lead_slots.h"
#include "oppsched/packet.h"
#include "oppsched/sched.h"
#include "oppsched/segmentation.h"

namespace oppsched::ap {

const char* to_string(medium_mode m) {
    switch (m) {
        case medium_mode::none:
            return "none";
        case medium_mode::scheduled:
            return "scheduled";
        case medium_mode::node_fair:
            return "node_fair";
    }
    return "?";
}

std::optional<medium_mode> medium_mode_from(std::string_view name) {
    for (auto m : {medium_mode::none, medium_mode::scheduled, medium_mode::node_fair})
        if (name == to_string(m)) return m;
    return std::nullopt;
}

namespace {
[[noreturn]] void bad(const std::string& key, const std::string& value, const std::string& why) {
    throw std::invalid_argument("medium." + key + ": " + value + " " + why);
}
std::string num(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%g", v);
    return b;
}
}  // namespace

void medium_params::validate() const {
    if (station_buffer_packets < 1 || station_buffer_packets > 100000)
        bad("station_buffer_packets", std::to_string(station_buffer_packets), "not in [1, 100000]");
    if (!std::isfinite(uplink_mean_snr_db) || uplink_mean_snr_db < -50 || uplink_mean_snr_db > 100)
        bad("uplink_mean_snr_db", num(uplink_mean_snr_db), "not in [-50, 100]");
    if (!std::isfinite(uplink_doppler_hz) || uplink_doppler_hz < 0 || uplink_doppler_hz > 10000)
        bad("uplink_doppler_hz", num(uplink_doppler_hz), "not in [0, 10000]");
    if (max_transmissions < 1 || max_transmissions > 64)
        bad("max_transmissions", std::to_string(max_transmissions), "not in [1, 64]");
    if (!(pf_alpha > 0.0 && pf_alpha <= 1.0)) bad("pf_alpha", num(pf_alpha), "not in (0, 1]");
    if (lead_slots < kMinLeadSlots || lead_slots > kMaxLeadSlots)
        bad("lead_slots", std::to_string(lead_slots),
            "not in [" + std::to_string(kMinLeadSlots) + ", " + std::to_string(kMaxLeadSlots) +
                "]");
    if (harq_processes < 1 || harq_processes > 16)
        bad("harq_processes", std::to_string(harq_processes), "not in [1, 16]");
    if (feedback_timeout_slots < 1 || feedback_timeout_slots > 100000)
        bad("feedback_timeout_slots", std::to_string(feedback_timeout_slots), "not in [1, 100000]");
}

namespace {
struct pending_tb {
    std::vector<std::uint8_t> bytes;  // client: the last transmission received (if any)
    std::uint32_t seq = 0;
    int mcs = -1;
    int transmissions = 0;
    std::uint32_t tb_bytes = 0;  // client: the granted size
};

// phy: one stop-and-wait HARQ process of a station's uplink.
struct uplink_process {
    std::optional<pending_tb> tb;
    bool ndi = false;
    bool awaiting = false;  // sent in tx_slot, no result yet
    std::uint64_t tx_slot = 0;
    std::uint64_t row = 0;        // the medium.csv row of that transmission (absolute index)
    std::uint64_t nacked_at = 0;  // when the last NACK came (the oldest goes first)
    time_ns tx_air = 0;           // client: the air time of tx_slot
};

constexpr std::uint8_t kRvSequence[4] = {0, 2, 3, 1};  // harq.h's default

struct station_state {
    std::string name;
    std::vector<uplink_process> procs;  // phy
    std::optional<double> cqi_db;       // phy: the AP's latest measurement
    std::deque<ip_packet> queue;
    std::unique_ptr<pdu::segmenter> seg;
    std::unique_ptr<pdu::reassembler> reasm;
    std::unique_ptr<channel::jakes_channel> chan;
    std::optional<pending_tb> tb;
    std::optional<linkadapt::olla> olla;
    medium_station_stats stats;
    // client: the station's last buffer status (stats.reported_bytes), counted up to the
    // grant of slot `reported_slot`, and the new-TB grants since (slot, TB bytes)
    std::uint64_t reported_slot = 0;
    // (in slot order: those up to reported_slot are dropped when a report comes)
    std::deque<std::pair<std::uint64_t, std::uint32_t>> granted_since;
    std::uint64_t granted_bytes = 0;  // the sum of granted_since's bytes
    // client: bytes the station holds beyond what its grants since the report will carry
    // (asked for every station in every slot: kept as a sum, not counted again)
    std::uint64_t backlog_estimate() const {
        const std::uint64_t r = stats.reported_bytes;
        return r > granted_bytes ? r - granted_bytes : 0;
    }
    void forget_oldest_grant() {
        granted_bytes -= granted_since.front().second;
        granted_since.pop_front();
    }
};

std::uint64_t station_seed(std::uint64_t seed, std::size_t station) {
    // splitmix64 of (seed, station, "uplink"): independent of the downlink channels' seeds.
    std::uint64_t z =
        seed * 0x9E3779B97F4A7C15ULL + (station + 1) * 0xBF58476D1CE4E5B9ULL + 0x75706C696E6BULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
}  // namespace

struct medium::Impl {
    Impl(medium_params params, linkadapt::mcs_table t, std::vector<std::uint32_t> tbs, double slot)
        : p(std::move(params)),
          table(std::move(t)),
          tb_bytes_of_mcs(std::move(tbs)),
          slot_s(slot),
          slot_ns(static_cast<time_ns>(std::llround(slot * 1e9))) {}
    medium_params p;
    linkadapt::mcs_table table;
    std::vector<std::uint32_t> tb_bytes_of_mcs;
    double slot_s;
    time_ns slot_ns;
    std::vector<station_state> st;
    // Who gets the slot, from the scheduler family (sched.h): node_fair, round robin over the
    // stations 0..n-1 and the AP (n); scheduled, PF over the downlink links 0..n-1 and the
    // uplink links n..2n-1. None in mode none.
    std::unique_ptr<sched::scheduler_policy> policy;
    std::vector<double> link_rate;  // per slot, the policy's inputs
    std::vector<bool> link_wants;
    std::deque<std::pair<time_ns, std::vector<std::uint8_t>>> received;
    std::deque<medium_row> rows;            // phy: rows of uplink slots wait for their result
    std::uint64_t rows_base = 0;            // the absolute index of rows.front()
    std::optional<wire::slot_grant> grant;  // phy: the uplink slot just decided
    std::optional<wire::uplink_grant> station_grant;  // client: the uplink slot just decided
    pdu::pdu_format format = pdu::pdu_format::standard;
    std::uint64_t results = 0;  // phy: a counter ordering the NACKs
    medium_stats stats;
    std::uint64_t next_packet_id = 1;

    double snr_db_at(std::size_t s, std::uint64_t slot) const {
        const double t = static_cast<double>(slot) * slot_s;
        return channel::linear_to_db(st[s].chan->snr_linear(t));
    }
    bool phy() const { return p.decode == uplink_decode::phy; }
    bool client() const { return p.queue == station_queue::client; }
    bool processes() const { return phy() || client(); }  // per-station HARQ processes
    // The MCS the AP would grant station s in `slot` (kNoMcs: none usable).
    int uplink_mcs(std::size_t s, std::uint64_t slot, double* cqi_out) const {
        const std::uint64_t at = slot >= p.lead_slots ? slot - p.lead_slots : 0;
        if (phy() && !st[s].cqi_db) return linkadapt::kNoMcs;  // nothing measured yet
        const double cqi = phy() ? *st[s].cqi_db : snr_db_at(s, at);
        if (cqi_out) *cqi_out = cqi;
        const int m = st[s].olla ? st[s].olla->select(table, cqi) : table.select(cqi);
        if (m < 0 || tb_bytes_of_mcs.at(static_cast<std::size_t>(m)) == 0) return linkadapt::kNoMcs;
        return m;
    }
    bool backlogged(std::size_t s) const {
        if (processes()) {  // a TB to retransmit, or new data and a free process
            bool free = false;
            for (const auto& pr : st[s].procs) {
                if (pr.tb && !pr.awaiting) return true;
                free = free || !pr.tb;
            }
            if (client()) return free && st[s].backlog_estimate() > 0;
            return free && (!st[s].queue.empty() || st[s].seg->has_partial());
        }
        return st[s].tb || !st[s].queue.empty() || st[s].seg->has_partial();
    }
    // phy: the MCS a contender would send at (a retransmission's own), else kNoMcs.
    int contender_mcs(std::size_t s, std::uint64_t slot) const {
        if (processes()) {
            for (const auto& pr : st[s].procs)
                if (pr.tb && !pr.awaiting) return pr.tb->mcs;
            return uplink_mcs(s, slot, nullptr);
        }
        return st[s].tb ? st[s].tb->mcs : uplink_mcs(s, slot, nullptr);
    }
    std::vector<std::uint32_t> queue_sizes() const {
        std::vector<std::uint32_t> q;
        q.reserve(st.size());
        for (const auto& x : st) q.push_back(static_cast<std::uint32_t>(x.queue.size()));
        return q;
    }
    void transmit(std::size_t s, std::uint64_t slot, time_ns air, medium_row& row);
    // phy: builds the grant of station s's slot; the row waits for the result.
    void transmit_phy(std::size_t s, std::uint64_t slot, medium_row& row);
    // client: grants station s the slot (a NACKed TB again, else a new one); the row waits
    // for the station's TB.
    void transmit_client(std::size_t s, std::uint64_t slot, time_ns air, medium_row& row);
    // The process a slot goes to: a NACKed TB first (the oldest NACK), else a free one;
    // procs.size() if none.
    std::size_t pick_process(std::size_t s) const {
        const auto& x = st[s];
        std::size_t k = x.procs.size();
        for (std::size_t i = 0; i < x.procs.size(); ++i) {
            const auto& pr = x.procs[i];
            if (pr.tb && !pr.awaiting &&
                (k == x.procs.size() || pr.nacked_at < x.procs[k].nacked_at))
                k = i;
        }
        if (k == x.procs.size())
            for (std::size_t i = 0; i < x.procs.size() && k == x.procs.size(); ++i)
                if (!x.procs[i].tb) k = i;
        return k;
    }
    // phy: the result of process k's transmission (ok: CRC passed, `tb` the decoded bytes).
    void result(std::size_t s, std::size_t k, const char* outcome, bool ok,
                const std::vector<std::uint8_t>* tb, double snr_db, time_ns now);
    // The bytes of every uplink TB the integrity tag takes (integrity.h): 0 without a key.
    std::size_t tag_bytes() const { return p.integrity_key ? integrity::kTagBytes : 0; }
    // A new TB of station s at MCS mcs, built on its behalf from its queue (and tagged).
    std::vector<std::uint8_t> new_tb_bytes(std::size_t s, int mcs) {
        auto& x = st[s];
        auto built = x.seg->build(tb_bytes_of_mcs[static_cast<std::size_t>(mcs)] - tag_bytes(),
                                  [&x]() -> std::optional<ip_packet> {
                                      if (x.queue.empty()) return std::nullopt;
                                      ip_packet pk = std::move(x.queue.front());
                                      x.queue.pop_front();
                                      return pk;
                                  });
        if (p.integrity_key) integrity::append_tag(*p.integrity_key, built.bytes);
        return std::move(built.bytes);
    }
    // The MAC PDU's length in a received TB of station s: the whole TB without a key, the TB
    // less its tag when the tag checks; nullopt (counted) when it does not.
    std::optional<std::size_t> authentic_pdu_len(std::size_t s,
                                                 const std::vector<std::uint8_t>& tb) {
        if (!p.integrity_key) return tb.size();
        if (integrity::verify(*p.integrity_key, tb.data(), tb.size()))
            return tb.size() - integrity::kTagBytes;
        ++st[s].stats.integrity_failed;
        return std::nullopt;
    }
    void deliver(std::size_t s, pdu::reassembler::delivered_packets pk, time_ns release) {
        for (auto& b : pk) {
            ++st[s].stats.delivered;
            st[s].stats.delivered_bytes += b.size();
            received.emplace_back(release, std::move(b));
        }
    }
};

medium::medium(medium_params params, std::vector<std::string> station_names,
               linkadapt::mcs_table table, std::vector<std::uint32_t> tb_bytes_of_mcs,
               pdu::pdu_format format, double slot_s)
    : impl_(std::make_unique<Impl>(std::move(params), std::move(table), std::move(tb_bytes_of_mcs),
                                   slot_s)) {
    Impl& m = *impl_;
    m.p.validate();
    if (m.tb_bytes_of_mcs.size() != m.table.size())
        throw std::invalid_argument("medium: tb_bytes_of_mcs has " +
                                    std::to_string(m.tb_bytes_of_mcs.size()) + " entries, the " +
                                    "mcs_table " + std::to_string(m.table.size()));
    if (!(slot_s > 0.0)) throw std::invalid_argument("medium: slot_s " + num(slot_s) + " not > 0");
    if (station_names.size() > 0xFFFF)
        throw std::invalid_argument("medium: more than 65535 stations");
    const std::size_t n = station_names.size();
    if (m.p.mode == medium_mode::node_fair)
        m.policy = sched::make_scheduler({n + 1, sched::round_robin_params{m.p.pf_alpha}});
    if (m.p.mode == medium_mode::scheduled)
        m.policy = sched::make_scheduler({2 * n, sched::pf_params{m.p.pf_alpha}});
    m.st.resize(n);
    for (std::size_t s = 0; s < n; ++s) {
        auto& x = m.st[s];
        x.name = station_names[s];
        pdu::segmenter_params sp;
        sp.user = static_cast<std::uint16_t>(s);
        sp.format = format;
        x.seg = std::make_unique<pdu::segmenter>(sp);
        pdu::reassembler_params rp;
        rp.user = static_cast<std::uint16_t>(s);
        x.reasm = std::make_unique<pdu::reassembler>(rp);
        channel::jakes_params jp;
        jp.doppler_hz = m.p.uplink_doppler_hz;
        jp.mean_snr_db = m.p.uplink_mean_snr_db;
        jp.seed = station_seed(m.p.seed, s);
        x.chan = std::make_unique<channel::jakes_channel>(jp);
        if (m.p.olla_enabled) x.olla.emplace(m.p.olla);
        if (m.processes()) x.procs.resize(m.p.harq_processes);
    }
    m.format = format;
}

medium::~medium() = default;

medium_mode medium::mode() const { return impl_->p.mode; }
std::size_t medium::stations() const { return impl_->st.size(); }
std::size_t medium::queued_packets(std::uint32_t s) const { return impl_->st.at(s).queue.size(); }
bool medium::uplink_backlogged(std::uint32_t s) const {
    if (s >= impl_->st.size()) throw std::out_of_range("medium: station " + std::to_string(s));
    return impl_->backlogged(s);
}
const medium_stats& medium::stats() const { return impl_->stats; }
const medium_station_stats& medium::station_stats(std::uint32_t s) const {
    return impl_->st.at(s).stats;
}

bool medium::on_uplink_packet(time_ns now, std::uint32_t station, std::vector<std::uint8_t> b) {
    Impl& m = *impl_;
    if (station >= m.st.size())
        throw std::out_of_range("medium: station " + std::to_string(station));
    auto& x = m.st[station];
    ++x.stats.packets_in;
    x.stats.bytes_in += b.size();
    if (x.queue.size() >= m.p.station_buffer_packets) {
        ++x.stats.dropped_full;
        return false;
    }
    ip_packet pkt;
    pkt.data = std::move(b);
    pkt.user = station;
    pkt.id = m.next_packet_id++;
    pkt.arrival = now;
    x.queue.push_back(std::move(pkt));
    return true;
}

void medium::Impl::transmit(std::size_t s, std::uint64_t slot, time_ns air, medium_row& row) {
    auto& x = st[s];
    ++x.stats.slots;
    if (!x.tb) {
        double cqi = 0.0;
        const int mcs = uplink_mcs(s, slot, &cqi);
        row.cqi_db = cqi;
        if (mcs == linkadapt::kNoMcs) {  // cannot happen for a contender; the slot goes unused
            row.outcome = "unusable";
            return;
        }
        const std::uint32_t seq = x.seg->next_seq();
        x.tb = pending_tb{new_tb_bytes(s, mcs), seq, mcs, 0};
    } else {
        row.cqi_db = snr_db_at(s, slot >= p.lead_slots ? slot - p.lead_slots : 0);
    }
    auto& tb = *x.tb;
    row.mcs = tb.mcs;
    row.tb_bytes = static_cast<std::uint32_t>(tb.bytes.size());
    row.retx = tb.transmissions;
    row.decoded_by = "model";
    const double snr = snr_db_at(s, slot);
    row.snr_db = snr;
    ++tb.transmissions;
    const bool ok = snr >= table[static_cast<std::size_t>(tb.mcs)].min_snr_db;
    if (x.olla) x.olla->update(ok, linkadapt::olla::position_of(table, tb.mcs));
    // The model decodes the bytes the medium built itself: their tag always checks, the
    // check is here so that every path from a TB to the reassembler goes through it.
    const auto pdu_len = ok ? authentic_pdu_len(s, tb.bytes) : std::nullopt;
    const time_ns release = air + slot_ns;
    auto deliver = [&](pdu::reassembler::delivered_packets pk) {
        for (auto& b : pk) {
            ++x.stats.delivered;
            x.stats.delivered_bytes += b.size();
            received.emplace_back(release, std::move(b));
        }
    };
    if (ok && pdu_len) {
        ++x.stats.tbs_ok;
        row.outcome = "ack";
        deliver(x.reasm->on_pdu(tb.bytes.data(), *pdu_len, air));
        x.tb.reset();
    } else if (tb.transmissions >= static_cast<int>(p.max_transmissions)) {
        ++x.stats.tbs_failed;
        ++x.stats.tbs_dropped;
        row.outcome = "dropped";
        deliver(x.reasm->on_lost(tb.seq, air));
        x.tb.reset();
    } else {
        ++x.stats.tbs_failed;
        row.outcome = ok ? "integrity" : "nack";
    }
}

slot_direction medium::on_slot(std::uint64_t slot, time_ns air_time_ns,
                               const std::vector<bool>& down_backlogged,
                               const std::vector<double>& down_rate_bps) {
    Impl& m = *impl_;
    ++m.stats.slots;
    m.grant.reset();
    m.station_grant.reset();
    if (m.client()) {  // granted slots whose TB never came (the air time has gone by): NACKs
        for (std::size_t s = 0; s < m.st.size(); ++s)
            for (std::size_t k = 0; k < m.st[s].procs.size(); ++k) {
                const auto& pr = m.st[s].procs[k];
                // (phy: a TB that came in time went to the PHY, whose report decides)
                if (pr.awaiting && pr.tb->bytes.empty() &&
                    (slot > pr.tx_slot + m.p.lead_slots + 1 || slot < pr.tx_slot)) {
                    ++m.st[s].stats.tbs_late;
                    m.result(s, k, "late", false, nullptr, 0.0, air_time_ns);
                }
            }
    }
    if (m.phy()) {  // transmissions whose report never came: NACKs
        for (std::size_t s = 0; s < m.st.size(); ++s)
            for (std::size_t k = 0; k < m.st[s].procs.size(); ++k) {
                const auto& pr = m.st[s].procs[k];
                // (a slot before the transmission's: the PHY restarted, the report is gone)
                if (pr.awaiting &&
                    (slot > pr.tx_slot + m.p.feedback_timeout_slots || slot < pr.tx_slot)) {
                    ++m.st[s].stats.timeouts;
                    m.result(s, k, "timeout", false, nullptr, 0.0, air_time_ns);
                }
            }
    }
    if (m.p.mode == medium_mode::none) {
        ++m.stats.slots_down;
        return slot_direction::down;
    }
    const std::size_t n = m.st.size();
    const bool ap_wants =
        std::any_of(down_backlogged.begin(), down_backlogged.end(), [](bool b) { return b; });
    // A station contends with uplink backlog and a usable MCS (or a TB to retransmit).
    std::vector<bool> up(n, false);
    std::vector<double> up_rate(n, 0.0);
    std::uint32_t contenders = ap_wants ? 1 : 0;
    for (std::size_t s = 0; s < n; ++s) {
        if (!m.backlogged(s)) continue;
        const int mcs = m.contender_mcs(s, slot);
        if (mcs == linkadapt::kNoMcs) continue;
        up[s] = true;
        up_rate[s] = m.table[static_cast<std::size_t>(mcs)].rate_bps;
        ++contenders;
    }
    int winner = -1;  // station, or -1: the AP
    if (m.p.mode == medium_mode::node_fair) {
        // Round robin: the contender served least recently; never served ones by index, so
        // station 0 first and the AP after the stations.
        m.link_rate.assign(n + 1, 1.0);
        m.link_wants.assign(up.begin(), up.end());
        m.link_wants.push_back(ap_wants);
        const int i = m.policy->step(m.link_rate, m.link_wants);
        if (i >= 0 && i < static_cast<int>(n)) winner = i;
    } else {  // scheduled: PF over the downlink and uplink links
        m.link_rate.assign(2 * n, 0.0);
        m.link_wants.assign(2 * n, false);
        for (std::size_t u = 0; u < n; ++u) {
            m.link_rate[u] = u < down_rate_bps.size() ? down_rate_bps[u] : 0.0;
            m.link_wants[u] = u < down_backlogged.size() && down_backlogged[u];
            m.link_rate[n + u] = up_rate[u];
            m.link_wants[n + u] = up[u];
        }
        const int l = m.policy->step(m.link_rate, m.link_wants);
        if (l >= static_cast<int>(n)) winner = l - static_cast<int>(n);
    }
    if (contenders == 0) ++m.stats.slots_idle;
    medium_row row;
    row.slot = slot;
    row.t_ns = air_time_ns;
    row.contenders = contenders;
    if (winner < 0) {
        ++m.stats.slots_down;
        row.direction = slot_direction::down;
        row.queue = m.queue_sizes();
        m.rows.push_back(std::move(row));
        return slot_direction::down;
    }
    ++m.stats.slots_up;
    row.direction = slot_direction::up;
    row.station = winner;
    if (m.client())
        m.transmit_client(static_cast<std::size_t>(winner), slot, air_time_ns, row);
    else if (m.phy())
        m.transmit_phy(static_cast<std::size_t>(winner), slot, row);
    else
        m.transmit(static_cast<std::size_t>(winner), slot, air_time_ns, row);
    row.queue = m.queue_sizes();
    m.rows.push_back(std::move(row));
    return slot_direction::up;
}

std::vector<std::vector<std::uint8_t>> medium::take_received(time_ns now) {
    Impl& m = *impl_;
    std::vector<std::vector<std::uint8_t>> out;
    while (!m.received.empty() && m.received.front().first <= now) {
        out.push_back(std::move(m.received.front().second));
        m.received.pop_front();
    }
    return out;
}

std::optional<time_ns> medium::next_release() const {
    if (impl_->received.empty()) return std::nullopt;
    return impl_->received.front().first;
}

std::vector<medium_row> medium::take_rows() {
    // In slot order: a row of an uplink slot whose result has not come holds back the later.
    Impl& m = *impl_;
    std::vector<medium_row> out;
    while (!m.rows.empty() && std::string_view(m.rows.front().outcome) != "pending") {
        out.push_back(std::move(m.rows.front()));
        m.rows.pop_front();
        ++m.rows_base;
    }
    return out;
}

void medium::Impl::transmit_phy(std::size_t s, std::uint64_t slot, medium_row& row) {
    auto& x = st[s];
    ++x.stats.slots;
    row.decoded_by = "phy";
    const std::size_t k = pick_process(s);
    row.cqi_db = x.cqi_db.value_or(0.0);
    if (k == x.procs.size() || !x.procs[k].tb) {
        const int mcs = uplink_mcs(s, slot, nullptr);
        if (k == x.procs.size() || mcs == linkadapt::kNoMcs) {  // not for a contender
            row.outcome = "unusable";
            return;
        }
        auto& pr = x.procs[k];
        const std::uint32_t seq = x.seg->next_seq();
        pr.tb = pending_tb{new_tb_bytes(s, mcs), seq, mcs, 0};
        pr.ndi = !pr.ndi;
    }
    auto& pr = x.procs[k];
    auto& tb = *pr.tb;
    row.mcs = tb.mcs;
    row.tb_bytes = static_cast<std::uint32_t>(tb.bytes.size());
    row.retx = tb.transmissions;
    row.harq_pid = static_cast<int>(k);
    row.outcome = "pending";
    wire::slot_grant g;
    g.slot = slot;
    g.empty = false;
    g.uplink = true;
    g.user = static_cast<std::uint16_t>(s);
    g.mcs = static_cast<std::uint8_t>(tb.mcs);
    g.harq_pid = static_cast<std::uint8_t>(k);
    g.ndi = pr.ndi ? 1 : 0;
    g.rv = kRvSequence[static_cast<std::size_t>(tb.transmissions) % 4];
    g.tb = tb.bytes;
    grant = std::move(g);
    ++tb.transmissions;
    pr.awaiting = true;
    pr.tx_slot = slot;
    pr.row = rows_base + rows.size();  // on_slot appends `row` next
}

void medium::Impl::transmit_client(std::size_t s, std::uint64_t slot, time_ns air,
                                   medium_row& row) {
    auto& x = st[s];
    ++x.stats.slots;
    row.decoded_by = phy() ? "phy" : "model";
    const std::size_t k = pick_process(s);
    double cqi = 0.0;
    const int fresh_mcs = uplink_mcs(s, slot, &cqi);
    row.cqi_db = phy() ? x.cqi_db.value_or(0.0) : cqi;
    if (k == x.procs.size() || (!x.procs[k].tb && fresh_mcs == linkadapt::kNoMcs)) {
        row.outcome = "unusable";  // not for a contender
        return;
    }
    auto& pr = x.procs[k];
    if (!pr.tb) {  // a new TB: the station builds it from its buffer
        const auto bytes = tb_bytes_of_mcs[static_cast<std::size_t>(fresh_mcs)];
        pr.tb = pending_tb{{}, 0, fresh_mcs, 0, bytes};
        pr.ndi = !pr.ndi;
        x.granted_since.emplace_back(slot, bytes);
        x.granted_bytes += bytes;
        while (x.granted_since.size() > 4096) x.forget_oldest_grant();
    }
    auto& tb = *pr.tb;
    row.mcs = tb.mcs;
    row.tb_bytes = tb.tb_bytes;
    row.retx = tb.transmissions;
    row.harq_pid = static_cast<int>(k);
    row.outcome = "pending";
    wire::uplink_grant g;
    g.user = static_cast<std::uint16_t>(s);
    g.slot = slot;
    g.air_time_ns = air;
    g.mcs = static_cast<std::uint8_t>(tb.mcs);
    g.harq_pid = static_cast<std::uint8_t>(k);
    g.ndi = pr.ndi ? 1 : 0;
    g.rv = kRvSequence[static_cast<std::size_t>(tb.transmissions) % 4];
    g.tb_bytes = static_cast<std::uint16_t>(tb.tb_bytes);
    station_grant = g;
    ++x.stats.grants;
    ++tb.transmissions;
    pr.awaiting = true;
    pr.tx_slot = slot;
    pr.tx_air = air;
    pr.row = rows_base + rows.size();  // on_slot appends `row` next
}

void medium::Impl::result(std::size_t s, std::size_t k, const char* outcome, bool ok,
                          const std::vector<std::uint8_t>* decoded, double snr_db, time_ns now) {
    auto& x = st[s];
    auto& pr = x.procs[k];
    auto& tb = *pr.tb;
    pr.awaiting = false;
    // OLLA learns the channel: a TB that decoded says the MCS got through, its tag or not.
    if (x.olla) x.olla->update(ok, linkadapt::olla::position_of(table, tb.mcs));
    // A TB whose tag is wrong (forged over the air, or recorded in another run) is not the
    // station's: a NACK, so that the station sends its own again, and nothing of it parsed.
    std::optional<std::size_t> pdu_len;
    if (ok) {
        pdu_len = authentic_pdu_len(s, *decoded);
        if (!pdu_len) {
            ok = false;
            outcome = "integrity";
        }
    }
    const bool give_up = !ok && tb.transmissions >= static_cast<int>(p.max_transmissions);
    if (ok) {
        ++x.stats.tbs_ok;
        deliver(s, x.reasm->on_pdu(decoded->data(), *pdu_len, now), now);
    } else {
        ++x.stats.tbs_failed;
        if (give_up) {
            ++x.stats.tbs_dropped;
            // client: the AP knows the sequence number only from a transmission it received
            if (!client() || !tb.bytes.empty()) deliver(s, x.reasm->on_lost(tb.seq, now), now);
        }
    }
    if (pr.row >= rows_base && pr.row - rows_base < rows.size()) {
        auto& r = rows[pr.row - rows_base];
        r.outcome = ok ? "ack" : give_up ? "dropped" : outcome;
        r.snr_db = snr_db;
    }
    if (ok || give_up)
        pr.tb.reset();
    else
        pr.nacked_at = ++results;
}

std::optional<wire::slot_grant> medium::take_uplink_grant() {
    std::optional<wire::slot_grant> g;
    g.swap(impl_->grant);
    return g;
}

std::optional<wire::uplink_grant> medium::take_station_grant() {
    std::optional<wire::uplink_grant> g;
    g.swap(impl_->station_grant);
    return g;
}

namespace {
// The PDU sequence number a TB carries (nullopt: not a PDU of this format).
// `tag`: the bytes of the integrity tag at its end (not part of the PDU).
std::optional<std::uint32_t> pdu_seq_of(pdu::pdu_format f, const std::vector<std::uint8_t>& b,
                                        std::size_t tag) {
    if (b.size() <= tag) return std::nullopt;
    const std::size_t n = b.size() - tag;
    if (f == pdu::pdu_format::compact) {
        auto v = pdu::parse_compact_view(b.data(), n);
        if (!v) return std::nullopt;
        return v->seq;
    }
    auto v = pdu::parse_view(b.data(), n);
    if (!v) return std::nullopt;
    return v->header.seq;
}
}  // namespace

bool medium::on_buffer_status(time_ns now, std::uint32_t station, const wire::buffer_status& bs) {
    (void)now;
    Impl& m = *impl_;
    if (!m.client() || station >= m.st.size()) return false;
    auto& x = m.st[station];
    ++x.stats.status_reports;
    if (bs.last_grant_slot < x.reported_slot) return true;  // older than what we have
    x.reported_slot = bs.last_grant_slot;
    x.stats.reported_bytes = bs.buffer_bytes;
    while (!x.granted_since.empty() && x.granted_since.front().first <= x.reported_slot)
        x.forget_oldest_grant();
    return true;
}

bool medium::on_uplink_tb(time_ns now, std::uint32_t station, const wire::uplink_tb& msg) {
    Impl& m = *impl_;
    if (!m.client() || station >= m.st.size()) return false;
    auto& x = m.st[station];
    const std::size_t k = msg.harq_pid;
    if (k >= x.procs.size() || !x.procs[k].awaiting || x.procs[k].tx_slot != msg.slot ||
        (x.procs[k].ndi ? 1 : 0) != msg.ndi || msg.tb.size() != x.procs[k].tb->tb_bytes) {
        ++x.stats.tbs_unexpected;
        return false;
    }
    // the status that came with it: the buffer after this TB was built
    wire::buffer_status bs;
    bs.user = msg.user;
    bs.last_grant_slot = msg.slot;
    bs.buffer_bytes = msg.buffer_bytes;
    bs.buffer_packets = msg.buffer_packets;
    on_buffer_status(now, station, bs);
    auto& pr = x.procs[k];
    auto& tb = *pr.tb;
    // (late or not, the TB tells the AP its sequence number, should HARQ give it up)
    tb.bytes = msg.tb;
    if (auto seq = pdu_seq_of(m.format, tb.bytes, m.tag_bytes())) tb.seq = *seq;
    if (now > pr.tx_air) {  // the station was not ready when its slot began
        ++x.stats.tbs_late;
        m.result(station, k, "late", false, nullptr, 0.0, now);
        return true;
    }
    if (m.phy()) {  // the PHY sends it in the slot, the AP's receiver reports the result
        wire::slot_grant g;
        g.slot = msg.slot;
        g.empty = false;
        g.uplink = true;
        g.user = static_cast<std::uint16_t>(station);
        g.mcs = static_cast<std::uint8_t>(tb.mcs);
        g.harq_pid = static_cast<std::uint8_t>(k);
        g.ndi = msg.ndi;
        g.rv = kRvSequence[static_cast<std::size_t>(tb.transmissions - 1) % 4];
        g.tb = tb.bytes;
        m.grant = std::move(g);
        return true;
    }
    const double snr = m.snr_db_at(station, msg.slot);
    const bool ok = snr >= m.table[static_cast<std::size_t>(tb.mcs)].min_snr_db;
    // decoded at the end of the slot's air time, where the packets are released
    m.result(station, k, "nack", ok, &tb.bytes, snr, pr.tx_air + m.slot_ns);
    return true;
}

bool medium::on_uplink_rx(time_ns now, std::uint32_t station, const wire::rx_indication& rx) {
    Impl& m = *impl_;
    if (!m.phy() || station >= m.st.size()) return false;
    auto& x = m.st[station];
    ++x.stats.rx_reports;
    if (std::isfinite(rx.snr_db)) x.cqi_db = static_cast<double>(rx.snr_db);
    for (std::size_t k = 0; k < x.procs.size(); ++k) {
        const auto& pr = x.procs[k];
        if (!pr.awaiting || rx.slot < pr.tx_slot) continue;
        if (rx.slot == pr.tx_slot && rx.header_ok && rx.addressed && rx.user == station &&
            rx.harq_pid == k) {
            m.result(station, k, "nack", rx.crc_ok, &rx.tb, rx.snr_db, now);
        } else {  // the station's slot went by unheard (or heard addressed elsewhere)
            ++x.stats.missed;
            m.result(station, k, "missed", false, nullptr, rx.snr_db, now);
        }
    }
    return true;
}

std::vector<std::pair<std::string, std::uint64_t>> medium::counters() const {
    const Impl& m = *impl_;
    std::vector<std::pair<std::string, std::uint64_t>> c = {
        {"slots", m.stats.slots},
        {"slots_down", m.stats.slots_down},
        {"slots_up", m.stats.slots_up},
        {"slots_idle", m.stats.slots_idle},
    };
    for (const auto& x : m.st) {
        const std::string k = "up." + x.name + ".";
        const auto& s = x.stats;
        c.insert(c.end(), {{k + "packets_in", s.packets_in},
                           {k + "bytes_in", s.bytes_in},
                           {k + "dropped_full", s.dropped_full},
                           {k + "delivered", s.delivered},
                           {k + "delivered_bytes", s.delivered_bytes},
                           {k + "slots", s.slots},
                           {k + "tbs_ok", s.tbs_ok},
                           {k + "tbs_failed", s.tbs_failed},
                           {k + "tbs_dropped", s.tbs_dropped},
                           {k + "rx_reports", s.rx_reports},
                           {k + "missed", s.missed},
                           {k + "timeouts", s.timeouts},
                           {k + "integrity_failed", s.integrity_failed},
                           {k + "queue_packets", x.queue.size()}});
        if (m.client())
            c.insert(c.end(), {{k + "grants", s.grants},
                               {k + "tbs_late", s.tbs_late},
                               {k + "tbs_unexpected", s.tbs_unexpected},
                               {k + "status_reports", s.status_reports},
                               {k + "reported_bytes", s.reported_bytes}});
    }
    return c;
}

std::vector<std::pair<std::string, double>> medium::gauges() const {
    const Impl& m = *impl_;
    std::vector<std::pair<std::string, double>> g;
    const double total = m.stats.slots ? static_cast<double>(m.stats.slots) : 1.0;
    g.emplace_back("share.down", static_cast<double>(m.stats.slots_down) / total);
    for (const auto& x : m.st) {
        g.emplace_back("share.up." + x.name, static_cast<double>(x.stats.slots) / total);
        if (x.olla) g.emplace_back("up." + x.name + ".olla_offset_db", x.olla->offset_db());
    }
    return g;
}

}  // namespace oppsched::ap
