// The AP MAC core: see oppsched/ap_core.h for the data path, the choices and their reasons.
#include "oppsched/ap_core.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <unordered_set>

#include "oppsched/clamp_link.h"
#include "oppsched/held_tbs.h"
#include "oppsched/lead_slots.h"
#include "oppsched/packet_classifier.h"
#include "oppsched/pdu.h"
#include "oppsched/slot_clock.h"
#include "oppsched/stats_fields.h"
#include "oppsched/validation.h"

namespace oppsched::ap {
namespace {

// The bytes of every TB the integrity tag takes (integrity.h): 0 without a key.
std::size_t tag_bytes(const ap_core_params& p) {
    return p.integrity_key ? integrity::kTagBytes : 0;
}

// The smallest TB that carries a byte of data in the configured PDU format (pdu.h): 29
// bytes standard, 5 compact; 8 more with the integrity tag.
std::size_t min_usable_tb(const ap_core_params& p) {
    return pdu::min_usable_tb_bytes(p.pdu_format) + tag_bytes(p);
}

// The std::uint64_t fields of `stats` (stats_fields.h) as counters under `prefix`.
template <class Stats>
void append_counters(std::vector<std::pair<std::string, std::uint64_t>>& out,
                     const std::string& prefix, const Stats& stats) {
    for_each_field(stats, [&](const char* key, const auto& value) {
        if constexpr (std::is_same_v<std::decay_t<decltype(value)>, std::uint64_t>)
            out.emplace_back(prefix + key, value);
    });
}

// The other fields (state: double, flags: bool as 0 or 1) as gauges under `prefix`.
template <class Stats>
void append_gauges(std::vector<std::pair<std::string, double>>& out, const std::string& prefix,
                   const Stats& stats) {
    for_each_field(stats, [&](const char* key, const auto& value) {
        if constexpr (!std::is_same_v<std::decay_t<decltype(value)>, std::uint64_t>)
            out.emplace_back(prefix + key, static_cast<double>(value));
    });
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The DSCP of an IPv4 (TOS >> 2) or IPv6 (traffic class >> 2) packet; the classifier has
// checked the version and that the header is there.
std::uint8_t dscp_of(const std::vector<std::uint8_t>& ip) {
    const unsigned tos = (ip[0] >> 4) == 6 ? ((ip[0] & 0x0fu) << 4 | ip[1] >> 4) : ip[1];
    return static_cast<std::uint8_t>(tos >> 2);
}

// The per-user link of paper mode (Andrew & Hanly, CLAMP, §V-B): eq. 18 with the margin m
// tuned for target_loss after the HARQ budget.
channel::clamp_link_params clamp_link_of(const ap_core_params& p) {
    channel::clamp_link_params lp;
    lp.slot_s = p.slot_s;
    lp.w0_hz = p.paper.w0_hz;
    lp.cmax_bps = p.paper.cmax_bps;
    lp.target_loss = p.paper.target_loss;
    lp.max_attempts = static_cast<int>(p.harq.max_transmissions);
    lp.scope = channel::margin_scope::after_retransmissions;
    lp.margin_init = p.paper.margin_init;
    lp.margin_step = p.paper.margin_step;
    lp.margin_max = p.paper.margin_max;
    lp.margin_min = p.paper.margin_min;
    return lp;
}

// clamp_link_params::validate()'s message ("clamp_link.<field>: ...") under the apd's key
// of that field.
std::string apd_key_message(const std::string& what) {
    static const std::string prefix = "clamp_link.";
    if (what.compare(0, prefix.size(), prefix) != 0) return "link_adaptation.paper: " + what;
    const std::string rest = what.substr(prefix.size());
    const std::string field = rest.substr(0, rest.find(':'));
    if (field == "w0_hz" || field == "cmax_bps") return "link_adaptation.shannon." + rest;
    if (field == "max_attempts") return "harq.max_transmissions" + rest.substr(field.size());
    if (field == "slot_s") return rest;
    return "link_adaptation.paper." + rest;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Tables

linkadapt::mcs_table shannon_table(const shannon_table_params& p) {
    if (!(p.w0_hz >= 1 && p.w0_hz <= 1e12))
        throw_invalid("shannon.w0_hz", format_number(p.w0_hz), "not in [1, 1e12]");
    if (!(p.cmax_bps >= 1 && p.cmax_bps <= 1e12))
        throw_invalid("shannon.cmax_bps", format_number(p.cmax_bps), "not in [1, 1e12]");
    if (p.levels < 1 || p.levels > 255)
        throw_invalid("shannon.levels", std::to_string(p.levels), "not in [1, 255]");
    std::vector<linkadapt::mcs_entry> rows;
    for (std::uint32_t k = 1; k <= p.levels; ++k) {
        const double rate = static_cast<double>(k) * p.cmax_bps / p.levels;
        // Eq. 18 inverted: the SNR at which W0 log2(1 + N) reaches rate_k.
        const double snr_db = 10.0 * std::log10(std::pow(2.0, rate / p.w0_hz) - 1.0);
        std::ostringstream n;
        n << "shannon " << k << "/" << p.levels;
        rows.push_back(linkadapt::mcs_entry{n.str(), snr_db, rate, 0, 0.0});
    }
    return linkadapt::mcs_table("shannon", std::move(rows));
}

std::optional<linkadapt::mcs_table> mcs_table_by_name(const std::string& name,
                                                      const linkadapt::ofdm_numerology& num_,
                                                      const shannon_table_params& clamp) {
    if (name == "evdo") return linkadapt::mcs_table::evdo();
    if (name == "ofdm_provisional") return linkadapt::mcs_table::ofdm_provisional(num_);
    if (name == "shannon") return shannon_table(clamp);
    return std::nullopt;
}

const char* to_string(link_mode m) {
    switch (m) {
        case link_mode::table:
            return "table";
        case link_mode::paper:
            return "paper";
    }
    return "?";
}

const char* to_string(mu_c_mode m) {
    switch (m) {
        case mu_c_mode::measured:
            return "measured";
        case mu_c_mode::all_backlogged:
            return "all_backlogged";
    }
    return "?";
}

const std::vector<std::string>& mcs_table_names() {
    static const std::vector<std::string> names = {"evdo", "ofdm_provisional", "shannon"};
    return names;
}

// ---------------------------------------------------------------------------------------
// Parameters

void ap_core_params::validate() const {
    if (priority_dscp && *priority_dscp > 63)
        throw_invalid("priority_dscp", std::to_string(*priority_dscp), "not in [0, 63]");
    if (users.empty()) throw_invalid("users", "[]", "must name at least one user");
    if (users.size() > 65535)
        throw_invalid("users", std::to_string(users.size()), "entries: more than 65535");
    packet_classifier seen;
    std::unordered_set<std::string> names;
    for (std::size_t u = 0; u < users.size(); ++u) {
        const std::string f = "users[" + std::to_string(u) + "]";
        const auto& up = users[u];
        const bool name_ok = !up.name.empty() && up.name.size() <= 64 &&
                             std::all_of(up.name.begin(), up.name.end(), [](char ch) {
                                 return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' ||
                                        ch == '.' || ch == '-';
                             });
        if (!name_ok)
            throw_invalid(f + ".name", "'" + up.name + "'", "not 1..64 of [A-Za-z0-9_.-]");
        if (!names.insert(up.name).second)
            throw_invalid(f + ".name", "'" + up.name + "'", "is used twice");
        for (std::size_t i = 0; i < up.addresses.size(); ++i) {
            const std::string fa = f + ".addresses[" + std::to_string(i) + "]";
            const auto k = parse_address(up.addresses[i]);
            if (!k)
                throw_invalid(fa, "'" + up.addresses[i] + "'", "is not an IPv4 or IPv6 address");
            if (const auto other = seen.add(*k, static_cast<std::uint32_t>(u)))
                throw_invalid(fa, "'" + up.addresses[i] + "'",
                              "is also an address of users[" + std::to_string(*other) + "]");
        }
        if (up.queue_limit_bytes && *up.queue_limit_bytes == 0 &&
            (up.queue_limit_packets ? *up.queue_limit_packets : aqm.limits.packets) == 0)
            throw_invalid(f + ".queue_limit_bytes", "0",
                          "and no packet limit: the queue is unbounded");
    }
    try {
        aqm::validate(aqm);
        for (std::size_t u = 0; u < users.size(); ++u) {
            aqm::aqm_params c = aqm;
            if (users[u].queue_limit_bytes) c.limits.bytes = *users[u].queue_limit_bytes;
            if (users[u].queue_limit_packets) c.limits.packets = *users[u].queue_limit_packets;
            aqm::validate(c);
        }
    } catch (const std::invalid_argument& e) {
        throw_invalid(std::string("aqm: ") + e.what());
    }
    if (clamp.enabled) {
        try {
            clamp.router.validate();
        } catch (const std::invalid_argument& e) {
            throw_invalid(std::string("clamp: ") + e.what());
        }
    }
    if (link != link_mode::table && link != link_mode::paper)
        throw_invalid("link_adaptation.mode", std::to_string(static_cast<int>(link)),
                      "is not table or paper");
    if (link == link_mode::paper) {
        // One set of ranges: the link's own (clamp_link.h), reported under the apd's keys.
        try {
            clamp_link_of(*this).validate();
        } catch (const std::invalid_argument& e) {
            throw_invalid(apd_key_message(e.what()));
        }
        if (paper.cqi_ahead_slots > 1000000)
            throw_invalid("link_adaptation.paper.cqi_ahead_slots",
                          std::to_string(paper.cqi_ahead_slots), "not in [0, 1e6]");
    }
    if (clamp.mu != mu_c_mode::measured && clamp.mu != mu_c_mode::all_backlogged)
        throw_invalid("clamp.mu_c", std::to_string(static_cast<int>(clamp.mu)),
                      "is not measured or all_backlogged");
    if (!(clamp.mu_floor_bps > 0) || !std::isfinite(clamp.mu_floor_bps))
        throw_invalid("clamp.mu_floor_bps", format_number(clamp.mu_floor_bps), "not > 0");
    try {
        sched::scheduler_params sc;
        sc.num_users = users.size();
        sc.policy = scheduler;
        sched::validate(sc);
    } catch (const std::invalid_argument& e) {
        throw_invalid(std::string("scheduler: ") + e.what());
    }
    try {
        harq::harq_params hc = harq;
        hc.num_users = static_cast<std::uint32_t>(users.size());
        harq::validate(hc);
        if (olla_enabled) linkadapt::olla check(olla);
    } catch (const std::invalid_argument& e) {
        throw_invalid(e.what());
    }
    if (!(slot_s > 0 && slot_s <= 1))
        throw_invalid("slot_s", format_number(slot_s), "not in (0,1]");
    clamp::mu_c_params{clamp.mu_init_slots, clamp.mu_ema_weight, slot_s}.validate();
    if (lead_slots < kMinLeadSlots || lead_slots > kMaxLeadSlots)
        throw_invalid(
            "lead_slots", std::to_string(lead_slots),
            "not in [" + std::to_string(kMinLeadSlots) + "," + std::to_string(kMaxLeadSlots) + "]");
    slot_clock check_clock(slot_clock_params{lead_slots, restart_backjump_slots, grant_cache});
    if (table.size() > 256)
        throw_invalid("link_adaptation.table", table.name(), "has more than 256 MCSs");
    bool usable = false;
    for (std::size_t m = 0; m < table.size(); ++m)
        usable =
            usable || table.bytes_per_slot(static_cast<int>(m), slot_s) >= min_usable_tb(*this);
    if (!usable)
        throw_invalid("link_adaptation.table", "'" + table.name() + "'",
                      "has no MCS carrying >= " + std::to_string(min_usable_tb(*this)) +
                          " bytes (pdu.format " + pdu::to_string(pdu_format) + ") in a slot of " +
                          format_number(slot_s) + " s");
}

// ---------------------------------------------------------------------------------------
// State

struct ap_core::Impl {
    explicit Impl(ap_core_params p)
        : params(std::move(p)),
          clock(slot_clock_params{params.lead_slots, params.restart_backjump_slots,
                                  params.grant_cache}) {}

    ap_core_params params;
    ap_core_stats stats;
    std::vector<ap_user_stats> ustats;
    std::uint32_t n_users = 0;

    packet_classifier classifier;
    // Queues: per_user -> aqms[u]; shared -> qset.
    std::vector<std::unique_ptr<aqm::queue_discipline>> aqms;
    std::unique_ptr<aqm::queue_set> qset;
    std::vector<clamp::router_agent> routers;  // one per queue
    std::vector<clamp::mu_c_estimator> mu;     // one per queue
    std::vector<pdu::segmenter> segmenters;    // one per user
    packet_ledger ledger;                      // packets from dequeue to fate
    std::unique_ptr<sched::scheduler_policy> policy;
    std::unique_ptr<sched::scheduler_policy> shadow;  // mu_c_mode::all_backlogged
    sched::queue_state qstate;                        // policy->uses_queue_state() only
    std::vector<bool> usable;                         // its eligibility: a usable rate
    std::unique_ptr<harq::harq_entity> harq;
    std::vector<linkadapt::olla> olla;
    std::vector<double> snr_db;  // NaN: no CQI yet (paper: the SNR of the latest slot)
    std::vector<std::uint32_t> tb_bytes_of_mcs;  // 0: unusable
    std::vector<std::uint32_t> bytes_of_mcs;     // what the MCS carries, usable or not
    // link_mode::paper: the margin m of each user, and its SNR reports by the PHY slot
    // they are for (ascending).
    std::vector<channel::clamp_link> links;
    std::vector<std::deque<std::pair<std::uint64_t, double>>> snr_reports;

    held_tbs tbs;  // by TB id, while HARQ holds it
    std::uint64_t next_tb_id = 1;
    std::uint64_t next_packet_id = 1;
    time_ns last_now = 0;  // latest `now` seen (times the records of feedback events)

    slot_clock clock;

    // Traces.
    std::unique_ptr<slot_trace> trace;
    std::vector<packet_record> precords;

    // Scratch.
    std::vector<double> rates;
    std::vector<int> mcs_now;           // the MCS of a new TB of the user in this slot
    std::vector<std::uint32_t> tb_now;  // its bytes (0: none usable)
    std::vector<bool> eligible;
    std::vector<bool> backlogged_q;
    std::vector<std::uint64_t> served_q;
    // This slot's transmission, for the AQMs' service reports (report_service).
    int slot_tx_queue = -1;     // queue whose TB the slot carries; -1: empty slot
    double slot_tx_fill = 0.0;  // share of the slot a new TB's bytes fill; 1 for a retx
    std::vector<harq::harq_event> events;

    std::size_t queue_index(std::uint32_t u) const {
        return params.queue_mode == aqm::queue_mode::shared ? 0 : u;
    }
    std::size_t queue_count() const { return routers.size(); }
    // The queue's name in the stats: the user's, or "shared" for the one shared queue.
    std::string queue_name(std::size_t qi) const {
        return qset ? std::string("shared") : params.users[qi].name;
    }
    aqm::aqm_stats aqm_stats(std::size_t qi) const {
        return qset ? qset->queue(0).stats() : aqms[qi]->stats();
    }
    std::size_t q_bytes_of_queue(std::size_t qi) const {
        return qset ? qset->total_bytes() : aqms[qi]->bytes();
    }
    std::size_t user_queue_bytes(std::uint32_t u) const {
        return (qset ? qset->bytes(u) : aqms[u]->bytes()) + segmenters[u].partial_remaining();
    }
    bool queue_eligible(std::uint32_t u) const {
        if (segmenters[u].has_partial()) return true;
        return qset ? qset->eligible(u) : !aqms[u]->empty();
    }
    std::uint64_t marked_of_queue(std::size_t qi) const {
        return qset ? qset->queue(0).stats().marked : aqms[qi]->stats().marked;
    }

    void record(time_ns t, const char* ev, int user, std::uint64_t id, std::size_t bytes,
                std::string reason = {}) {
        if (!params.record_packets) return;
        precords.push_back(
            packet_record{t, ev, user, id, static_cast<std::uint32_t>(bytes), std::move(reason)});
    }

    void on_drop(aqm::dropped_packet&& d) {
        ++stats.queue_drops[static_cast<std::size_t>(d.reason)];
        if (d.packet.user < n_users) ++ustats[d.packet.user].dropped;
        record(d.at, "drop", static_cast<int>(d.packet.user), d.packet.id, d.packet.size(),
               std::string(aqm::to_string(d.reason)));
    }

    int mcs_for(std::uint32_t u) const {
        int m = 0;  // no CQI yet: the lowest MCS (ap_core.h)
        if (!std::isnan(snr_db[u])) {
            m = linkadapt::cqi_to_mcs(params.table, snr_db[u]);
            // OLLA's backoff lowers the MCS, but never takes a user whose report meets the
            // lowest MCS below it (ap_core.h): "zero rate" is what the user reports (seed
            // 002 §III), not a backoff, which at the lowest MCS could only idle the slot.
            if (params.olla_enabled && m >= 0)
                m = std::max(0, olla[u].select(params.table, snr_db[u]));
        }
        if (m < 0 || tb_bytes_of_mcs[static_cast<std::size_t>(m)] == 0) return linkadapt::kNoMcs;
        return m;
    }
    double rate_of_mcs(int m) const {
        return m < 0 ? 0.0 : params.table[static_cast<std::size_t>(m)].rate_bps;
    }
    // The rate the scheduler credits for a transmission of `tb` (its own bits in paper mode).
    double served_rate(const held_tb& tb) const {
        if (params.link == link_mode::paper)
            return static_cast<double>(tb.bytes.size()) * 8.0 / params.slot_s;
        return rate_of_mcs(tb.mcs);
    }

    // ---- link_mode::paper ----
    void on_snr_report(std::uint32_t u, std::uint64_t for_slot, double db) {
        auto& d = snr_reports[u];
        if (!d.empty() && for_slot <= d.back().first) {
            if (for_slot == d.back().first) d.back().second = db;
            return;  // older than what is there: a reordered report, not needed
        }
        d.emplace_back(for_slot, db);
        while (d.size() > 1024) d.pop_front();  // only a stalled clock lets them pile up
    }
    // The SNR reported for PHY slot `slot`, or the newest report for an earlier one; NaN if
    // there is none.
    double snr_for_slot(std::uint32_t u, std::uint64_t slot) {
        auto& d = snr_reports[u];
        while (d.size() >= 2 && d[1].first <= slot) d.pop_front();
        if (d.empty() || d.front().first > slot) return kNaN;
        if (d.front().first < slot) ++stats.snr_not_for_slot;
        return d.front().second;
    }
    // Eq. 18 for user u in PHY slot `slot`: (mcs, TB bytes, rate in b/s).
    void paper_choice(std::uint32_t u, std::uint64_t slot) {
        const double db = snr_for_slot(u, slot);
        snr_db[u] = db;
        mcs_now[u] = linkadapt::kNoMcs;
        tb_now[u] = 0;
        rates[u] = 0.0;
        if (std::isnan(db)) return;
        const double bps = links[u].rate_bps(std::pow(10.0, db / 10.0));
        auto bytes = static_cast<std::uint32_t>(std::min(std::floor(params.slot_s * bps / 8.0),
                                                         static_cast<double>(pdu::kMaxPduBytes)));
        if (bytes < min_usable_tb(params)) return;  // eq. 18 gives less than a PDU can carry
        const auto it = std::lower_bound(bytes_of_mcs.begin(), bytes_of_mcs.end(), bytes);
        const int m = it == bytes_of_mcs.end() ? static_cast<int>(bytes_of_mcs.size()) - 1
                                               : static_cast<int>(it - bytes_of_mcs.begin());
        bytes = std::min(bytes, bytes_of_mcs[static_cast<std::size_t>(m)]);
        mcs_now[u] = m;
        tb_now[u] = bytes;
        rates[u] = bps;
    }

    // mu_c of queue qi in bytes/s, floored at mu_floor_bps; nullopt while unknown.
    std::optional<double> mu_bytes_per_s(std::size_t qi) const {
        const auto bps = mu[qi].bps();
        if (!params.clamp.enabled || !bps) return std::nullopt;
        return std::max(*bps, params.clamp.mu_floor_bps) / 8.0;
    }
    std::optional<double> price_now(std::size_t qi, bool count) {
        const auto mu_bytes = mu_bytes_per_s(qi);
        if (!mu_bytes) return std::nullopt;
        return count ? routers[qi].price(*mu_bytes) : routers[qi].peek_price(*mu_bytes);
    }
    double peek_price(std::uint32_t u) const {
        const auto mu_bytes = mu_bytes_per_s(queue_index(u));
        return mu_bytes ? routers[queue_index(u)].peek_price(*mu_bytes) : kNaN;
    }
    // The link price p of user u's queue for the AQMs that keep one (REM, REAQM); NaN else.
    double aqm_price_of(std::uint32_t u) const {
        const aqm::queue_discipline& q = qset ? qset->queue(0) : *aqms[queue_index(u)];
        if (q.kind() != aqm::aqm_kind::rem && q.kind() != aqm::aqm_kind::reaqm) return kNaN;
        return q.stats().price;
    }

    // The link's service of each queue in this slot, for rate-based AQMs that measure their
    // capacity (aqm.h, rate_params): a queue whose TB the slot carries was served for the
    // share of the slot its data bytes take at the TB's data capacity (padding is not
    // sending, and a TB a fifth full takes a fifth of the slot's time); a queue that had data and
    // waited (another user served, a retransmission, no usable MCS) spent the whole slot.
    // Idle queues report nothing, so idle time never dilutes the rate.
    void report_service() {
        const double slot_ns = params.slot_s * 1e9;
        for (std::size_t qi = 0; qi < queue_count(); ++qi) {
            const bool on_air = slot_tx_queue == static_cast<int>(qi);
            if (!on_air && !backlogged_q[qi]) continue;
            const double share = on_air ? slot_tx_fill : 1.0;
            aqm::queue_discipline& q = qset ? qset->queue(0) : *aqms[qi];
            q.on_service(on_air ? served_q[qi] : 0,
                         static_cast<time_ns>(std::llround(share * slot_ns)));
        }
    }

    void update_mu() {
        if (!shadow) {
            for (std::size_t qi = 0; qi < queue_count(); ++qi)
                if (backlogged_q[qi]) mu[qi].on_backlogged_slot(served_q[qi]);
            return;
        }
        // mu_c_mode::all_backlogged: what the scheduler would give each queue this slot if
        // every user had data (ap_core.h).
        for (std::uint32_t u = 0; u < n_users; ++u) usable[u] = mcs_now[u] >= 0;
        const int w = shadow->step(rates, usable);
        std::uint64_t carried = 0;
        if (w >= 0)
            carried = pdu::data_capacity(
                params.pdu_format, tb_now[static_cast<std::size_t>(w)] - tag_bytes(params), true);
        for (std::size_t qi = 0; qi < queue_count(); ++qi)
            mu[qi].on_backlogged_slot(
                w >= 0 && queue_index(static_cast<std::uint32_t>(w)) == qi ? carried : 0);
    }

    // ---- trace rows ----
    slot_row new_row(std::uint64_t phy_slot, time_ns air, bool late) const {
        slot_row r;
        r.slot = phy_slot;
        r.t_ns = air;
        r.late = late;
        r.cqi = snr_db;
        r.queue.resize(n_users);
        r.price.resize(n_users);
        r.aqm_price.resize(n_users);
        for (std::uint32_t u = 0; u < n_users; ++u) {
            r.queue[u] = user_queue_bytes(u);
            r.price[u] = peek_price(u);
            r.aqm_price[u] = aqm_price_of(u);
        }
        return r;
    }
    // ---- the steps of a slot request ----
    static wire::slot_grant empty_grant(std::uint64_t slot) {
        wire::slot_grant g;
        g.slot = slot;
        g.empty = true;
        return g;
    }

    // A request for a slot already answered: the same grant again, or an empty one.
    wire::slot_grant answer_repeated(const slot_clock::request& r, std::uint64_t slot) {
        if (r.late) ++stats.requests_late;
        if (r.what == slot_clock::verdict::duplicate) {
            ++stats.requests_duplicate;
            return *r.grant;
        }
        ++stats.requests_out_of_order;
        ++stats.grants_empty;
        return empty_grant(slot);
    }

    void expire_harq(std::int64_t s, time_ns now) {
        events.clear();
        harq->expire(s, events);
        for (const auto& ev : events) handle_event(ev, now);
    }

    // Rates, eligibility and the per-queue backlog the mu_c estimators look at.
    void prepare_scheduler_inputs(std::int64_t s, std::uint64_t phy_slot) {
        for (std::size_t qi = 0; qi < queue_count(); ++qi) {
            served_q[qi] = 0;
            backlogged_q[qi] = false;
        }
        for (std::uint32_t u = 0; u < n_users; ++u) {
            if (params.link == link_mode::paper) {
                paper_choice(u, phy_slot);
            } else {
                const int mcs = mcs_for(u);
                mcs_now[u] = mcs;
                tb_now[u] = mcs < 0 ? 0 : tb_bytes_of_mcs[static_cast<std::size_t>(mcs)];
                rates[u] = rate_of_mcs(mcs);
            }
            const bool has_data = queue_eligible(u);
            if (has_data) backlogged_q[queue_index(u)] = true;
            eligible[u] = has_data && mcs_now[u] >= 0 && harq->free_process(u, s).has_value();
        }
    }

    // The queues as a policy that asks for them sees them (sched::queue_state).
    void prepare_queue_state(std::int64_t s, time_ns now) {
        qstate.slot = s;
        const ip_packet* shared_head = qset ? qset->queue(0).peek() : nullptr;
        for (std::uint32_t u = 0; u < n_users; ++u) {
            qstate.backlog_bytes[u] = user_queue_bytes(u);
            const ip_packet* head =
                qset ? (shared_head && shared_head->user == u ? shared_head : nullptr)
                     : aqms[u]->peek();
            qstate.hol_delay_s[u] =
                head && now > head->arrival ? static_cast<double>(now - head->arrival) * 1e-9 : 0.0;
        }
        policy->set_queue_state(qstate);
    }

    // HARQ retransmissions go first (sched.h: the policy is not asked; update() still once).
    wire::slot_grant grant_retransmission(std::uint32_t user, std::uint8_t process, std::int64_t s,
                                          std::uint64_t slot, std::optional<slot_row>& row) {
        const harq::tx_grant g = harq->retransmit(user, process, s);
        const auto& tb = tbs.at(g.tb.id);
        policy->update(rates, static_cast<int>(g.user), served_rate(tb));
        ++stats.grants_retx;
        ++ustats[g.user].slots_retx;
        ustats[g.user].tb_bytes += tb.bytes.size();
        // Slots this TB took before (unheard ones included), so retx == 0 is a new TB.
        trace_transmission(row, g, tb, static_cast<int>(g.transmission - 1 + g.unheard));
        slot_tx_queue = static_cast<int>(queue_index(g.user));
        slot_tx_fill = 1.0;  // the whole slot resends bytes already counted
        return grant_from(g, tb, slot);
    }

    // A new TB for the user the policy chose, filled from its queue by its segmenter.
    wire::slot_grant grant_new_tb(std::uint32_t user, std::int64_t s, std::uint64_t slot,
                                  time_ns now, std::optional<slot_row>& row) {
        const int mcs = mcs_now[user];
        const std::uint32_t tb_bytes = tb_now[user];
        const std::size_t qi = queue_index(user);
        std::optional<float> price;
        if (params.clamp.enabled) {
            if (const auto pr = price_now(qi, true)) {
                price = static_cast<float>(*pr);
            } else {
                ++stats.tbs_without_price;
            }
        }
        std::vector<std::pair<std::uint64_t, std::uint32_t>> pulled;
        pdu::packet_source source = [this, user, qi, now, &pulled]() -> std::optional<ip_packet> {
            const std::uint64_t marked_before = marked_of_queue(qi);
            std::optional<ip_packet> pk =
                qset ? qset->dequeue(user, now) : aqms[user]->dequeue(now);
            if (pk) {
                pulled.emplace_back(pk->id, static_cast<std::uint32_t>(pk->size()));
                record(now, "dequeue", static_cast<int>(user), pk->id, pk->size());
                if (marked_of_queue(qi) > marked_before) {  // dequeue-time marking
                    ++stats.marked;
                    record(now, "mark", static_cast<int>(user), pk->id, pk->size());
                }
            }
            return pk;
        };
        // tb_now is never below min_usable_tb, which counts the tag.
        pdu::built_tb built = segmenters[user].build(tb_bytes - tag_bytes(params), source, price);
        if (params.integrity_key) integrity::append_tag(*params.integrity_key, built.bytes);
        record_fates(now, ledger.on_tb_built(built.record, pulled));
        const std::uint64_t id = next_tb_id++;
        const harq::tx_grant g = harq->new_transmission(
            user, harq::tb_ref{id, static_cast<std::uint32_t>(built.bytes.size())}, s);
        served_q[qi] += built.record.data_bytes;
        slot_tx_queue = static_cast<int>(qi);
        // The slot's share these bytes take at the TB's data capacity (one segment header):
        // the rate reported is then the link's data rate, whatever the load.
        const std::size_t capacity =
            pdu::data_capacity(params.pdu_format, tb_bytes - tag_bytes(params), price.has_value());
        slot_tx_fill = capacity > 0 ? std::min(1.0, static_cast<double>(built.record.data_bytes) /
                                                        static_cast<double>(capacity))
                                    : 1.0;
        held_tb info;
        info.user = user;
        info.mcs = mcs;
        info.bytes = std::move(built.bytes);
        info.record = std::move(built.record);
        ustats[user].data_bytes += info.record.data_bytes;
        ustats[user].tb_bytes += info.bytes.size();
        ++ustats[user].slots_new;
        const held_tb& stored = tbs.add(id, std::move(info));
        policy->update(rates, static_cast<int>(user), rates[user]);
        ++stats.grants_new;
        trace_transmission(row, g, stored, 0);
        return grant_from(g, stored, slot);
    }

    wire::slot_grant grant_nothing(std::uint64_t slot, std::optional<slot_row>& row) {
        policy->update(rates, sched::kNoUser, 0.0);
        ++stats.grants_empty;
        if (row) trace->add_empty(std::move(*row));
        return empty_grant(slot);
    }

    void trace_transmission(std::optional<slot_row>& row, const harq::tx_grant& g,
                            const held_tb& tb, int retx) {
        if (!row) return;
        row->user = static_cast<int>(g.user);
        row->mcs = tb.mcs;
        row->tb_bytes = static_cast<std::uint32_t>(tb.bytes.size());
        row->harq_pid = g.process;
        row->rv = g.rv;
        row->ndi = g.ndi ? 1 : 0;
        row->retx = retx;
        trace->add_transmission(std::move(*row), g.user, g.process);
    }

    // packets.csv rows for the fates the ledger settled (packet_ledger.h).
    void record_fates(time_ns now, const std::vector<packet_fate>& fates) {
        for (const packet_fate& f : fates)
            record(now, f.delivered ? "deliver" : "drop", static_cast<int>(f.user), f.packet_id,
                   f.bytes, f.delivered ? std::string() : std::string(to_string(f.cause)));
    }

    // The conservation law of packet_ledger.h: packets offered to the queues, less every fate
    // and every packet still held. 0 unless a packet left without a record.
    std::int64_t unaccounted() const {
        std::uint64_t out = ledger.stats().delivered + ledger.stats().dropped_total() +
                            ledger.in_flight() + queued_packets();
        for (const auto d : stats.queue_drops) out += d;
        return static_cast<std::int64_t>(stats.offered) - static_cast<std::int64_t>(out);
    }
    std::uint64_t queued_packets() const {
        if (qset) return qset->total_packets();
        std::uint64_t n = 0;
        for (const auto& a : aqms) n += a->packets();
        return n;
    }

    // ---- HARQ events ----
    void handle_event(const harq::harq_event& ev, time_ns now) {
        const harq_event_effect e = tbs.on_event(ev);
        if (params.link == link_mode::paper) {
            // Andrew & Hanly, CLAMP, §V-B: m is tuned on the loss after retransmissions, one
            // observation per TB: delivered (0) or dropped after n attempts (1).
            if (e.olla_observed && e.olla_success) links[ev.user].adapt(false);
            if (e.tb_dropped) links[ev.user].adapt(true);
        } else if (e.olla_observed && params.olla_enabled) {
            olla[ev.user].update(e.olla_success, linkadapt::olla::position_of(params.table, e.mcs));
        }
        if (e.outcome) trace->resolve(ev.user, ev.process, e.outcome);
        if (e.acked_session) segmenters[ev.user].session_acked();  // the client knows it
        if (e.fate) record_fates(now, ledger.on_tb_done(e.record, *e.fate));
        if (e.tb_dropped) {
            ++stats.harq_dropped_tbs;
            stats.harq_dropped_packets += e.dropped.size();
            ustats[ev.user].harq_dropped_packets += e.dropped.size();
        }
        if (e.timed_out) ++stats.harq_timeout_tbs;
        if (e.stale) ++stats.feedback_stale;
    }

    // A cqi_report for PHY slot `phy_slot` from `user`: the client heard that slot, and it
    // sends its HARQ feedback for a slot before the CQI of the same or a later slot (one
    // uplink socket, in order, client_core.h). So a TB of this user sent in a slot <= phy_slot
    // still awaiting feedback was never received: the slot went out empty (its grant
    // reached the PHY late: the PHY then sends preamble + header addressed to nobody) or
    // the client did not decode its header. Either way the receiver's HARQ state is as
    // before, and the TB must go again with the same NDI (harq.h on_not_received); waiting
    // for the feedback timeout instead would abandon the TB (a TCP loss) and make the next
    // TB on the process carry the NDI the receiver already holds, so that it would deliver
    // the earlier TB again while this one counts as ACKed. O(P).
    void check_unheard(std::uint32_t user, std::uint64_t phy_slot) {
        const auto heard_slot = clock.internal_of(phy_slot);
        if (clock.restart_pending() || !heard_slot) return;
        const std::int64_t heard = *heard_slot;
        for (std::uint32_t k = 0; k < params.harq.num_processes; ++k) {
            const auto pid = static_cast<std::uint8_t>(k);
            const harq::process_view v = harq->process(user, pid);
            if (v.phase != harq::process_phase::awaiting_feedback || v.last_tx_slot > heard)
                continue;
            handle_event(harq->on_not_received(user, pid, v.last_tx_slot, clock.last_internal()),
                         last_now);
        }
    }

    wire::slot_grant grant_from(const harq::tx_grant& g, const held_tb& tb, std::uint64_t slot) {
        wire::slot_grant out;
        out.slot = slot;
        out.empty = false;
        out.user = static_cast<std::uint16_t>(g.user);
        out.mcs = static_cast<std::uint8_t>(tb.mcs);
        out.harq_pid = g.process;
        out.ndi = g.ndi ? 1 : 0;
        out.rv = g.rv;
        out.tb = tb.bytes;
        return out;
    }
};

// ---------------------------------------------------------------------------------------

ap_core::ap_core(ap_core_params params) {
    params.validate();
    params.harq.num_users = static_cast<std::uint32_t>(params.users.size());
    impl_ = std::make_unique<Impl>(std::move(params));
    Impl& m = *impl_;
    const ap_core_params& p = m.params;
    m.n_users = static_cast<std::uint32_t>(p.users.size());
    m.ustats.resize(m.n_users);
    for (std::uint32_t u = 0; u < m.n_users; ++u)
        for (const auto& a : p.users[u].addresses) m.classifier.add(*parse_address(a), u);

    if (p.queue_mode == aqm::queue_mode::shared && p.aqm_factory)
        throw_invalid("aqm.kind: a plugin runs in per_user queues only (queue.mode shared)");
    if (p.queue_mode == aqm::queue_mode::shared) {
        aqm::queue_set_params qc;
        qc.users = m.n_users;
        qc.mode = aqm::queue_mode::shared;
        qc.aqm = p.aqm;
        m.qset = std::make_unique<aqm::queue_set>(qc);
        m.qset->set_drop_sink([&m](aqm::dropped_packet&& d) { m.on_drop(std::move(d)); });
    } else {
        for (std::uint32_t u = 0; u < m.n_users; ++u) {
            aqm::aqm_params c = p.aqm;
            c.seed = p.aqm.seed + u;  // independent draws per queue, reproducible
            if (p.users[u].queue_limit_bytes) c.limits.bytes = *p.users[u].queue_limit_bytes;
            if (p.users[u].queue_limit_packets) c.limits.packets = *p.users[u].queue_limit_packets;
            m.aqms.push_back(p.aqm_factory ? p.aqm_factory(c) : aqm::make_aqm(c));
            m.aqms.back()->set_drop_sink(
                [&m](aqm::dropped_packet&& d) { m.on_drop(std::move(d)); });
        }
    }
    const std::size_t nq = p.queue_mode == aqm::queue_mode::shared ? 1 : m.n_users;
    m.routers.assign(
        nq, clamp::router_agent(p.clamp.enabled ? p.clamp.router : clamp::router_agent_params{}));
    m.mu.assign(nq, clamp::mu_c_estimator(clamp::mu_c_params{p.clamp.mu_init_slots,
                                                             p.clamp.mu_ema_weight, p.slot_s}));
    for (std::uint32_t u = 0; u < m.n_users; ++u) {
        pdu::segmenter_params sp;
        sp.user = static_cast<std::uint16_t>(u);
        sp.format = p.pdu_format;
        sp.session = p.session;
        m.segmenters.emplace_back(sp);
    }
    sched::scheduler_params sc;
    sc.num_users = m.n_users;
    sc.policy = p.scheduler;
    m.policy = p.scheduler_factory ? p.scheduler_factory(m.n_users) : sched::make_scheduler(sc);
    if (!m.policy || m.policy->num_users() != m.n_users)
        throw_invalid("scheduler: the policy made for " + std::to_string(m.n_users) +
                      " users has " + std::to_string(m.policy ? m.policy->num_users() : 0));
    if (m.policy->uses_queue_state()) {
        m.qstate.backlog_bytes.assign(m.n_users, 0);
        m.qstate.hol_delay_s.assign(m.n_users, 0.0);
    }
    if (p.clamp.enabled && p.clamp.mu == mu_c_mode::all_backlogged) {
        m.shadow = sched::make_scheduler(sc);
        m.usable.assign(m.n_users, false);
    }
    m.harq = std::make_unique<harq::harq_entity>(p.harq);
    for (std::uint32_t u = 0; u < m.n_users; ++u) m.olla.emplace_back(p.olla);
    m.snr_db.assign(m.n_users, kNaN);
    for (std::size_t i = 0; i < p.table.size(); ++i) {
        const std::uint32_t b =
            std::min<std::uint32_t>(p.table.bytes_per_slot(static_cast<int>(i), p.slot_s),
                                    static_cast<std::uint32_t>(pdu::kMaxPduBytes));
        m.bytes_of_mcs.push_back(b);
        m.tb_bytes_of_mcs.push_back(b >= min_usable_tb(p) ? b : 0);
    }
    if (p.link == link_mode::paper) {
        const auto lp = clamp_link_of(p);
        m.links.assign(m.n_users, channel::clamp_link(lp));
        m.snr_reports.resize(m.n_users);
    }
    m.trace = std::make_unique<slot_trace>(m.n_users, p.harq.num_processes);
    m.rates.assign(m.n_users, 0.0);
    m.mcs_now.assign(m.n_users, linkadapt::kNoMcs);
    m.tb_now.assign(m.n_users, 0);
    m.eligible.assign(m.n_users, false);
    m.backlogged_q.assign(nq, false);
    m.served_q.assign(nq, 0);
}

ap_core::~ap_core() = default;

std::optional<std::uint32_t> ap_core::classify(const std::vector<std::uint8_t>& packet) const {
    const auto c = impl_->classifier.classify(packet);
    if (c.what != packet_classifier::outcome::user) return std::nullopt;
    return c.user;
}

bool ap_core::on_downlink_packet(time_ns now, std::vector<std::uint8_t> bytes) {
    Impl& m = *impl_;
    m.last_now = std::max(m.last_now, now);
    ++m.stats.downlink_packets;
    m.stats.downlink_bytes += bytes.size();
    const std::uint64_t id = m.next_packet_id++;
    const auto dst = m.classifier.classify(bytes);
    if (dst.what == packet_classifier::outcome::malformed || bytes.size() > pdu::kMaxPacketBytes) {
        ++m.stats.malformed_packets;
        m.record(now, "drop", -1, id, bytes.size(), "malformed");
        return false;
    }
    if (dst.what == packet_classifier::outcome::unknown_destination) {
        ++m.stats.unknown_destination;
        m.record(now, "drop", -1, id, bytes.size(), "unknown_destination");
        return false;
    }
    const std::uint32_t u = dst.user;
    const std::size_t qi = m.queue_index(u);
    const std::size_t size = bytes.size();
    // Andrew & Hanly, CLAMP, §IV-A: the EMA sees Q(n), the backlog this packet finds (clamp.h).
    if (m.params.clamp.enabled) m.routers[qi].on_arrival(now, m.q_bytes_of_queue(qi));
    ip_packet pkt;
    pkt.data = std::move(bytes);
    pkt.user = u;
    pkt.id = id;
    pkt.arrival = now;
    // SPM-AF's priority (Wu, Gong & Williamson, §6.1), as the sender's marker wrote it.
    pkt.high_priority = m.params.priority_dscp && dscp_of(pkt.data) == *m.params.priority_dscp;
    const std::uint64_t marked_before = m.marked_of_queue(qi);
    m.record(now, "enqueue", static_cast<int>(u), id, size);
    ++m.stats.offered;
    const bool ok =
        m.qset ? m.qset->enqueue(std::move(pkt), now) : m.aqms[u]->enqueue(std::move(pkt), now);
    if (ok) {
        ++m.stats.enqueued;
        ++m.ustats[u].enqueued;
        m.ustats[u].enqueued_bytes += size;
        if (m.marked_of_queue(qi) > marked_before) {
            ++m.stats.marked;
            m.record(now, "mark", static_cast<int>(u), id, size);
        }
    }
    return ok;
}

void ap_core::on_phy_restart() {
    Impl& m = *impl_;
    if (m.clock.on_phy_restart()) ++m.stats.phy_restarts;
    for (auto& d : m.snr_reports) d.clear();  // they name the old run's slots
}

wire::slot_grant ap_core::on_slot_request(time_ns now, std::uint64_t slot, time_ns air_time_ns) {
    Impl& m = *impl_;
    m.last_now = std::max(m.last_now, now);
    ++m.stats.slot_requests;
    const slot_clock::request r = m.clock.on_request(slot);
    if (r.backjump) {
        ++m.stats.slot_backjumps;
        for (auto& d : m.snr_reports) d.clear();
    }
    if (r.what != slot_clock::verdict::fresh) return m.answer_repeated(r, slot);
    m.stats.slots_skipped += r.skipped;
    const std::int64_t s = r.internal;

    m.expire_harq(s, now);
    m.prepare_scheduler_inputs(s, slot);
    if (m.policy->uses_queue_state()) m.prepare_queue_state(s, now);
    m.slot_tx_queue = -1;
    m.slot_tx_fill = 0.0;
    std::optional<slot_row> row;
    if (m.params.record_slots) row = m.new_row(slot, air_time_ns, r.late);
    wire::slot_grant out;
    if (m.params.harq_first) {
        if (const auto rx = m.harq->next_retransmission(s)) {
            out = m.grant_retransmission(rx->user, rx->process, s, slot, row);
        } else if (const int u = m.policy->choose(m.rates, m.eligible); u != sched::kNoUser) {
            out = m.grant_new_tb(static_cast<std::uint32_t>(u), s, slot, now, row);
        } else {
            out = m.grant_nothing(slot, row);
        }
    } else {
        // A pending retransmission makes its user a candidate like queued data does.
        for (std::uint32_t u = 0; u < m.n_users; ++u)
            if (!m.eligible[u] && m.harq->next_retransmission(u, s)) m.eligible[u] = true;
        if (const int u = m.policy->choose(m.rates, m.eligible); u == sched::kNoUser) {
            out = m.grant_nothing(slot, row);
        } else if (const auto rx = m.harq->next_retransmission(static_cast<std::uint32_t>(u), s)) {
            out = m.grant_retransmission(rx->user, rx->process, s, slot, row);
        } else {
            out = m.grant_new_tb(static_cast<std::uint32_t>(u), s, slot, now, row);
        }
    }
    if (m.params.clamp.enabled) m.update_mu();
    m.report_service();
    m.clock.remember(s, out);
    return out;
}

void ap_core::on_cqi(std::uint32_t user, std::uint64_t slot, double snr_db, std::uint8_t /*cqi*/) {
    Impl& m = *impl_;
    if (user >= m.n_users) {
        ++m.stats.cqi_unknown_user;
        return;
    }
    if (!std::isfinite(snr_db) || std::fabs(snr_db) > 300.0) {
        ++m.stats.cqi_invalid;
        return;
    }
    ++m.stats.cqi_reports;
    if (m.params.link == link_mode::paper) {
        m.on_snr_report(user, slot + m.params.paper.cqi_ahead_slots, snr_db);
    } else {
        m.snr_db[user] = snr_db;
    }
    m.check_unheard(user, slot);
}

void ap_core::on_harq_feedback(std::uint32_t user, std::uint64_t slot, std::uint8_t pid, bool ack) {
    Impl& m = *impl_;
    ++m.stats.feedback;
    if (user >= m.n_users) {
        ++m.stats.feedback_unknown_user;
        return;
    }
    if (pid >= m.params.harq.num_processes) {
        ++m.stats.feedback_invalid_process;
        return;
    }
    const auto tx = m.clock.internal_of(slot);
    if (!tx) {
        ++m.stats.feedback_stale;
        return;
    }
    const std::int64_t tx_slot = *tx;
    // The feedback names the process and the slot of the transmission; the NDI is the one
    // the process holds (the slot already identifies the TB, harq.h on_feedback).
    const bool ndi = m.harq->process(user, pid).ndi;
    const harq::harq_event ev =
        m.harq->on_feedback(user, pid, ndi, ack, m.clock.last_internal(), tx_slot);
    m.handle_event(ev, m.last_now);
}

std::vector<slot_row> ap_core::take_slot_rows() { return impl_->trace->take(); }

std::vector<slot_row> ap_core::final_rows() { return impl_->trace->take_all(); }

std::vector<packet_record> ap_core::take_packet_records() {
    std::vector<packet_record> out;
    out.swap(impl_->precords);
    return out;
}

const ap_core_stats& ap_core::stats() const { return impl_->stats; }
std::int64_t ap_core::unaccounted_packets() const { return impl_->unaccounted(); }
const ap_user_stats& ap_core::user_stats(std::uint32_t user) const {
    return impl_->ustats.at(user);
}
const harq::harq_stats& ap_core::harq_stats() const { return impl_->harq->stats(); }
std::size_t ap_core::users() const { return impl_->n_users; }
const ap_core_params& ap_core::params() const { return impl_->params; }
std::size_t ap_core::queued_bytes(std::uint32_t user) const {
    return impl_->user_queue_bytes(user);
}
std::optional<double> ap_core::mu_c_bps(std::uint32_t user) const {
    return impl_->mu.at(impl_->queue_index(user)).bps();
}
std::optional<double> ap_core::price(std::uint32_t user) const {
    const double v = impl_->peek_price(user);
    if (std::isnan(v)) return std::nullopt;
    return v;
}
int ap_core::mcs_for(std::uint32_t user) const {
    if (impl_->params.link == link_mode::paper) return impl_->mcs_now.at(user);
    return impl_->mcs_for(user);
}
double ap_core::margin(std::uint32_t user) const {
    if (impl_->params.link != link_mode::paper) return 0.0;
    return impl_->links.at(user).margin();
}
double ap_core::rate_bps(std::uint32_t user) const {
    if (impl_->params.link == link_mode::paper) return impl_->rates.at(user);
    return impl_->rate_of_mcs(impl_->mcs_for(user));
}
const clamp::router_agent& ap_core::router_of(std::uint32_t user) const {
    return impl_->routers.at(impl_->queue_index(user));
}
std::uint32_t ap_core::tb_bytes_for_mcs(int mcs) const {
    if (mcs < 0 || static_cast<std::size_t>(mcs) >= impl_->tb_bytes_of_mcs.size()) return 0;
    return impl_->tb_bytes_of_mcs[static_cast<std::size_t>(mcs)];
}

std::vector<std::pair<std::string, std::uint64_t>> ap_core::counters() const {
    const Impl& m = *impl_;
    const ap_core_stats& s = m.stats;
    std::vector<std::pair<std::string, std::uint64_t>> c = {
        {"downlink.packets", s.downlink_packets},
        {"downlink.bytes", s.downlink_bytes},
        {"downlink.unknown_destination", s.unknown_destination},
        {"downlink.malformed", s.malformed_packets},
        {"downlink.enqueued", s.enqueued},
        {"downlink.marked", s.marked},
        {"slots.requests", s.slot_requests},
        {"slots.grants_new", s.grants_new},
        {"slots.grants_retx", s.grants_retx},
        {"slots.grants_empty", s.grants_empty},
        {"slots.duplicate_requests", s.requests_duplicate},
        {"slots.out_of_order_requests", s.requests_out_of_order},
        {"slots.late", s.requests_late},
        {"slots.skipped", s.slots_skipped},
        {"slots.phy_restarts", s.phy_restarts},
        {"slots.slot_backjumps", s.slot_backjumps},
        {"clamp.tbs_without_price", s.tbs_without_price},
        {"harq.dropped_tbs", s.harq_dropped_tbs},
        {"harq.dropped_packets", s.harq_dropped_packets},
        {"harq.timeout_tbs", s.harq_timeout_tbs},
        {"uplink_control.cqi_reports", s.cqi_reports},
        {"uplink_control.cqi_invalid", s.cqi_invalid},
        {"uplink_control.cqi_unknown_user", s.cqi_unknown_user},
        {"uplink_control.feedback", s.feedback},
        {"uplink_control.feedback_unknown_user", s.feedback_unknown_user},
        {"uplink_control.feedback_invalid_process", s.feedback_invalid_process},
        {"uplink_control.feedback_stale", s.feedback_stale},
        {"link.snr_not_for_slot", s.snr_not_for_slot},
    };
    for (std::size_t i = 0; i < aqm::kDropReasonCount; ++i)
        c.emplace_back(
            "queue_drops." + std::string(aqm::to_string(static_cast<aqm::drop_reason>(i))),
            s.queue_drops[i]);
    // The conservation law (packet_ledger.h); gauge conservation.unaccounted must be 0.
    c.emplace_back("conservation.offered", s.offered);
    c.emplace_back("conservation.delivered", m.ledger.stats().delivered);
    for (std::size_t i = 0; i < kLossCauseCount; ++i)
        c.emplace_back("conservation.dropped." + std::string(to_string(static_cast<loss_cause>(i))),
                       m.ledger.stats().dropped[i]);
    c.emplace_back("conservation.queued", m.queued_packets());
    c.emplace_back("conservation.in_flight", m.ledger.in_flight());
    append_counters(c, "harq.", m.harq->stats());
    c.emplace_back("harq.in_flight", m.harq->in_flight());
    for (std::uint32_t u = 0; u < m.n_users; ++u) {
        const std::string pre = "users." + m.params.users[u].name + ".";
        const ap_user_stats& us = m.ustats[u];
        c.insert(c.end(), {{pre + "enqueued", us.enqueued},
                           {pre + "enqueued_bytes", us.enqueued_bytes},
                           {pre + "dropped", us.dropped},
                           {pre + "slots_new", us.slots_new},
                           {pre + "slots_retx", us.slots_retx},
                           {pre + "data_bytes", us.data_bytes},
                           {pre + "tb_bytes", us.tb_bytes},
                           {pre + "harq_dropped_packets", us.harq_dropped_packets},
                           {pre + "queued_bytes", m.user_queue_bytes(u)}});
        append_counters(c, pre + "segmenter.", m.segmenters[u].stats());
    }
    for (std::size_t qi = 0; qi < m.queue_count(); ++qi) {
        append_counters(c, "aqm." + m.queue_name(qi) + ".", m.aqm_stats(qi));
        if (!m.qset)
            for (const auto& [k, v] : m.aqms[qi]->counters())
                c.emplace_back("aqm." + m.queue_name(qi) + "." + k, v);
    }
    for (const auto& [k, v] : m.policy->counters()) c.emplace_back("scheduler." + k, v);
    return c;
}

std::vector<std::pair<std::string, double>> ap_core::gauges() const {
    const Impl& m = *impl_;
    std::vector<std::pair<std::string, double>> g;
    g.emplace_back("conservation.unaccounted", static_cast<double>(m.unaccounted()));
    for (std::uint32_t u = 0; u < m.n_users; ++u) {
        const std::string pre = "users." + m.params.users[u].name + ".";
        g.emplace_back(pre + "snr_db", m.snr_db[u]);
        const bool olla_on = m.params.link == link_mode::table && m.params.olla_enabled;
        g.emplace_back(pre + "olla_offset_db", olla_on ? m.olla[u].offset_db() : 0.0);
        if (m.params.link == link_mode::paper) g.emplace_back(pre + "margin", m.links[u].margin());
        g.emplace_back(pre + "sched_average_bps",
                       u < m.policy->averages().size() ? m.policy->averages()[u] : 0.0);
    }
    for (std::size_t qi = 0; qi < m.queue_count(); ++qi) {
        append_gauges(g, "aqm." + m.queue_name(qi) + ".", m.aqm_stats(qi));
        const std::string pre = "clamp." + m.queue_name(qi) + ".";
        g.emplace_back(pre + "mu_c_bps", m.mu[qi].bps().value_or(kNaN));
        g.emplace_back(pre + "avg_queue_bytes", m.routers[qi].average_queue_bytes());
    }
    return g;
}

}  // namespace oppsched::ap
