// Drop-tail and RED (gentle) behaviour, with a fake clock.
#include <gtest/gtest.h>

#include <cmath>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

TEST(drop_tail_discipline, drops_only_arrivals_that_exceed_the_packet_limit) {
    aqm_params c = default_config(aqm_kind::droptail);
    c.limits = {0, 3};
    harness h(c);
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(h.offer(data_packet(1000), 0));
    EXPECT_FALSE(h.offer(data_packet(1000), 0));
    ASSERT_EQ(h.drops.size(), 1u);
    EXPECT_EQ(h.drops[0].reason, drop_reason::overflow);
    EXPECT_EQ(h.drops[0].packet.id, 3u);
    ASSERT_TRUE(h.aqm->dequeue(1).has_value());
    EXPECT_TRUE(h.offer(data_packet(1000), 2));
}

TEST(drop_tail_discipline, byte_limit_admits_a_small_packet_after_rejecting_a_large_one) {
    aqm_params c = default_config(aqm_kind::droptail);
    c.limits = {2500, 0};
    harness h(c);
    EXPECT_TRUE(h.offer(data_packet(1500), 0));
    EXPECT_FALSE(h.offer(data_packet(1500), 0));  // 3000 > 2500
    EXPECT_TRUE(h.offer(data_packet(1000), 0));   // exactly 2500
    EXPECT_EQ(h.aqm->bytes(), 2500u);
    EXPECT_FALSE(h.offer(udp_packet(28), 0));
}

aqm_params red_config(double w_q, bool gentle = true) {
    aqm_params c = default_config(aqm_kind::red);
    c.limits = {0, 200};
    auto& p = std::get<red_params>(c.params);
    p.w_q = w_q;  // 1: avg = instantaneous queue, so the tests set it exactly
    p.gentle = gentle;
    return c;
}

TEST(red_discipline, below_min_th_never_marks_or_drops) {
    harness h(red_config(1.0));
    time_ns t = 0;
    for (int i = 0; i < 10000; ++i) {
        // The queue before each arrival cycles through 0..3 < min_th = 5.
        h.offer(data_packet(1000, i % 2 ? kEct : tcpip::kNotEct), t);
        if (h.aqm->packets() == 4) {
            while (h.aqm->dequeue(t)) {
            }
        }
        t += kNsPerMs;
    }
    EXPECT_EQ(h.aqm->stats().marked, 0u);
    EXPECT_TRUE(h.drops.empty());
}

TEST(red_discipline, gentle_probability_is_linear_between_thresholds_and_up_to_twice_max_th) {
    harness h(red_config(1.0));
    const double min_th = 5, max_th = 15, max_p = 0.1;
    for (int q = 0; q < 30; ++q) {
        // ECT arrivals are marked, never dropped: the queue grows by exactly one each time.
        ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
        const double pb = h.aqm->stats().drop_probability;
        double expected = 0.0;
        if (q >= min_th && q < max_th) {
            expected = max_p * (q - min_th) / (max_th - min_th);
        } else if (q >= max_th) {
            expected = max_p + (1 - max_p) * (q - max_th) / max_th;
        }
        EXPECT_NEAR(pb, expected, 1e-12) << "queue " << q;
        EXPECT_DOUBLE_EQ(h.aqm->stats().avg_queue, q);
    }
    EXPECT_TRUE(h.drops.empty());
}

TEST(red_discipline, gentle_above_twice_max_th_signals_every_arrival) {
    harness h(red_config(1.0));
    while (h.aqm->packets() < 31) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    int signalled = 0;
    constexpr int kN = 2000;
    for (int i = 0; i < kN; ++i) {
        // Non-ECT: a signal is a drop, so the queue stays at 31 >= 2 max_th.
        if (!h.offer(data_packet(1000), kNsPerMs * i)) ++signalled;
    }
    EXPECT_GE(signalled, 0.95 * kN);
    EXPECT_EQ(h.drops_with(drop_reason::early_drop), static_cast<std::size_t>(signalled));
    EXPECT_EQ(h.aqm->packets(), 31u);
}

TEST(red_discipline, without_gentle_every_arrival_above_max_th_is_signalled) {
    harness h(red_config(1.0, false));
    while (h.aqm->packets() < 15) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    for (int i = 0; i < 100; ++i) EXPECT_FALSE(h.offer(data_packet(1000), 0));
    EXPECT_DOUBLE_EQ(h.aqm->stats().drop_probability, 1.0);
}

TEST(red_discipline, uniformised_marks_are_never_more_than_one_over_pb_apart) {
    // Queue held at 10: p_b = 0.05. With p_a = p_b / (1 - count p_b) the gaps between marks
    // are uniform on 1 .. 1/p_b - 1 (Floyd & Jacobson 1993 §7), so the mean fraction is 0.1.
    harness h(red_config(1.0));
    while (h.aqm->packets() < 10) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
    const auto marked0 = h.aqm->stats().marked;
    int since = 0, max_gap = 0, marks = 0;
    constexpr int kN = 40000;
    for (int i = 0; i < kN; ++i) {
        const auto before = h.aqm->stats().marked;
        ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
        ++since;
        if (h.aqm->stats().marked != before) {
            ++marks;
            max_gap = std::max(max_gap, since);
            since = 0;
        }
        h.aqm->dequeue(0);
    }
    EXPECT_NEAR(h.aqm->stats().drop_probability, 0.05, 1e-12);
    EXPECT_LE(max_gap, 20);
    EXPECT_NEAR(static_cast<double>(marks) / kN, 0.1, 0.01);
    EXPECT_EQ(h.aqm->stats().marked - marked0, static_cast<std::uint64_t>(marks));
}

TEST(red_discipline, average_decays_over_an_idle_period_at_the_link_rate) {
    aqm_params c = red_config(0.5);
    c.rate.capacity_bps = 1e6;  // 500-byte packets: 250 per second
    harness h(c);
    for (int i = 0; i < 20; ++i) h.offer(data_packet(1000, kEct), 0);
    const double avg_busy = h.aqm->stats().avg_queue;
    EXPECT_GT(avg_busy, 15.0);
    while (h.aqm->dequeue(kNsPerMs)) {
    }
    h.offer(data_packet(1000, kEct), kNsPerMs + 100 * kNsPerMs);  // 100 ms idle: m = 25
    EXPECT_NEAR(h.aqm->stats().avg_queue, avg_busy * std::pow(0.5, 26), 1e-9);

    // With the rate unknown (measuring, fewer than 16 kB served) only the one sample counts.
    aqm_params m = red_config(0.5);
    harness h2(m);
    for (int i = 0; i < 10; ++i) h2.offer(data_packet(1000, kEct), 0);
    const double avg2 = h2.aqm->stats().avg_queue;
    while (h2.aqm->dequeue(kNsPerMs)) {
    }
    h2.offer(data_packet(1000, kEct), kNsPerSec);
    EXPECT_DOUBLE_EQ(h2.aqm->stats().avg_queue, avg2 * 0.5);
}

}  // namespace

namespace {

// RED held above 2 max_th (every arrival signalled): a not-ECN-capable SYN is dropped as
// any such packet, unless the AQM spares the handshake; then only a full buffer drops it.
TEST(red_discipline, spare_handshake_queues_syns_an_early_drop_would_take_and_nothing_else) {
    for (const bool spare : {false, true}) {
        aqm_params c = red_config(1.0);
        c.limits = {0, 40};
        c.spare_handshake = spare;
        harness h(c);
        for (int i = 0; i < 35; ++i) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
        ASSERT_GE(h.aqm->stats().drop_probability, 1.0);
        tcp_spec syn;
        syn.flags = tcpip::kSyn;
        tcp_spec syn_ack;
        syn_ack.flags = tcpip::kSyn | tcpip::kAck;
        EXPECT_EQ(h.offer(tcp_packet(syn), 0), spare) << spare;
        EXPECT_EQ(h.offer(tcp_packet(syn_ack), 0), spare) << spare;
        // a not-ECN-capable data packet and a pure ACK are dropped either way
        EXPECT_FALSE(h.offer(data_packet(1000, tcpip::kNotEct), 0));
        EXPECT_FALSE(h.offer(tcp_packet(tcp_spec{}), 0));
        EXPECT_EQ(h.aqm->stats().spared_handshakes, spare ? 2u : 0u);
        EXPECT_EQ(h.aqm->stats().dropped_by(drop_reason::early_drop), spare ? 2u : 4u);
        if (spare) {
            // the buffer still bounds them: fill it, and a SYN overflows
            while (h.aqm->packets() < 40) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
            EXPECT_FALSE(h.offer(tcp_packet(syn), 0));
            EXPECT_EQ(h.drops.back().reason, drop_reason::overflow);
        }
    }
}

// RED held above 2 max_th: a Not-ECT data segment (a Linux retransmission, RFC 3168 §6.1.5)
// and a pure ACK (§6.1.4) are dropped, unless mark_not_ect treats them as ECN-capable: then
// they are queued CE-marked, with a valid IPv4 header checksum. A SYN is not marked (it is
// spare_handshake's); with ecn off nothing is marked.
TEST(red_discipline, mark_not_ect_marks_a_retransmission_and_a_pure_ack_but_not_a_syn) {
    for (const bool mark : {false, true}) {
        aqm_params c = red_config(1.0);
        c.limits = {0, 40};
        c.mark_not_ect = mark;
        harness h(c);
        for (int i = 0; i < 35; ++i) ASSERT_TRUE(h.offer(data_packet(1000, kEct), 0));
        ASSERT_GE(h.aqm->stats().drop_probability, 1.0);
        EXPECT_EQ(h.offer(data_packet(1000, tcpip::kNotEct, 5001, 77), 0), mark) << mark;
        EXPECT_EQ(h.offer(tcp_packet(tcp_spec{}), 0), mark);  // a pure ACK
        tcp_spec syn;
        syn.flags = tcpip::kSyn;
        EXPECT_FALSE(h.offer(tcp_packet(syn), 0));
        EXPECT_EQ(h.aqm->stats().marked_not_ect, mark ? 2u : 0u);
        EXPECT_EQ(h.aqm->stats().dropped_by(drop_reason::early_drop), mark ? 1u : 3u);
        if (mark) {
            std::optional<ip_packet> last;
            while (auto p = h.aqm->dequeue(0)) {
                if (tcpip::parse(p->data)->tcp->payload_len > 0) last = std::move(p);
            }
            ASSERT_TRUE(last);
            const auto info = tcpip::parse(last->data);
            ASSERT_TRUE(info);
            EXPECT_EQ(info->tcp->seq, 77u);
            EXPECT_EQ(info->ecn, tcpip::kCe);
            EXPECT_EQ(tcpip::ipv4_header_checksum(last->data.data(), 20),
                      (last->data[10] << 8) | last->data[11]);
        }
    }
    aqm_params off = red_config(1.0);
    off.limits = {0, 40};
    off.mark_not_ect = true;
    off.ecn = false;
    harness h(off);
    for (int i = 0; i < 1000; ++i) h.offer(data_packet(1000, tcpip::kNotEct), 0);
    EXPECT_GT(h.aqm->stats().dropped_by(drop_reason::early_drop), 0u);
    EXPECT_EQ(h.aqm->stats().marked, 0u);
    EXPECT_EQ(h.aqm->stats().marked_not_ect, 0u);
}

}  // namespace
