// Tests of oppsched/client_core.h: HARQ feedback, CQI reporting, reassembly through the
// client core, prices from the PDU header, CLAMP window rewriting of outgoing ACKs (IPv4 and
// IPv6) with its fail-open behaviour, and the uplink delay. Fake clock throughout.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "oppsched/clamp.h"
#include "oppsched/client_core.h"
#include "oppsched/pdu.h"
#include "oppsched/tcpip.h"
#include "oppsched/wire.h"
#include "tcp_test_packets.h"

using namespace oppsched;
using namespace oppsched::client;
using namespace oppsched::test;

namespace {

constexpr time_ns kMs = kNsPerMs;

// A client core fed by a fake PHY: one PDU (one segment per packet) per slot.
struct harness {
    explicit harness(client_core_params p) : core(p), user(p.user) {}

    byte_buffer pdu_bytes(const std::vector<byte_buffer>& pkts, std::optional<float> price,
                          std::uint32_t seq) {
        return test::pdu_bytes(user, seq, packet_seq, pkts, price);
    }
    wire::rx_indication indication(byte_buffer tb, bool crc_ok = true, bool addressed = true) {
        wire::rx_indication ind;
        ind.slot = slot++;
        ind.user = user;
        ind.mcs = 5;
        ind.harq_pid = static_cast<std::uint8_t>(ind.slot % 8);
        ind.header_ok = true;
        ind.addressed = addressed;
        ind.crc_ok = crc_ok;
        ind.snr_db = 12.5f;
        ind.cqi = 9;
        ind.tb = std::move(tb);
        return ind;
    }
    // Sends `pkts` in the next PDU; returns the packets delivered.
    std::vector<byte_buffer> down(time_ns now, const std::vector<byte_buffer>& pkts,
                                  std::optional<float> price) {
        auto out = core.on_rx_indication(now, indication(pdu_bytes(pkts, price, pdu_seq++)));
        return out.delivered;
    }
    // One uplink packet; returns it as it would leave (empty if none).
    byte_buffer up(time_ns now, byte_buffer pkt) {
        auto out = core.on_uplink_packet(now, std::move(pkt));
        if (out.empty()) return {};
        return std::get<wire::uplink_packet>(out.at(0)).packet;
    }
    // Opens `c` from the client side (SYN up, SYN-ACK down with `price`, ACK up).
    void open(time_ns now, const conn& c, std::optional<float> price) {
        EXPECT_EQ(up(now, c.client_syn()), c.client_syn());  // SYN never rewritten
        EXPECT_EQ(down(now, {c.server_synack()}, price).size(), 1u);
    }

    client_core core;
    std::uint16_t user;
    std::uint32_t pdu_seq = 0;
    std::uint16_t packet_seq = 0;
    std::uint64_t slot = 0;
};

client_core_params clamp_params() {
    client_core_params p;
    p.user = 3;
    p.clamp.enabled = true;
    p.clamp.price_timeout = 200 * kMs;
    return p;
}

const wire::harq_feedback* feedback(const rx_output& o) {
    for (const auto& m : o.uplink)
        if (auto* f = std::get_if<wire::harq_feedback>(&m)) return f;
    return nullptr;
}
const wire::cqi_report* cqi(const rx_output& o) {
    for (const auto& m : o.uplink)
        if (auto* c = std::get_if<wire::cqi_report>(&m)) return c;
    return nullptr;
}

}  // namespace

// ---- HARQ feedback and CQI ---------------------------------------------------------------

TEST(ClientCoreRx, addressed_tb_with_good_crc_is_acked_and_its_packets_delivered) {
    client_core_params p;
    p.user = 3;
    harness h(p);
    const byte_buffer a = udp_packet(100), b = udp_packet(300);
    auto ind = h.indication(h.pdu_bytes({a, b}, std::nullopt, 0));
    ind.harq_pid = 5;
    ind.slot = 77;
    const rx_output out = h.core.on_rx_indication(10 * kMs, ind);
    ASSERT_NE(feedback(out), nullptr);
    EXPECT_TRUE(feedback(out)->ack);
    EXPECT_EQ(feedback(out)->harq_pid, 5);
    EXPECT_EQ(feedback(out)->slot, 77u);
    EXPECT_EQ(feedback(out)->user, 3);
    ASSERT_EQ(out.delivered.size(), 2u);
    EXPECT_EQ(out.delivered[0], a);
    EXPECT_EQ(out.delivered[1], b);
    EXPECT_EQ(h.core.stats().harq_acks, 1u);
}

TEST(ClientCoreRx, addressed_tb_with_bad_crc_is_nacked_and_nothing_is_delivered) {
    client_core_params p;
    p.user = 3;
    harness h(p);
    const rx_output out = h.core.on_rx_indication(
        0, h.indication(h.pdu_bytes({udp_packet(100)}, std::nullopt, 0), /*crc_ok=*/false));
    ASSERT_NE(feedback(out), nullptr);
    EXPECT_FALSE(feedback(out)->ack);
    EXPECT_TRUE(out.delivered.empty());
    EXPECT_EQ(h.core.stats().harq_nacks, 1u);
    EXPECT_EQ(h.core.reassembly_stats().tbs_received, 0u);
}

TEST(ClientCoreRx, tb_whose_header_failed_gets_no_feedback_but_the_slot_gets_a_cqi_report) {
    harness h(client_core_params{});
    auto ind = h.indication({});
    ind.header_ok = false;
    const rx_output out = h.core.on_rx_indication(0, ind);
    EXPECT_EQ(feedback(out), nullptr);
    EXPECT_NE(cqi(out), nullptr);
    EXPECT_EQ(h.core.stats().rx_header_failed, 1u);
}

TEST(ClientCoreRx, slot_for_another_client_gets_only_a_cqi_report) {
    harness h(client_core_params{});
    const rx_output out = h.core.on_rx_indication(
        0, h.indication(h.pdu_bytes({udp_packet(50)}, std::nullopt, 0), true, false));
    EXPECT_EQ(feedback(out), nullptr);
    EXPECT_NE(cqi(out), nullptr);
    EXPECT_TRUE(out.delivered.empty());
}

TEST(ClientCoreRx, addressed_indication_naming_another_user_id_gets_no_feedback) {
    client_core_params p;
    p.user = 3;
    harness h(p);
    auto ind = h.indication(h.pdu_bytes({udp_packet(50)}, std::nullopt, 0));
    ind.user = 4;
    const rx_output out = h.core.on_rx_indication(0, ind);
    EXPECT_EQ(feedback(out), nullptr);
    EXPECT_EQ(h.core.stats().rx_other_user, 1u);
}

TEST(ClientCoreRx, corrupt_pdu_with_good_phy_crc_is_acked_counted_and_not_delivered) {
    harness h(client_core_params{});
    byte_buffer tb = h.pdu_bytes({udp_packet(50)}, std::nullopt, 0);
    tb[20] ^= 0xFF;  // breaks the PDU's own CRC-32
    const rx_output out = h.core.on_rx_indication(0, h.indication(tb));
    ASSERT_NE(feedback(out), nullptr);
    EXPECT_TRUE(feedback(out)->ack);  // the PHY decoded it: HARQ is done with it
    EXPECT_TRUE(out.delivered.empty());
    EXPECT_EQ(h.core.stats().pdu_errors, 1u);
}

TEST(ClientCoreRx, cqi_report_carries_the_snr_and_cqi_measured_on_the_slot) {
    client_core_params p;
    p.user = 2;
    harness h(p);
    auto ind = h.indication({}, true, false);
    ind.slot = 41;
    ind.snr_db = -3.25f;
    ind.cqi = 4;
    const rx_output out = h.core.on_rx_indication(0, ind);
    ASSERT_NE(cqi(out), nullptr);
    EXPECT_EQ(cqi(out)->user, 2);
    EXPECT_EQ(cqi(out)->slot, 41u);
    EXPECT_FLOAT_EQ(cqi(out)->snr_db, -3.25f);
    EXPECT_EQ(cqi(out)->cqi, 4);
}

TEST(ClientCoreRx, cqi_is_reported_every_period_slots_by_slot_number) {
    client_core_params p;
    p.cqi_period_slots = 4;
    harness h(p);
    std::vector<std::uint64_t> reported;
    for (std::uint64_t s : {0, 1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13}) {  // slot 4 missed
        auto ind = h.indication({}, true, false);
        ind.slot = s;
        const rx_output out = h.core.on_rx_indication(static_cast<time_ns>(s) * kMs, ind);
        if (cqi(out)) reported.push_back(cqi(out)->slot);
    }
    EXPECT_EQ(reported, (std::vector<std::uint64_t>{0, 5, 9, 13}));
}

TEST(ClientCoreRx, every_slot_is_reported_with_period_one_and_a_nan_snr_is_not) {
    harness h(client_core_params{});
    int n = 0;
    for (int s = 0; s < 5; ++s) n += cqi(h.core.on_rx_indication(0, h.indication({}, 1, 0))) != 0;
    EXPECT_EQ(n, 5);
    auto ind = h.indication({}, true, false);
    ind.snr_db = std::nanf("");
    EXPECT_EQ(cqi(h.core.on_rx_indication(0, ind)), nullptr);
    EXPECT_EQ(h.core.stats().cqi_bad_snr, 1u);
}

// ---- Reassembly -------------------------------------------------------------------------

TEST(ClientCoreRx, pdus_decoded_out_of_order_are_delivered_in_sequence_order) {
    harness h(client_core_params{});
    const byte_buffer a = udp_packet(10), b = udp_packet(20), c = udp_packet(30);
    const byte_buffer pdu0 = h.pdu_bytes({a}, std::nullopt, 0);
    const byte_buffer pdu1 = h.pdu_bytes({b, c}, std::nullopt, 1);
    auto out1 = h.core.on_rx_indication(1 * kMs, h.indication(pdu1));
    EXPECT_TRUE(out1.delivered.empty());  // waits for PDU 0 (HARQ still retrying it)
    auto out0 = h.core.on_rx_indication(2 * kMs, h.indication(pdu0));
    EXPECT_EQ(out0.delivered, (std::vector<byte_buffer>{a, b, c}));
}

TEST(ClientCoreRx, a_gap_is_given_up_by_poll_after_the_reassembly_timeout) {
    client_core_params p;
    p.reassembly.timeout = 30 * kMs;
    harness h(p);
    const byte_buffer a = udp_packet(10), b = udp_packet(20);
    const byte_buffer pdu0 = h.pdu_bytes({a}, std::nullopt, 0);  // never arrives
    (void)pdu0;
    const byte_buffer pdu1 = h.pdu_bytes({b}, std::nullopt, 1);
    EXPECT_TRUE(h.core.on_rx_indication(0, h.indication(pdu1)).delivered.empty());
    ASSERT_TRUE(h.core.next_deadline().has_value());
    EXPECT_EQ(*h.core.next_deadline(), 30 * kMs);
    EXPECT_TRUE(h.core.poll(29 * kMs).empty());
    EXPECT_EQ(h.core.poll(30 * kMs), (std::vector<byte_buffer>{b}));
    EXPECT_EQ(h.core.reassembly_stats().dropped_timeout, 1u);
}

// A TB NACKed on process 0 waits for the scheduler (harq.first false): its retransmission
// decodes 300 ms later, long after the 47.7 ms timeout of a HARQ round trip per
// transmission. With a held timeout the client waits for it; without, it is lost late.
TEST(ClientCoreRx, a_tb_retransmitted_after_the_timeout_is_delivered_while_its_nack_is_pending) {
    for (const time_ns held : {time_ns{0}, 2000 * kMs}) {
        client_core_params p;
        p.user = 3;
        p.reassembly.timeout = static_cast<time_ns>(47.7 * kMs);
        p.reassembly.held_timeout = held;
        harness h(p);
        const byte_buffer a = udp_packet(10), b = udp_packet(20), c = udp_packet(30);
        const byte_buffer pdu0 = h.pdu_bytes({a}, std::nullopt, 0);
        auto first = h.indication(pdu0, /*crc_ok=*/false);
        first.harq_pid = 0;
        first.ndi = 1;
        EXPECT_FALSE(feedback(h.core.on_rx_indication(0, first))->ack);
        auto later = h.indication(h.pdu_bytes({b}, std::nullopt, 1));
        later.harq_pid = 1;
        EXPECT_TRUE(h.core.on_rx_indication(2 * kMs, later).delivered.empty());
        EXPECT_TRUE(h.core.poll(100 * kMs).empty() || held == 0);
        auto retx = h.indication(pdu0);
        retx.harq_pid = 0;
        retx.ndi = 1;
        const rx_output out = h.core.on_rx_indication(300 * kMs, retx);
        EXPECT_TRUE(feedback(out)->ack);  // the AP counts its packet delivered either way
        const auto& st = h.core.reassembly_stats();
        if (held) {
            EXPECT_EQ(out.delivered, (std::vector<byte_buffer>{a, b}));
            EXPECT_EQ(st.tbs_given_up + st.tbs_late + st.dropped_timeout, 0u);
        } else {
            EXPECT_TRUE(out.delivered.empty());  // b went at 49.7 ms, a is lost
            EXPECT_EQ(st.tbs_given_up, 1u);
            EXPECT_EQ(st.tbs_late, 1u);
        }
        // A new NDI on process 0: the AP moved on, a later gap gets the plain timeout.
        auto next = h.indication(h.pdu_bytes({c}, std::nullopt, 3));
        next.harq_pid = 0;
        next.ndi = 0;
        EXPECT_TRUE(h.core.on_rx_indication(301 * kMs, next).delivered.empty());
        EXPECT_EQ(h.core.next_deadline(), 301 * kMs + p.reassembly.timeout);
    }
}

TEST(ClientCoreRx, a_tb_nacked_max_transmissions_times_is_not_held_the_ap_dropped_it) {
    client_core_params p;
    p.user = 3;
    p.reassembly.timeout = 30 * kMs;
    p.reassembly.held_timeout = 2000 * kMs;
    p.harq_max_transmissions = 2;
    harness h(p);
    const byte_buffer a = udp_packet(10), b = udp_packet(20);
    const byte_buffer pdu0 = h.pdu_bytes({a}, std::nullopt, 0);
    auto tx = h.indication(pdu0, /*crc_ok=*/false);
    tx.harq_pid = 2;
    tx.ndi = 1;
    h.core.on_rx_indication(0, tx);
    auto later = h.indication(h.pdu_bytes({b}, std::nullopt, 1));
    later.harq_pid = 0;
    h.core.on_rx_indication(1 * kMs, later);
    EXPECT_EQ(h.core.next_deadline(), 2001 * kMs);  // one NACK: the AP may send it again
    tx.slot = 99;
    h.core.on_rx_indication(5 * kMs, tx);  // the second and last NACK
    EXPECT_EQ(h.core.next_deadline(), 31 * kMs);
    EXPECT_EQ(h.core.poll(31 * kMs), (std::vector<byte_buffer>{b}));
    EXPECT_THROW(
        [] {
            client_core_params bad;
            bad.harq_max_transmissions = 65;
            client_core c(bad);
        }(),
        std::invalid_argument);
}

TEST(ClientCoreRx, price_of_the_latest_pdu_is_kept_with_its_arrival_time) {
    harness h(client_core_params{});
    EXPECT_FALSE(h.core.last_price().has_value());
    h.down(5 * kMs, {udp_packet(10)}, 0.25f);
    h.down(6 * kMs, {udp_packet(10)}, std::nullopt);
    ASSERT_TRUE(h.core.last_price().has_value());
    EXPECT_FLOAT_EQ(h.core.last_price()->price_s, 0.25f);
    EXPECT_EQ(h.core.last_price()->at, 5 * kMs);
    EXPECT_EQ(h.core.last_price()->pdu_seq, 0u);
    h.down(7 * kMs, {udp_packet(10)}, 0.0625f);
    EXPECT_FLOAT_EQ(h.core.last_price()->price_s, 0.0625f);
    EXPECT_EQ(h.core.last_price()->at, 7 * kMs);
    EXPECT_EQ(h.core.stats().pdus_priced, 2u);
    EXPECT_EQ(h.core.stats().pdus_unpriced, 1u);
}

// ---- Uplink -----------------------------------------------------------------------------

TEST(ClientCoreUplink, packets_go_uplink_unchanged_with_clamp_off_and_bad_sizes_are_dropped) {
    client_core_params p;
    p.user = 9;
    harness h(p);
    const conn c(4);
    h.up(0, c.client_syn());
    h.down(0, {c.server_synack()}, 0.001f);
    const byte_buffer ack = c.client_ack(0, 1000);
    const auto out = h.core.on_uplink_packet(0, ack);
    ASSERT_EQ(out.size(), 1u);
    const auto& up = std::get<wire::uplink_packet>(out[0]);
    EXPECT_EQ(up.user, 9);
    EXPECT_EQ(up.packet, ack);
    EXPECT_TRUE(h.core.on_uplink_packet(0, {}).empty());
    EXPECT_TRUE(h.core.on_uplink_packet(0, byte_buffer(70000, 0x45)).empty());
    EXPECT_EQ(h.core.stats().uplink_dropped_size, 2u);
    EXPECT_EQ(h.core.stats().uplink_packets, 2u);  // the SYN and the ACK
}

// ---- CLAMP ------------------------------------------------------------------------------

class clamp_rewrite : public ::testing::TestWithParam<int> {};

// The ACK carries the client_agent's window: the core feeds the agent exactly what a
// reference agent, fed by hand, gets; the field is min(w, AWND_os) rounded up to 2^7 and the
// checksum verifies by full recomputation.
TEST_P(clamp_rewrite, ack_window_is_rewritten_to_the_agents_window_with_a_valid_checksum) {
    client_core_params cp = clamp_params();
    cp.clamp.agent.mu_min_span_s = 0.0;  // eq. 15 from the second packet: slow start ends
    harness h(cp);                       // within these 120 ms
    const conn c(GetParam());
    h.open(0, c, 0.002f);

    clamp::client_agent_params rp;  // reference: the paper's parameters, MSS from the handshake
    rp.mss_bytes = 1460;
    rp.mu_min_span_s = 0.0;
    clamp::client_agent ref(rp);
    std::uint32_t awnd_os = 64240;  // until an ACK is seen: the client's SYN window

    const std::uint16_t os_field = 2000;  // << 7 = 256000 bytes
    time_ns t = 1 * kMs;
    std::uint32_t off = 0;
    // Independent model of the field: ceil(min(w, AWND_os) / 2^7), raised if needed so that
    // the right edge (ack + window) does not move left of the largest one advertised.
    std::optional<std::uint64_t> edge;
    int agent_limited = 0, edge_held = 0;
    std::uint64_t last_adv = 0;
    for (int k = 0; k < 60; ++k) {
        const float price = k < 20 ? 0.0f : 0.004f;
        const byte_buffer data = c.server_data(off, 1000);
        const auto d = h.down(t, {data}, price);
        ASSERT_EQ(d.size(), 1u);
        // s_k is the IP length (40 or 60 bytes more than the payload), the window's step
        // is in the payload's unit (clamp.h, "One byte unit").
        ref.on_data(t, static_cast<std::uint32_t>(data.size()), price, awnd_os, 1000);
        off += 1000;
        byte_buffer ack = c.client_ack(off, os_field);
        const byte_buffer sent = h.up(t + 100'000, ack);
        awnd_os = os_field << 7;
        ASSERT_EQ(sent.size(), ack.size());
        EXPECT_TRUE(checksum_valid(sent)) << "k=" << k;
        const std::uint64_t adv = window_of(sent, 7);
        const std::uint64_t want =
            std::min<std::uint64_t>(static_cast<std::uint64_t>(ref.window()), awnd_os);
        std::uint64_t field = (want + 127) / 128;  // rounded up to the scale granularity
        const std::uint64_t ack_no = ack_of(sent);
        if (edge && *edge > ack_no && (*edge - ack_no + 127) / 128 > field) {
            field = (*edge - ack_no + 127) / 128;
            ++edge_held;
        } else {
            ++agent_limited;
        }
        EXPECT_EQ(adv, field * 128) << "k=" << k;
        last_adv = adv;
        edge = std::max(edge.value_or(0), ack_no + field * 128);
        t += 2 * kMs;
    }
    // Both cases happened: the agent's window (slow start, then Delta w >= -s_k) and the
    // held edge (after slow start ended by halving w, §IV-C).
    EXPECT_GT(agent_limited, 20);
    EXPECT_GT(edge_held, 0);
    const auto* agent = h.core.agent(c.downlink_key());
    ASSERT_NE(agent, nullptr);
    EXPECT_DOUBLE_EQ(agent->window(), ref.window());
    EXPECT_FALSE(agent->in_slow_start());  // the price ended slow start (Delta w < 0)
    EXPECT_EQ(h.core.stats().clamp_acks_rewritten, 60u);
    EXPECT_GT(h.core.stats().clamp_acks_reduced, 0u);

    const auto rows = h.core.take_window_records();
    ASSERT_EQ(rows.size(), 60u);
    EXPECT_EQ(rows.back().awnd_os_bytes, 256000u);
    EXPECT_FLOAT_EQ(static_cast<float>(rows.back().price_s), 0.004f);
    EXPECT_DOUBLE_EQ(rows.back().w_bytes, ref.window());
    EXPECT_EQ(rows.back().advertised_bytes, last_adv);
    EXPECT_EQ(rows.back().flow, GetParam() == 4 ? "10.0.0.1:5201>10.1.0.2:40000"
                                                : "[2001::1]:5201>[2001:100::2]:40000");
    EXPECT_TRUE(h.core.take_window_records().empty());  // taken
}

TEST_P(clamp_rewrite, right_edge_never_moves_left_when_w_falls) {
    harness h(clamp_params());
    const conn c(GetParam());
    h.open(0, c, 0.0f);
    time_ns t = 1 * kMs;
    std::uint32_t off = 0;
    std::int64_t max_edge = -1;
    std::uint32_t shrinks = 0;
    double prev_w = 0;
    for (int k = 0; k < 80; ++k) {
        // Slow start grows w; from k = 40 a high price makes Delta w < 0: w halves, then
        // shrinks by up to s_k per packet.
        const float price = k < 40 ? 0.0f : 0.05f;
        h.down(t, {c.server_data(off, 1400)}, price);
        const double w = h.core.agent(c.downlink_key())->window();
        shrinks += w < prev_w;
        prev_w = w;
        // Delayed ACKs: the receiver ACKs every second segment, the edge check must hold
        // against ACK numbers that lag the data.
        if (k % 2 == 1) {
            const byte_buffer sent = h.up(t, c.client_ack(off, 3000));
            const std::int64_t edge = static_cast<std::int64_t>(ack_of(sent)) +
                                      static_cast<std::int64_t>(window_of(sent, 7));
            EXPECT_GE(edge, max_edge) << "k=" << k;
            max_edge = std::max(max_edge, edge);
        }
        off += 1400;
        t += 3 * kMs;
    }
    EXPECT_GT(shrinks, 10u);  // w did fall, so the edge rule was exercised
}

TEST_P(clamp_rewrite, ack_of_a_flow_not_seen_from_its_syn_is_unchanged) {
    harness h(clamp_params());
    const conn c(GetParam());
    // No handshake seen: data and ACKs of an established connection.
    h.down(0, {c.server_data(0, 1000)}, 0.01f);
    const byte_buffer ack = c.client_ack(1000, 1234);
    EXPECT_EQ(h.up(1 * kMs, ack), ack);
    EXPECT_EQ(h.core.stats().clamp_acks_unknown, 1u);
    EXPECT_EQ(h.core.stats().clamp_acks_rewritten, 0u);
}

TEST_P(clamp_rewrite, server_opened_connection_is_clamped_and_its_syn_ack_is_not) {
    harness h(clamp_params());
    const conn c(GetParam());
    h.down(0, {c.server_syn()}, 0.0f);
    EXPECT_EQ(h.up(0, c.client_synack()), c.client_synack());
    // The SYN-ACK (unscaled window 65160) already promised data up to ISN + 1 + 65160: that
    // edge is held while receiver slow start (w = MSS + k MSS) catches up with it.
    // (Rounding each held window up to 2^7 moves the edge right by < 128 bytes per ACK.)
    int held = 0, agent = 0;
    std::uint64_t edge = 65160;  // relative to ISN + 1
    for (std::uint32_t k = 1; k <= 40; ++k) {
        h.down(k * kMs, {c.server_data(1000 * (k - 1), 1000)}, 0.0f);
        const byte_buffer sent = h.up(k * kMs, c.client_ack(1000 * k, 4000));
        EXPECT_TRUE(checksum_valid(sent));
        const std::uint64_t w_field = ((k + 1) * 1460 + 127) / 128;
        const std::uint64_t edge_field = (edge - 1000 * k + 127) / 128;
        const std::uint64_t field = std::max(w_field, edge_field);
        EXPECT_EQ(window_of(sent, 7), field * 128) << "k=" << k;
        (edge_field > w_field ? held : agent) += 1;
        edge = std::max<std::uint64_t>(edge, 1000 * k + field * 128);
    }
    EXPECT_GT(held, 0);
    EXPECT_GT(agent, 0);
    EXPECT_EQ(h.core.stats().clamp_acks_rewritten, 40u);
}

TEST_P(clamp_rewrite, fail_open_after_price_timeout_then_clamping_resumes) {
    harness h(clamp_params());  // price_timeout 200 ms
    const conn c(GetParam());
    h.open(0, c, 0.001f);
    std::uint32_t off = 0;
    h.down(1 * kMs, {c.server_data(off, 1000)}, 0.001f);
    off += 1000;
    EXPECT_TRUE(h.core.clamping());
    EXPECT_LT(window_of(h.up(1 * kMs, c.client_ack(off, 5000)), 7), 5000u << 7);

    // The AP stops stamping prices: unpriced PDUs for longer than the timeout.
    for (time_ns t = 50 * kMs; t <= 250 * kMs; t += 50 * kMs) {
        h.down(t, {c.server_data(off, 1000)}, std::nullopt);
        off += 1000;
    }
    EXPECT_FALSE(h.core.clamping());
    const auto ev = h.core.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, clamp_event::event_kind::fail_open);
    EXPECT_EQ(ev[0].t, 250 * kMs);
    EXPECT_EQ(h.core.stats().clamp_fail_open_events, 1u);
    const byte_buffer ack = c.client_ack(off, 5000);
    EXPECT_EQ(h.up(251 * kMs, ack), ack);  // passes unchanged
    EXPECT_EQ(h.core.stats().clamp_acks_fail_open, 1u);
    h.down(260 * kMs, {c.server_data(off, 1000)}, std::nullopt);  // no second event
    off += 1000;
    EXPECT_TRUE(h.core.take_events().empty());

    // Prices return: clamping resumes, without moving the right edge left of the
    // unclamped ACK's.
    h.down(300 * kMs, {c.server_data(off, 1000)}, 0.001f);
    off += 1000;
    EXPECT_TRUE(h.core.clamping());
    const auto ev2 = h.core.take_events();
    ASSERT_EQ(ev2.size(), 1u);
    EXPECT_EQ(ev2[0].kind, clamp_event::event_kind::resume);
    const byte_buffer sent = h.up(301 * kMs, c.client_ack(off, 5000));
    EXPECT_TRUE(checksum_valid(sent));
    const std::uint64_t old_edge = ack_of(ack) + (std::uint64_t{5000} << 7);
    EXPECT_GE(ack_of(sent) + window_of(sent, 7), old_edge);
    EXPECT_EQ(h.core.stats().clamp_acks_rewritten, 2u);
    EXPECT_EQ(h.core.stats().clamp_resume_events, 1u);
}

TEST_P(clamp_rewrite, a_silent_downlink_does_not_fail_open) {
    harness h(clamp_params());
    const conn c(GetParam());
    h.open(0, c, 0.001f);
    h.down(1 * kMs, {c.server_data(0, 1000)}, 0.001f);
    // Ten seconds with no PDU at all (idle flow), then an ACK: still clamped.
    const byte_buffer sent = h.up(10 * kNsPerSec, c.client_ack(1000, 5000));
    EXPECT_TRUE(h.core.clamping());
    EXPECT_LT(window_of(sent, 7), 5000u << 7);
    EXPECT_TRUE(h.core.take_events().empty());
}

INSTANTIATE_TEST_SUITE_P(IpVersions, clamp_rewrite, ::testing::Values(4, 6),
                         [](const auto& info) { return "ipv" + std::to_string(info.param); });

TEST(ClampCore, syn_is_never_rewritten_and_handshake_ack_gets_w0_equal_mss) {
    harness h(clamp_params());
    conn c(4);
    c.mss_client = 1400;  // the smaller MSS option wins
    const byte_buffer syn = c.client_syn();
    EXPECT_EQ(h.up(0, syn), syn);
    h.down(0, {c.server_synack()}, 0.0f);
    const byte_buffer sent = h.up(0, c.client_ack(0, 502));  // the handshake's ACK
    // §IV-C: w(0) = MSS = 1400 -> field ceil(1400 / 128) = 11.
    EXPECT_EQ(get16(sent, 34), 11);
    EXPECT_TRUE(checksum_valid(sent));
    EXPECT_EQ(h.core.agent(c.downlink_key())->params().mss_bytes, 1400u);
}

TEST(ClampCore, configured_mss_overrides_the_handshake) {
    auto p = clamp_params();
    p.clamp.mss_bytes = 1000;
    harness h(p);
    const conn c(4);
    h.open(0, c, 0.0f);
    EXPECT_EQ(h.core.agent(c.downlink_key())->params().mss_bytes, 1000u);
}

TEST(ClampCore, scaling_off_when_one_side_does_not_offer_it) {
    harness h(clamp_params());
    conn c(4);
    c.ws_server = std::nullopt;
    h.open(0, c, 0.0f);
    h.down(1 * kMs, {c.server_data(0, 1460)}, 0.0f);
    const byte_buffer sent = h.up(1 * kMs, c.client_ack(1460, 60000));
    EXPECT_EQ(get16(sent, 34), 2 * 1460);  // unscaled: exactly w
    EXPECT_TRUE(checksum_valid(sent));
}

TEST(ClampCore, three_duplicate_acks_end_receiver_slow_start_and_halve_w) {
    harness h(clamp_params());
    const conn c(4);
    h.open(0, c, 0.0f);
    time_ns t = 1 * kMs;
    for (int k = 0; k < 10; ++k, t += kMs) h.down(t, {c.server_data(1000 * k, 1000)}, 0.0f);
    h.up(t, c.client_ack(10000, 5000));
    // Segment 10 lost; 11, 12, 13 arrive and each triggers a duplicate ACK.
    for (int k = 11; k < 14; ++k, t += kMs) h.down(t, {c.server_data(1000 * k, 1000)}, 0.0f);
    const auto* a = h.core.agent(c.downlink_key());
    ASSERT_TRUE(a->in_slow_start());
    const double w_before = a->window();
    h.up(t, c.client_ack(10000, 5000));
    h.up(t, c.client_ack(10000, 5000));
    EXPECT_TRUE(a->in_slow_start());
    h.up(t, c.client_ack(10000, 5000));
    EXPECT_FALSE(a->in_slow_start());
    EXPECT_DOUBLE_EQ(a->window(), w_before / 2);
    EXPECT_EQ(h.core.stats().clamp_dupacks, 3u);
}

TEST(ClampCore, repeated_ack_with_no_data_outstanding_is_not_a_duplicate) {
    harness h(clamp_params());
    const conn c(4);
    h.open(0, c, 0.0f);
    h.down(1 * kMs, {c.server_data(0, 1000)}, 0.0f);
    for (int i = 0; i < 4; ++i) h.up(2 * kMs, c.client_ack(1000, 5000));  // window updates
    EXPECT_EQ(h.core.stats().clamp_dupacks, 0u);
    EXPECT_TRUE(h.core.agent(c.downlink_key())->in_slow_start());
}

TEST(ClampCore, before_any_price_acks_pass_unchanged) {
    harness h(clamp_params());
    const conn c(4);
    h.open(0, c, std::nullopt);  // the SYN-ACK's PDU carries no price
    EXPECT_FALSE(h.core.clamping());
    const byte_buffer ack = c.client_ack(0, 5000);
    EXPECT_EQ(h.up(1 * kMs, ack), ack);
    EXPECT_EQ(h.core.stats().clamp_acks_fail_open, 1u);
    EXPECT_TRUE(h.core.take_events().empty());  // start-up, not a failure (yet)
    // ... until PDUs keep coming without a price for longer than the timeout.
    h.down(250 * kMs, {udp_packet(10)}, std::nullopt);
    const auto ev = h.core.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, clamp_event::event_kind::fail_open);
}

TEST(ClampCore, rst_forgets_the_flow_and_non_tcp_passes_unchanged) {
    harness h(clamp_params());
    const conn c(4);
    h.open(0, c, 0.0f);
    EXPECT_EQ(h.core.clamp_flows(), 1u);
    h.down(1 * kMs, {c.server_rst()}, 0.0f);
    EXPECT_EQ(h.core.clamp_flows(), 0u);
    const byte_buffer ack = c.client_ack(0, 5000);
    EXPECT_EQ(h.up(2 * kMs, ack), ack);
    const byte_buffer udp = udp_packet(40);
    EXPECT_EQ(h.up(2 * kMs, udp), udp);
}

TEST(ClampCore, flow_table_is_bounded_and_idle_flows_expire) {
    auto p = clamp_params();
    p.clamp.max_flows = 2;
    p.clamp.flow_idle_timeout = 10 * kNsPerSec;
    harness h(p);
    for (std::uint16_t port = 40000; port < 40003; ++port) h.up(0, conn(4, port).client_syn());
    EXPECT_EQ(h.core.clamp_flows(), 2u);
    EXPECT_EQ(h.core.stats().clamp_flows_evicted, 1u);
    h.core.poll(11 * kNsPerSec);
    EXPECT_EQ(h.core.clamp_flows(), 0u);
    EXPECT_EQ(h.core.stats().clamp_flows_expired, 2u);
}

TEST(ClampCore, window_records_beyond_the_pending_bound_are_counted_not_kept) {
    auto p = clamp_params();
    p.clamp.max_pending_records = 3;
    harness h(p);
    const conn c(4);
    h.open(0, c, 0.0f);
    for (int i = 0; i < 5; ++i) h.up(1 * kMs, c.client_ack(0, 5000));
    EXPECT_EQ(h.core.take_window_records().size(), 3u);
    EXPECT_EQ(h.core.stats().clamp_records_dropped, 2u);
}

// ---- Parameters ---------------------------------------------------------------------------

TEST(client_core_params, invalid_values_throw_naming_the_field_and_the_value) {
    auto expect_bad = [](client_core_params p, const std::string& field) {
        try {
            client_core core(p);
            FAIL() << "no error for " << field;
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
        }
    };
    client_core_params p;
    p.cqi_period_slots = 0;
    expect_bad(p, "client.cqi_period_slots: 0");
    p = {};
    p.clamp.price_timeout = 0;
    expect_bad(p, "client.clamp.price_timeout: 0");
    p = {};
    p.clamp.mss_bytes = 10;
    expect_bad(p, "client.clamp.mss_bytes: 10");
    p = {};
    p.clamp.agent.beta = 1.5;
    expect_bad(p, "clamp.client.beta: 1.5");
    p = {};
    p.reassembly.window = 0;
    expect_bad(p, "reassembler.window: 0");
    p = {};
    p.clamp.max_flows = 0;
    expect_bad(p, "client.clamp.max_flows: 0");
    p = {};
    p.residual_loss = 1.0;
    expect_bad(p, "client.residual_loss: 1 not in [0, 1)");
    p = {};
    p.residual_loss = -0.1;
    expect_bad(p, "client.residual_loss: -0.1");
    p = {};
    p.residual_loss = std::nan("");
    expect_bad(p, "client.residual_loss: nan");
}

// ---- Residual loss after the link (Andrew & Hanly, CLAMP, Table I) ------------------------

namespace {

// Delivers `n` packets one per PDU through a core with residual loss `p_loss` and `seed`;
// returns which ones arrived (by index) and the core's counters.
std::pair<std::vector<int>, client_core_stats> residual_run(double p_loss, std::uint64_t seed,
                                                            int n) {
    client_core_params p;
    p.user = 3;
    p.residual_loss = p_loss;
    p.residual_loss_seed = seed;
    harness h(p);
    std::vector<int> arrived;
    for (int i = 0; i < n; ++i) {
        const byte_buffer pkt = udp_packet(100 + (i % 7));
        if (!h.down(i * kMs, {pkt}, std::nullopt).empty()) arrived.push_back(i);
    }
    return {arrived, h.core.stats()};
}

}  // namespace

TEST(ClientCoreResidualLoss, drops_each_packet_with_its_probability_and_counts_what_it_dropped) {
    const int n = 200000;
    const auto [arrived, st] = residual_run(1e-2, 11, n);
    const auto dropped = static_cast<std::uint64_t>(n) - arrived.size();
    EXPECT_EQ(st.residual_dropped_packets, dropped);
    EXPECT_EQ(st.delivered_packets, arrived.size());
    EXPECT_GT(st.residual_dropped_bytes, dropped * 100);
    // Binomial(200000, 0.01): mean 2000, sd 44.5; within 5 sd.
    EXPECT_NEAR(static_cast<double>(dropped), 2000.0, 5 * 44.5);
    // Every TB was still acknowledged: the loss is after the link, not of it.
    EXPECT_EQ(st.harq_acks, static_cast<std::uint64_t>(n));
}

TEST(ClientCoreResidualLoss, the_same_seed_drops_the_same_packets_and_another_seed_others) {
    const auto a = residual_run(0.05, 7, 4000).first;
    const auto b = residual_run(0.05, 7, 4000).first;
    const auto c = residual_run(0.05, 8, 4000).first;
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);
}

TEST(ClientCoreResidualLoss, zero_drops_nothing) {
    const auto [arrived, st] = residual_run(0.0, 7, 5000);
    EXPECT_EQ(arrived.size(), 5000u);
    EXPECT_EQ(st.residual_dropped_packets, 0u);
}

TEST(ClientCoreResidualLoss, a_dropped_packet_never_reaches_the_clamp_agent) {
    client_core_params p = clamp_params();
    p.residual_loss = 0.5;
    p.residual_loss_seed = 3;
    harness h(p);
    const conn c(4);
    h.up(0, c.client_syn());
    // The SYN-ACK takes its draw too; with this seed it arrives.
    ASSERT_EQ(h.down(0, {c.server_synack()}, 0.01f).size(), 1u);
    const std::uint64_t fed_before = h.core.stats().clamp_data_packets;
    std::uint64_t delivered = 0;
    for (int i = 0; i < 400; ++i)
        delivered += h.down((i + 1) * kMs,
                            {c.server_data(static_cast<std::uint32_t>(i) * 1000, 1000)}, 0.01f)
                         .size();
    const auto& st = h.core.stats();
    EXPECT_GT(st.residual_dropped_packets, 100u);
    EXPECT_GT(delivered, 100u);
    // The agent measures what arrives (eq. 15's mu over delivered packets): exactly those.
    EXPECT_EQ(st.clamp_data_packets - fed_before, delivered);
}

TEST(client_core, compact_pdus_deliver_their_packets_and_the_price_comes_from_the_compact_header) {
    client_core_params p;
    p.user = 2;
    harness h(p);
    byte_buffer pkt(28, 0x77);
    pkt[0] = 0x45;
    pkt[2] = 0;
    pkt[3] = 28;  // IPv4 total length
    pdu::compact_pdu c;
    c.seq = 0;
    c.price_s = 0.5f;
    c.packets = {pkt};
    auto out = h.core.on_rx_indication(0, h.indication(pdu::serialize_compact(c, 40).value()));
    EXPECT_EQ(out.delivered, std::vector<byte_buffer>{pkt});
    EXPECT_EQ(h.core.stats().pdus_priced, 1u);
    ASSERT_TRUE(h.core.last_price());
    EXPECT_EQ(h.core.last_price()->price_s, 0.5f);
    EXPECT_EQ(h.core.last_price()->pdu_seq, 0u);
    c.seq = 1;
    c.price_s.reset();
    out = h.core.on_rx_indication(kMs, h.indication(pdu::serialize_compact(c, 32).value()));
    EXPECT_EQ(out.delivered, std::vector<byte_buffer>{pkt});
    EXPECT_EQ(h.core.stats().pdus_unpriced, 1u);
    EXPECT_EQ(h.core.stats().pdu_errors, 0u);
    // A standard PDU in the compact stream is refused (and counted), the stream goes on.
    out = h.core.on_rx_indication(2 * kMs, h.indication(h.pdu_bytes({pkt}, 0.1f, 2)));
    EXPECT_TRUE(out.delivered.empty());
    EXPECT_EQ(h.core.stats().pdu_errors, 1u);
    EXPECT_EQ(h.core.last_price()->price_s, 0.5f);
}
