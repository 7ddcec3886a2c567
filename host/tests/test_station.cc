// A station's own uplink queue (station.h) and the medium that grants it slots
// (medium.station_queue: client): buffer status reports, grants, the station's TBs, HARQ by
// the grant's NDI. A fake clock: slot n's request comes lead_slots before its air time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "oppsched/linkadapt.h"
#include "oppsched/medium.h"
#include "oppsched/pdu.h"
#include "oppsched/station.h"

namespace oppsched {
namespace {

constexpr double kSlotS = 1.667e-3;
constexpr time_ns kSlotNs = 1'667'000;
constexpr std::uint32_t kLead = 4;

std::vector<std::uint8_t> packet(std::uint32_t n, std::uint8_t fill) {
    return std::vector<std::uint8_t>(n, fill);
}

wire::uplink_grant grant(std::uint16_t user, std::uint64_t slot, std::uint8_t pid, std::uint8_t ndi,
                         std::uint16_t bytes) {
    wire::uplink_grant g;
    g.user = user;
    g.slot = slot;
    g.air_time_ns = static_cast<time_ns>(slot) * kSlotNs;
    g.harq_pid = pid;
    g.ndi = ndi;
    g.tb_bytes = bytes;
    return g;
}

client::station make_station(std::uint16_t user = 0, std::uint32_t buffer = 100) {
    client::station_params p;
    p.user = user;
    p.buffer_packets = buffer;
    return client::station(p);
}

TEST(Station, its_buffer_drops_arrivals_past_the_limit) {
    auto st = make_station(0, 3);
    for (int i = 0; i < 5; ++i) st.on_packet(0, packet(200, 1));
    EXPECT_EQ(st.buffered_packets(), 3u);
    EXPECT_EQ(st.buffered_bytes(), 600u);
    EXPECT_EQ(st.stats().dropped_full, 2u);
}

TEST(Station, a_toggled_ndi_builds_a_new_tb_and_the_same_ndi_repeats_it_byte_for_byte) {
    auto st = make_station(2);
    for (std::uint8_t i = 0; i < 4; ++i) st.on_packet(0, packet(300, i));
    auto a = st.on_grant(0, grant(2, 10, 1, 1, 400));
    ASSERT_TRUE(a);
    EXPECT_EQ(a->tb.size(), 400u);
    EXPECT_EQ(a->slot, 10u);
    EXPECT_EQ(a->harq_pid, 1);
    const auto left = st.buffered_bytes();
    EXPECT_EQ(a->buffer_bytes, left);
    EXPECT_LT(left, 1200u);
    auto again = st.on_grant(0, grant(2, 14, 1, 1, 400));  // same NDI: HARQ retransmission
    ASSERT_TRUE(again);
    EXPECT_EQ(again->tb, a->tb);
    EXPECT_EQ(st.buffered_bytes(), left);
    auto next = st.on_grant(0, grant(2, 18, 1, 0, 400));  // toggled: the next TB
    ASSERT_TRUE(next);
    EXPECT_NE(next->tb, a->tb);
    EXPECT_LT(st.buffered_bytes(), left);
    const auto p = pdu::parse(a->tb);
    const auto q = pdu::parse(next->tb);
    ASSERT_TRUE(p && q);
    EXPECT_EQ(q->header.seq, p->header.seq + 1);
    EXPECT_EQ(st.stats().tbs_new, 2u);
    EXPECT_EQ(st.stats().tbs_repeated, 1u);
}

TEST(Station, grants_for_another_station_a_missing_process_or_no_room_are_refused) {
    auto st = make_station(0);
    st.on_packet(0, packet(100, 1));
    EXPECT_FALSE(st.on_grant(0, grant(1, 5, 0, 1, 400)));  // another station's
    EXPECT_FALSE(st.on_grant(0, grant(0, 5, 8, 1, 400)));  // 8 processes: 0..7
    EXPECT_FALSE(st.on_grant(0, grant(0, 5, 0, 1, 10)));   // no standard PDU fits 10 bytes
    ASSERT_TRUE(st.on_grant(0, grant(0, 6, 0, 1, 400)));
    EXPECT_FALSE(st.on_grant(0, grant(0, 9, 0, 1, 300)));  // a repeat changes no size
    EXPECT_EQ(st.stats().grants_rejected, 4u);
    EXPECT_EQ(st.buffered_packets(), 0u);
}

TEST(Station, reports_its_buffer_when_data_arrives_empty_and_then_periodically) {
    client::station_params p;
    p.status_period = 10 * kNsPerMs;
    client::station st(p);
    EXPECT_FALSE(st.take_status(0));  // nothing buffered, nothing to say
    EXPECT_FALSE(st.next_status_due());
    st.on_packet(1000, packet(500, 1));
    auto s = st.take_status(1000);  // the regular report: data in an empty buffer
    ASSERT_TRUE(s);
    EXPECT_EQ(s->buffer_bytes, 500u);
    EXPECT_EQ(s->buffer_packets, 1u);
    st.on_packet(2000, packet(500, 2));
    EXPECT_FALSE(st.take_status(2000));  // the AP knows it has data: wait for the period
    EXPECT_EQ(*st.next_status_due(), 1000 + 10 * kNsPerMs);
    auto later = st.take_status(1000 + 10 * kNsPerMs);
    ASSERT_TRUE(later);
    EXPECT_EQ(later->buffer_bytes, 1000u);
    // a TB carries the status too: it restarts the period
    auto tb = st.on_grant(5 * kNsPerMs + 1000 + 10 * kNsPerMs, grant(0, 30, 0, 1, 2000));
    ASSERT_TRUE(tb);
    EXPECT_EQ(tb->buffer_bytes, 0u);
    EXPECT_EQ(later->last_grant_slot, 0u);
    st.on_packet(40 * kNsPerMs, packet(100, 3));
    auto s2 = st.take_status(40 * kNsPerMs);  // empty as far as the AP knows: at once
    ASSERT_TRUE(s2);
    EXPECT_EQ(s2->last_grant_slot, 30u);
    EXPECT_EQ(st.stats().status_reports, 3u);
}

// ---- the medium with stations that hold their own queues --------------------------------

struct bed {
    ap::medium m;
    std::vector<client::station> st;
    std::vector<std::vector<std::uint8_t>> got;  // packets the AP released, in order
    time_ns tb_delay = 0;                        // when a station's TB reaches the AP

    static ap::medium make(std::size_t n, double snr_db, double doppler, std::uint32_t max_tx) {
        ap::medium_params p;
        p.mode = ap::medium_mode::node_fair;
        p.queue = ap::station_queue::client;
        p.uplink_mean_snr_db = snr_db;
        p.uplink_doppler_hz = doppler;
        p.lead_slots = kLead;
        p.max_transmissions = max_tx;
        p.seed = 5;
        std::vector<std::string> names;
        for (std::size_t s = 0; s < n; ++s) names.push_back("s" + std::to_string(s));
        const auto t = linkadapt::mcs_table::evdo();
        std::vector<std::uint32_t> tbs;
        for (std::size_t k = 0; k < t.size(); ++k) {
            const auto b = t.bytes_per_slot(static_cast<int>(k), kSlotS);
            tbs.push_back(b >= pdu::min_usable_tb_bytes(pdu::pdu_format::standard) ? b : 0);
        }
        return ap::medium(p, names, t, tbs, pdu::pdu_format::standard, kSlotS);
    }
    explicit bed(std::size_t n, double snr_db = 60.0, double doppler = 0.0,
                 std::uint32_t max_tx = 5, std::uint32_t buffer = 100)
        : m(make(n, snr_db, doppler, max_tx)) {
        for (std::size_t s = 0; s < n; ++s)
            st.push_back(make_station(static_cast<std::uint16_t>(s), buffer));
    }
    // Slot n: its request comes at now = air - lead slots; statuses, the decision, the
    // grant and the station's answer, then what the AP releases by now.
    ap::slot_direction slot(std::uint64_t n, bool ap_backlogged = false) {
        const time_ns air = static_cast<time_ns>(n + kLead) * kSlotNs;
        const time_ns now = air - kLead * kSlotNs;
        for (std::size_t s = 0; s < st.size(); ++s)
            if (auto bs = st[s].take_status(now))
                m.on_buffer_status(now, static_cast<std::uint32_t>(s), *bs);
        const std::vector<bool> down(st.size(), ap_backlogged);
        const auto dir = m.on_slot(n, air, down, std::vector<double>(st.size(), 1e6));
        if (auto g = m.take_station_grant()) {
            EXPECT_EQ(dir, ap::slot_direction::up);
            EXPECT_EQ(g->slot, n);
            EXPECT_EQ(g->air_time_ns, air);
            if (auto tb = st[g->user].on_grant(now, *g))
                m.on_uplink_tb(now + tb_delay, g->user, *tb);
        }
        for (auto& p : m.take_received(now)) got.push_back(std::move(p));
        return dir;
    }
};

TEST(MediumClient, a_station_gets_no_slot_before_its_buffer_status_and_none_once_it_is_empty) {
    bed b(1);
    for (std::uint64_t n = 0; n < 10; ++n) EXPECT_EQ(b.slot(n, true), ap::slot_direction::down);
    b.st[0].on_packet(0, packet(200, 1));  // reported at the next request
    EXPECT_EQ(b.slot(10, true), ap::slot_direction::up);
    for (std::uint64_t n = 11; n < 30; ++n) EXPECT_EQ(b.slot(n, true), ap::slot_direction::down);
    EXPECT_EQ(b.m.station_stats(0).grants, 1u);
    ASSERT_EQ(b.got.size(), 1u);  // released at the end of slot 10's air time
    EXPECT_EQ(b.got[0], packet(200, 1));
}

TEST(MediumClient, packets_cross_in_order_and_node_fair_shares_stay_equal) {
    bed b(3);
    std::size_t sent = 0;
    int up[3] = {0, 0, 0}, down = 0;
    for (std::uint64_t n = 0; n < 3000; ++n) {
        for (std::size_t s : {0u, 2u})  // stations 0 and 2 always have data, 1 never
            while (b.st[s].buffered_packets() < 10) {
                b.st[s].on_packet(0, packet(700, static_cast<std::uint8_t>(sent % 251)));
                ++sent;
            }
        if (b.slot(n, true) == ap::slot_direction::down) ++down;
    }
    for (const auto& r : b.m.take_rows())
        if (r.direction == ap::slot_direction::up) ++up[r.station];
    // after the first statuses, the AP and the two backlogged stations take turns
    EXPECT_NEAR(down, 1000, 2);
    EXPECT_NEAR(up[0], 1000, 2);
    EXPECT_NEAR(up[2], 1000, 2);
    EXPECT_EQ(up[1], 0);
    EXPECT_EQ(b.m.station_stats(0).tbs_late, 0u);
    EXPECT_EQ(b.m.station_stats(0).tbs_failed, 0u);
    // every packet that left its station arrived, intact: station 0's and 2's interleave,
    // each in its own order
    EXPECT_GT(b.got.size(), 1300u);  // 700-byte packets in 512-byte TBs
    for (const auto& p : b.got) EXPECT_EQ(p.size(), 700u);
}

TEST(MediumClient, grants_stop_when_they_cover_the_reported_backlog) {
    bed b(1);
    for (int i = 0; i < 6; ++i) {
        b.st[0].on_packet(0, packet(500, static_cast<std::uint8_t>(i)));
    }
    for (std::uint64_t n = 0; n < 200; ++n) b.slot(n, true);
    ASSERT_EQ(b.got.size(), 6u);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(b.got[i], packet(500, static_cast<std::uint8_t>(i)));
    // as many grants as TBs the data needs: none went out empty, as the AP counted its
    // grants against the station's report
    EXPECT_EQ(b.m.station_stats(0).grants, b.st[0].stats().tbs_new);
    const std::uint32_t tb = b.m.take_rows().front().tb_bytes;
    // standard PDU: 20 bytes a TB and 8 a segment
    std::uint64_t need = 0;
    for (std::uint64_t left = 3000 + 6 * 8; left > 0; ++need)
        left -= std::min<std::uint64_t>(left, tb - 20 - 8);
    EXPECT_LE(b.m.station_stats(0).grants, need + 1);
}

TEST(MediumClient, a_tb_that_misses_its_air_time_is_sent_again_unchanged_and_still_delivered) {
    bed b(1);
    b.tb_delay = (kLead + 1) * kSlotNs;  // every TB arrives after its slot began
    b.st[0].on_packet(0, packet(300, 9));
    for (std::uint64_t n = 0; n < 20; ++n) b.slot(n);
    const auto& s = b.m.station_stats(0);
    EXPECT_EQ(s.tbs_late, 5u);  // each of max_transmissions late
    EXPECT_EQ(s.tbs_ok, 0u);
    EXPECT_EQ(s.tbs_dropped, 1u);
    EXPECT_EQ(b.st[0].stats().tbs_new, 1u);  // the same TB every time (the NDI held)
    EXPECT_EQ(b.st[0].stats().tbs_repeated, 4u);
    for (const auto& r : b.m.take_rows())
        if (r.direction == ap::slot_direction::up) {
            EXPECT_STREQ(r.outcome, r.retx + 1 >= 5 ? "dropped" : "late");
        }
    b.tb_delay = 0;  // now on time
    b.st[0].on_packet(0, packet(300, 10));
    for (std::uint64_t n = 20; n < 60; ++n) b.slot(n);
    ASSERT_EQ(b.got.size(), 1u);
    EXPECT_EQ(b.got.back(), packet(300, 10));
}

TEST(MediumClient, fading_retransmits_by_ndi_and_delivers_all_but_what_harq_gave_up) {
    bed b(1, 6.0, 60.0, 3, 1000);  // 60 Hz: the 4-slot-old CQI misses, some TBs fail
    for (int i = 0; i < 300; ++i) {
        auto pk = packet(300, 0);
        pk[0] = static_cast<std::uint8_t>(i >> 8);
        pk[1] = static_cast<std::uint8_t>(i);
        b.st[0].on_packet(0, pk);
    }
    std::uint64_t n = 0;
    for (; n < 30000 && b.st[0].buffered_bytes() > 0; ++n) b.slot(n);
    for (const std::uint64_t end = n + 64; n < end; ++n) b.slot(n);  // the last results
    const auto& s = b.m.station_stats(0);
    EXPECT_GT(s.tbs_failed, 0u);
    EXPECT_GT(s.tbs_ok, s.tbs_failed);
    EXPECT_EQ(b.got.size(), s.delivered);
    EXPECT_EQ(b.st[0].stats().tbs_repeated, s.tbs_failed - s.tbs_dropped);
    if (s.tbs_dropped == 0) {
        EXPECT_EQ(b.got.size(), 300u);
    }
    EXPECT_EQ(b.st[0].stats().dropped_full, 0u);
    EXPECT_GT(b.got.size(), 250u);
    int last = -1;  // what arrived did so in the order it was sent
    for (const auto& p : b.got) {
        const int i = p[0] << 8 | p[1];
        EXPECT_GT(i, last);
        last = i;
    }
}

TEST(MediumClient, messages_for_no_outstanding_grant_are_ignored_and_counted) {
    bed b(1);
    wire::uplink_tb tb;
    tb.slot = 5;
    tb.tb = packet(100, 0);
    EXPECT_FALSE(b.m.on_uplink_tb(0, 0, tb));
    EXPECT_EQ(b.m.station_stats(0).tbs_unexpected, 1u);
    EXPECT_FALSE(b.m.on_uplink_tb(0, 7, tb));  // no such station
}

TEST(MediumClient, with_the_phy_a_tb_in_time_becomes_the_phys_grant_and_its_report_decides) {
    ap::medium_params p;
    p.mode = ap::medium_mode::node_fair;
    p.queue = ap::station_queue::client;
    p.decode = ap::uplink_decode::phy;
    p.lead_slots = kLead;
    const auto t = linkadapt::mcs_table::evdo();
    std::vector<std::uint32_t> tbs;
    for (std::size_t k = 0; k < t.size(); ++k) {
        const auto b = t.bytes_per_slot(static_cast<int>(k), kSlotS);
        tbs.push_back(b >= pdu::min_usable_tb_bytes(pdu::pdu_format::standard) ? b : 0);
    }
    ap::medium m(p, {"s0"}, t, tbs, pdu::pdu_format::standard, kSlotS);
    auto st = make_station(0);
    st.on_packet(0, packet(100, 7));
    m.on_buffer_status(0, 0, *st.take_status(0));
    wire::rx_indication sounding;  // the AP's receiver measures the station's uplink
    sounding.slot = 0;
    sounding.snr_db = 30.0f;
    m.on_uplink_rx(0, 0, sounding);
    const time_ns air = (1 + kLead) * kSlotNs;
    ASSERT_EQ(m.on_slot(1, air, {false}, {0.0}), ap::slot_direction::up);
    EXPECT_FALSE(m.take_uplink_grant());  // the PHY's grant waits for the station's TB
    const auto g = m.take_station_grant();
    ASSERT_TRUE(g);
    const auto tb = st.on_grant(kSlotNs, *g);
    ASSERT_TRUE(tb);
    ASSERT_TRUE(m.on_uplink_tb(2 * kSlotNs, 0, *tb));
    const auto pg = m.take_uplink_grant();
    ASSERT_TRUE(pg);
    EXPECT_TRUE(pg->uplink);
    EXPECT_EQ(pg->slot, 1u);
    EXPECT_EQ(pg->tb, tb->tb);
    EXPECT_EQ(pg->ndi, g->ndi);
    EXPECT_EQ(pg->rv, g->rv);
    EXPECT_TRUE(m.take_received(air + kSlotNs).empty());  // nothing before the report
    wire::rx_indication rx;                               // the AP's receiver decoded it
    rx.slot = 1;
    rx.user = 0;
    rx.harq_pid = g->harq_pid;
    rx.header_ok = rx.addressed = rx.crc_ok = true;
    rx.snr_db = 30.0f;
    rx.tb = pg->tb;
    m.on_uplink_rx(air + kSlotNs, 0, rx);
    const auto got = m.take_received(air + kSlotNs);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0], packet(100, 7));
    EXPECT_EQ(m.station_stats(0).tbs_ok, 1u);
    // a TB that never came: no PHY grant; the AP's receiver hears nobody -> a NACK
    st.on_packet(0, packet(100, 8));
    m.on_buffer_status(0, 0, *st.take_status(100 * kSlotNs));
    ASSERT_EQ(m.on_slot(2, air + kSlotNs, {false}, {0.0}), ap::slot_direction::up);
    const auto g2 = m.take_station_grant();
    ASSERT_TRUE(g2);
    wire::rx_indication nobody;
    nobody.slot = 2;
    nobody.header_ok = true;
    nobody.user = wire::kUserNobody;
    nobody.snr_db = 30.0f;
    m.on_uplink_rx(air + 2 * kSlotNs, 0, nobody);
    EXPECT_EQ(m.station_stats(0).missed, 1u);
    EXPECT_EQ(m.station_stats(0).tbs_failed, 1u);
}

}  // namespace
}  // namespace oppsched
