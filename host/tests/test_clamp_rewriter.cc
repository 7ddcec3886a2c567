// The client's CLAMP flow table and ACK window rewrite (oppsched/clamp_rewriter.h), driven
// directly with packets and a price: eq. 17's AWND = min(w, AWND_os), the flow lifecycle,
// and the pass-through without a price.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>

#include "oppsched/clamp.h"
#include "oppsched/clamp_rewriter.h"
#include "oppsched/client_core.h"
#include "tcp_test_packets.h"

namespace oppsched::client {
namespace {

using namespace oppsched::test;

constexpr time_ns kMs = kNsPerMs;

clamp_rewriter_params config() {
    clamp_rewriter_params c;
    c.enabled = true;
    return c;
}

// SYN, SYN-ACK and the handshake's last ACK of a client-opened connection.
void open(clamp_rewriter& r, const conn& c, std::optional<float> price) {
    byte_buffer syn = c.client_syn();
    r.on_uplink(0, syn, price);
    r.on_downlink(kMs, c.server_synack(), price);
}

TEST(ClampRewriter, when_the_handshake_completes_then_the_flow_has_an_agent_with_the_mss) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    const conn c(4);
    open(r, c, 0.01f);
    EXPECT_EQ(r.flows(), 1u);
    ASSERT_NE(r.agent(c.downlink_key()), nullptr);
    EXPECT_EQ(r.agent(c.downlink_key())->params().mss_bytes, 1460u);
    EXPECT_EQ(stats.clamp_flows_created, 1u);
    EXPECT_EQ(stats.clamp_agents_created, 1u);
}

TEST(ClampRewriter, when_a_price_is_given_then_the_ack_window_is_min_of_w_and_the_os_window) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    const conn c(4);
    open(r, c, 0.01f);
    byte_buffer ack = c.client_ack(0, 1000);  // 1000 << 7 = 128000 bytes from the OS
    r.on_uplink(2 * kMs, ack, 0.01f);
    const double w = r.agent(c.downlink_key())->window();
    EXPECT_LT(w, 128000.0);
    EXPECT_GE(window_of(ack, 7), static_cast<std::uint64_t>(w));  // rounded up to the scale
    EXPECT_LT(window_of(ack, 7), static_cast<std::uint64_t>(w) + 128);
    EXPECT_TRUE(checksum_valid(ack));
    EXPECT_EQ(stats.clamp_acks_rewritten, 1u);
    EXPECT_EQ(stats.clamp_acks_reduced, 1u);
    const auto rows = r.take_records();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_EQ(rows[0].flow, flow_name(c.downlink_key()));
    EXPECT_EQ(rows[0].awnd_os_bytes, 128000u);
    EXPECT_FLOAT_EQ(static_cast<float>(rows[0].price_s), 0.01f);
    EXPECT_TRUE(r.take_records().empty());
}

TEST(ClampRewriter, when_no_price_is_given_then_acks_keep_the_os_window_and_data_is_not_fed) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    const conn c(6);
    open(r, c, std::nullopt);
    r.on_downlink(2 * kMs, c.server_data(0, 1000), std::nullopt);
    byte_buffer ack = c.client_ack(1000, 1000);
    const byte_buffer before = ack;
    r.on_uplink(3 * kMs, ack, std::nullopt);
    EXPECT_EQ(ack, before);
    EXPECT_EQ(stats.clamp_acks_fail_open, 1u);
    EXPECT_EQ(stats.clamp_data_unpriced, 1u);
    EXPECT_EQ(stats.clamp_data_packets, 0u);
    EXPECT_TRUE(r.take_records().empty());
}

// One byte unit (clamp.h): the agent's s_k is the IP packet's length, the unit of the AP's
// queue and mu_c, so mu_hat (eq. 15) is IP bytes per second; the window's step is in the
// payload's unit (sequence space). Fed with payloads, mu_hat would be 1000 / 1040 (IPv4)
// or 1000 / 1060 (IPv6) of this.
TEST(ClampRewriter, when_data_packets_arrive_then_the_agents_s_k_is_their_ip_length) {
    for (const int ipv : {4, 6}) {
        client_core_stats stats;
        clamp_rewriter_params cfg = config();
        cfg.agent.mu_min_span_s = 0.0;  // eq. 15 from the second packet, to compare by hand
        clamp_rewriter r(cfg, stats);
        const conn c(ipv);
        open(r, c, 0.0f);
        clamp::client_agent_params rp;  // reference agent: MSS from the handshake
        rp.mu_min_span_s = 0.0;
        rp.mss_bytes = r.agent(c.downlink_key())->params().mss_bytes;
        clamp::client_agent ref(rp);
        const std::uint32_t awnd_os = 64240;  // the client's SYN window: no ACK seen yet
        time_ns t = 2 * kMs;
        std::uint32_t off = 0;
        std::uint64_t ip_bytes = 0;
        for (int k = 0; k < 5; ++k) {
            const byte_buffer data = c.server_data(off, 1000);
            const std::uint32_t ip_len = ipv == 4 ? 1040u : 1060u;
            ASSERT_EQ(data.size(), ip_len);
            r.on_downlink(t, data, k < 2 ? 0.0f : 0.002f);
            ref.on_data(t, ip_len, k < 2 ? 0.0 : static_cast<double>(0.002f), awnd_os, 1000);
            ip_bytes += ip_len;
            off += 1000;
            t += kMs;
        }
        const clamp::client_agent* a = r.agent(c.downlink_key());
        ASSERT_NE(a, nullptr);
        EXPECT_EQ(stats.clamp_data_packets, 5u);
        // eq. 15 over the 5 packets, 4 ms apart end to end: IP bytes per second
        EXPECT_DOUBLE_EQ(a->mu_hat(), static_cast<double>(ip_bytes) / 4e-3) << "IPv" << ipv;
        EXPECT_DOUBLE_EQ(a->mu_hat(), ref.mu_hat());
        EXPECT_DOUBLE_EQ(a->d_hat(), ref.d_hat());
        EXPECT_DOUBLE_EQ(a->window(), ref.window());
    }
}

// An upload (flows[].direction up): the client is TCP's sender; CLAMP, which clamps a
// receiver's window, leaves its data segments and the server's ACKs alone. Data coming down
// afterwards (a request answered) makes the client a receiver again.
TEST(ClampRewriter, when_the_client_sends_data_first_then_its_segments_keep_the_os_window) {
    for (const int ipv : {4, 6}) {
        client_core_stats stats;
        clamp_rewriter r(config(), stats);
        const conn c(ipv);
        open(r, c, 0.01f);
        byte_buffer hs = c.client_ack(0, 1000);  // the handshake's ACK: direction unknown yet
        r.on_uplink(2 * kMs, hs, 0.01f);
        ASSERT_EQ(stats.clamp_acks_rewritten, 1u);
        ASSERT_EQ(r.take_records().size(), 1u);
        const double w0 = r.agent(c.downlink_key())->window();
        for (int k = 0; k < 20; ++k) {
            byte_buffer data = c.client_ack(0, 1000, 1400);  // the client's data, window 128000
            const byte_buffer before = data;
            r.on_uplink((3 + k) * kMs, data, 0.01f);
            EXPECT_EQ(data, before) << "IPv" << ipv << " segment " << k;
            r.on_downlink((3 + k) * kMs + 1, c.server_data(0, 0), 0.01f);  // the server's ACK
        }
        EXPECT_EQ(stats.clamp_acks_rewritten, 1u);
        EXPECT_EQ(stats.clamp_data_packets, 0u);
        EXPECT_TRUE(r.take_records().empty());
        EXPECT_DOUBLE_EQ(r.agent(c.downlink_key())->window(), w0);
        // The server answers with data: the client's ACKs are clamped again.
        r.on_downlink(30 * kMs, c.server_data(0, 1000), 0.01f);
        EXPECT_EQ(stats.clamp_data_packets, 1u);
        byte_buffer ack = c.client_ack(1000, 1000);
        r.on_uplink(31 * kMs, ack, 0.01f);
        EXPECT_EQ(stats.clamp_acks_rewritten, 2u);
        EXPECT_LT(window_of(ack, 7), 128000u);
        EXPECT_TRUE(checksum_valid(ack));
    }
}

// The client's SYN timer (1 s) fires while the SYN-ACK sits as long in the AP's queue: the
// retransmitted SYN is read from the TUN after the SYN-ACK went down to the kernel, which is
// established by then, so no SYN-ACK follows it. Seen at 0.6 Mb/s with four slow starts:
// one flow's ACKs went unclamped for the whole run.
TEST(ClampRewriter, when_a_retransmitted_syn_follows_the_synack_then_the_flow_keeps_its_agent) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    const conn c(4);
    open(r, c, 0.01f);
    byte_buffer again = c.client_syn();  // same ISN
    r.on_uplink(1000 * kMs, again, 0.01f);
    ASSERT_NE(r.agent(c.downlink_key()), nullptr);
    EXPECT_EQ(stats.clamp_flows_created, 1u);
    byte_buffer ack = c.client_ack(0, 1000);
    r.on_uplink(1001 * kMs, ack, 0.01f);
    EXPECT_EQ(stats.clamp_acks_rewritten, 1u);
    EXPECT_EQ(stats.clamp_acks_unknown, 0u);
    EXPECT_LT(window_of(ack, 7), 128000u);
}

TEST(ClampRewriter, when_a_syn_with_a_new_isn_reuses_the_ports_then_the_connection_restarts) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    conn c(4);
    open(r, c, 0.01f);
    c.client_isn += 100000;  // a new connection on the same four-tuple
    byte_buffer syn = c.client_syn();
    r.on_uplink(5000 * kMs, syn, 0.01f);
    EXPECT_EQ(r.agent(c.downlink_key()), nullptr);  // until its own SYN-ACK
    EXPECT_EQ(stats.clamp_flows_created, 2u);
    r.on_downlink(5001 * kMs, c.server_synack(), 0.01f);
    EXPECT_NE(r.agent(c.downlink_key()), nullptr);
}

TEST(ClampRewriter, when_a_connection_was_not_seen_from_its_syn_then_its_acks_pass_unchanged) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    const conn c(4);
    byte_buffer ack = c.client_ack(0, 1000);
    const byte_buffer before = ack;
    r.on_uplink(0, ack, 0.01f);
    EXPECT_EQ(ack, before);
    EXPECT_EQ(stats.clamp_acks_unknown, 1u);
    EXPECT_EQ(r.flows(), 0u);
}

TEST(ClampRewriter, when_acks_follow_a_rst_then_they_count_as_after_close_not_unknown) {
    client_core_stats stats;
    clamp_rewriter r(config(), stats);
    const conn a(4, 40000), b(4, 40001);
    open(r, a, 0.01f);
    r.on_downlink(2 * kMs, a.server_rst(), 0.01f);
    byte_buffer late = a.client_ack(0, 1000);
    r.on_uplink(3 * kMs, late, 0.01f);
    EXPECT_EQ(stats.clamp_acks_after_close, 1u);
    EXPECT_EQ(stats.clamp_acks_unknown, 0u);
    byte_buffer stranger = b.client_ack(0, 1000);  // never seen from its SYN
    r.on_uplink(4 * kMs, stranger, 0.01f);
    EXPECT_EQ(stats.clamp_acks_unknown, 1u);
}

TEST(ClampRewriter, when_a_rst_arrives_or_the_flow_idles_then_it_is_forgotten) {
    client_core_stats stats;
    clamp_rewriter_params cfg = config();
    cfg.flow_idle_timeout = 10 * kMs;
    clamp_rewriter r(cfg, stats);
    const conn a(4, 40000), b(4, 40001);
    open(r, a, 0.01f);
    open(r, b, 0.01f);
    r.on_downlink(2 * kMs, a.server_rst(), 0.01f);
    EXPECT_EQ(r.flows(), 1u);
    EXPECT_EQ(stats.clamp_flows_closed, 1u);
    r.expire(20 * kMs);
    EXPECT_EQ(r.flows(), 0u);
    EXPECT_EQ(stats.clamp_flows_expired, 1u);
}

TEST(ClampRewriter, when_the_table_is_full_then_the_least_recently_seen_flow_is_evicted) {
    client_core_stats stats;
    clamp_rewriter_params cfg = config();
    cfg.max_flows = 2;
    clamp_rewriter r(cfg, stats);
    const conn a(4, 40000), b(4, 40001), c(4, 40002);
    open(r, a, 0.01f);
    open(r, b, 0.01f);
    r.on_downlink(5 * kMs, a.server_data(0, 100), 0.01f);  // a seen more recently than b
    open(r, c, 0.01f);
    EXPECT_EQ(r.flows(), 2u);
    EXPECT_EQ(stats.clamp_flows_evicted, 1u);
    EXPECT_NE(r.agent(a.downlink_key()), nullptr);
    EXPECT_EQ(r.agent(b.downlink_key()), nullptr);
}

TEST(ClampRewriter, evictions_follow_the_order_of_last_use_not_of_creation) {
    client_core_stats stats;
    clamp_rewriter_params cfg = config();
    cfg.max_flows = 3;
    clamp_rewriter r(cfg, stats);
    const conn a(4, 40000), b(4, 40001), c(4, 40002), d(4, 40003), e(4, 40004);
    open(r, a, 0.01f);
    open(r, b, 0.01f);
    open(r, c, 0.01f);
    r.on_downlink(2 * kMs, a.server_data(0, 100), 0.01f);  // use order: b, c, a
    open(r, d, 0.01f);                                     // b goes: c, a, d
    EXPECT_EQ(r.agent(b.downlink_key()), nullptr);
    r.on_downlink(3 * kMs, c.server_data(0, 100), 0.01f);  // a, d, c
    open(r, e, 0.01f);                                     // a goes: d, c, e
    EXPECT_EQ(r.agent(a.downlink_key()), nullptr);
    EXPECT_NE(r.agent(c.downlink_key()), nullptr);
    EXPECT_NE(r.agent(d.downlink_key()), nullptr);
    EXPECT_NE(r.agent(e.downlink_key()), nullptr);
    EXPECT_EQ(r.flows(), 3u);
    EXPECT_EQ(stats.clamp_flows_evicted, 2u);
    // Expiry takes the least recently used first and stops at the first one still fresh.
    cfg.flow_idle_timeout = 10 * kMs;
    clamp_rewriter r2(cfg, stats);
    open(r2, a, 0.01f);
    open(r2, b, 0.01f);
    r2.on_downlink(30 * kMs, a.server_data(0, 100), 0.01f);
    r2.expire(35 * kMs);  // b (last seen at 1 ms) has expired, a has not
    EXPECT_EQ(r2.agent(b.downlink_key()), nullptr);
    EXPECT_NE(r2.agent(a.downlink_key()), nullptr);
}

}  // namespace
}  // namespace oppsched::client
