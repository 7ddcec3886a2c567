// The client agent's logic: see oppsched/client_core.h.
#include "oppsched/client_core.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "oppsched/validation.h"

namespace oppsched::client {
namespace {

constexpr time_ns kMaxPriceTimeout = 60 * kNsPerSec;
constexpr std::uint32_t kMaxCqiPeriod = 1'000'000;
// Idle CLAMP flows are looked for at most this often (an O(flows) scan).
constexpr time_ns kExpireEvery = kNsPerSec;

}  // namespace

const char* to_string(clamp_event::event_kind k) {
    switch (k) {
        case clamp_event::event_kind::fail_open:
            return "fail_open";
        case clamp_event::event_kind::resume:
            return "resume";
    }
    return "?";
}

void client_core_params::validate() const {
    if (cqi_period_slots < 1 || cqi_period_slots > kMaxCqiPeriod)
        throw_invalid("client.cqi_period_slots", cqi_period_slots, "not in [1, 1000000]");
    reassembly.validate();
    if (harq_max_transmissions > 64)
        throw_invalid("client.harq_max_transmissions", harq_max_transmissions, "not in [0, 64]");
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
    if (!(residual_loss >= 0.0 && residual_loss < 1.0))
        throw_invalid("client.residual_loss", residual_loss, "not in [0, 1)");
}

client_core::client_core(const client_core_params& params)
    : params_([&] {
          client_core_params p = params;
          p.reassembly.user = p.user;
          p.validate();
          return p;
      }()),
      reassembler_(params_.reassembly),
      rewriter_(params_.clamp, stats_),
      residual_rng_(params_.residual_loss_seed) {}

client_core::~client_core() = default;

bool client_core::clamping() const {
    return params_.clamp.enabled && price_.has_value() && !failed_open_;
}

std::optional<float> client_core::clamp_price() const {
    if (!clamping()) return std::nullopt;
    return price_->price_s;
}

std::size_t client_core::clamp_flows() const { return rewriter_.flows(); }

const clamp::client_agent* client_core::agent(const tcpip::flow_key& downlink_flow) const {
    return rewriter_.agent(downlink_flow);
}

std::vector<window_record> client_core::take_window_records() { return rewriter_.take_records(); }

std::vector<clamp_event> client_core::take_events() {
    std::vector<clamp_event> out;
    out.swap(events_);
    return out;
}

void client_core::push_event(time_ns now, clamp_event::event_kind kind, std::string detail) {
    if (events_.size() >= params_.clamp.max_pending_records) {
        ++stats_.clamp_records_dropped;
        return;
    }
    events_.push_back(clamp_event{now, kind, std::move(detail)});
}

// ---------------------------------------------------------------------------------------
// Downlink.

rx_output client_core::on_rx_indication(time_ns now, const wire::rx_indication& ind) {
    rx_output out;
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
            // With the integrity tag (integrity.h) the PDU is the TB less its last 8 bytes,
            // and nothing of a TB whose tag is wrong is parsed or delivered. Such a TB is not
            // the AP's (forged, or recorded in another run): it is NACKed, so that a TB of
            // the AP's it may have hidden in that slot is sent again, and a replay cannot
            // take a HARQ ACK in this client's name.
            bool authentic = true;
            std::size_t pdu_len = ind.tb.size();
            if (ind.crc_ok && params_.integrity_key) {
                authentic = integrity::verify(*params_.integrity_key, ind.tb.data(), ind.tb.size());
                if (authentic) pdu_len -= integrity::kTagBytes;
            }
            out.uplink.emplace_back(
                wire::harq_feedback{params_.user, ind.slot, ind.harq_pid, ind.crc_ok && authentic});
            note_harq(now, ind.harq_pid, ind.ndi, ind.crc_ok && authentic);
            if (ind.crc_ok) {
                ++stats_.rx_crc_ok;
                if (authentic)
                    ++stats_.harq_acks;
                else
                    ++stats_.harq_nacks;
                if (!authentic) {
                    ++stats_.rx_integrity_failed;
                } else {
                    const std::uint64_t malformed_before = reassembler_.stats().malformed;
                    auto pkts = reassembler_.on_pdu(ind.tb.data(), pdu_len, now);
                    if (reassembler_.stats().malformed == malformed_before) {
                        on_pdu_accepted(now, ind.tb.data(), pdu_len);
                    } else {
                        ++stats_.pdu_errors;
                    }
                    deliver(now, std::move(pkts), out.delivered);
                }
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
        out.uplink.emplace_back(wire::cqi_report{params_.user, ind.slot, ind.snr_db, ind.cqi});
        last_cqi_slot_ = ind.slot;
        ++stats_.cqi_reports;
    }

    deliver(now, reassembler_.poll(now), out.delivered);
    return out;
}

void client_core::note_harq(time_ns now, std::uint8_t pid, std::uint8_t ndi, bool ack) {
    // A NACKed TB stays in the AP's HARQ until it decodes, or until the AP drops it (last
    // transmission, feedback timeout, flush), which the client sees as a new NDI on the
    // process. Until then a gap in the PDU sequence may be that TB: the reassembler holds
    // gaps younger than the oldest such NACK for its held_timeout.
    if (pid >= nacked_.size()) return;
    nacked_tb& p = nacked_[pid];
    if (ack) {
        p.pending = false;
    } else {
        if (!p.pending || p.ndi != ndi) p = nacked_tb{true, ndi, 0, now};
        // The AP drops a TB after its max_transmissions-th NACK (harq_max_tx).
        const std::uint32_t max_tx = params_.harq_max_transmissions;
        if (++p.nacks >= max_tx && max_tx != 0) p.pending = false;
    }
    std::optional<time_ns> oldest;
    for (const nacked_tb& q : nacked_)
        if (q.pending && (!oldest || q.since < *oldest)) oldest = q.since;
    reassembler_.set_harq_pending_since(oldest);
}

void client_core::on_pdu_accepted(time_ns now, const std::uint8_t* data, std::size_t len) {
    // The reassembler parsed the PDU (either format, pdu.h; header and price checked), so
    // its header is valid.
    if (!first_pdu_t_) first_pdu_t_ = now;
    const auto h = pdu::peek_header(data, len);
    if (h && h->price_s) {
        ++stats_.pdus_priced;
        const float p = *h->price_s;
        // The latest PDU to arrive carries the latest price we know of. (A HARQ
        // retransmission completes a few slots late with a price a few slots old; against
        // the router's 0.5 s averaging, §IV-A, that is nothing, and arrival order survives
        // an AP restart where sequence numbers do not.)
        price_ = price_sample{p, now, h->seq};
        last_priced_pdu_t_ = now;
        if (failed_open_) {
            failed_open_ = false;
            ++stats_.clamp_resume_events;
            if (params_.clamp.enabled)
                push_event(now, clamp_event::event_kind::resume, "price received again");
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
        push_event(now, clamp_event::event_kind::fail_open, os.str());
    }
}

void client_core::deliver(time_ns now, pdu::reassembler::delivered_packets&& pkts,
                          std::vector<std::vector<std::uint8_t>>& out) {
    // One draw per packet, and only with a loss set: the same seed drops the same packets.
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (auto& p : pkts) {
        if (params_.residual_loss > 0.0 && u(residual_rng_) < params_.residual_loss) {
            ++stats_.residual_dropped_packets;
            stats_.residual_dropped_bytes += p.size();
            continue;
        }
        ++stats_.delivered_packets;
        stats_.delivered_bytes += p.size();
        if (params_.clamp.enabled) rewriter_.on_downlink(now, p, clamp_price());
        out.push_back(std::move(p));
    }
}

// ---------------------------------------------------------------------------------------
// Uplink.

std::vector<wire::message> client_core::on_uplink_packet(time_ns now,
                                                         std::vector<std::uint8_t> packet) {
    std::vector<wire::message> out;
    if (packet.empty() || packet.size() > 0xFFFF) {
        ++stats_.uplink_dropped_size;
        return out;
    }
    if (params_.clamp.enabled) rewriter_.on_uplink(now, packet, clamp_price());
    ++stats_.uplink_packets;
    stats_.uplink_bytes += packet.size();
    out.emplace_back(wire::uplink_packet{params_.user, std::move(packet)});
    return out;
}

std::vector<std::vector<std::uint8_t>> client_core::poll(time_ns now) {
    std::vector<std::vector<std::uint8_t>> out;
    deliver(now, reassembler_.poll(now), out);
    if (params_.clamp.enabled) {
        if (!last_expire_ || now - *last_expire_ >= kExpireEvery) {
            last_expire_ = now;
            rewriter_.expire(now);
        }
    }
    return out;
}

std::optional<time_ns> client_core::next_deadline() const { return reassembler_.next_deadline(); }

}  // namespace oppsched::client
