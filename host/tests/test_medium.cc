// The shared medium (medium.h): node_fair's equal shares, scheduled, the uplink queue and
// transmissions. Time is passed in explicitly (a fake clock), channels are seeded.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "oppsched/linkadapt.h"
#include "oppsched/medium.h"
#include "oppsched/pdu.h"
#include "oppsched/sched.h"

namespace oppsched::ap {
namespace {

constexpr double kSlotS = 1.667e-3;
constexpr time_ns kSlotNs = 1'667'000;

std::vector<std::uint32_t> tb_sizes(const linkadapt::mcs_table& t) {
    std::vector<std::uint32_t> out;
    for (std::size_t m = 0; m < t.size(); ++m) {
        const auto b = t.bytes_per_slot(static_cast<int>(m), kSlotS);
        out.push_back(b >= pdu::min_usable_tb_bytes(pdu::pdu_format::standard) ? b : 0);
    }
    return out;
}

medium make(medium_mode mode, std::size_t stations, double snr_db = 60.0,
            std::uint32_t buffer = 100) {
    medium_params p;
    p.mode = mode;
    p.uplink_mean_snr_db = snr_db;
    p.uplink_doppler_hz = 0.0;  // a constant channel per station
    p.station_buffer_packets = buffer;
    p.seed = 7;
    std::vector<std::string> names;
    for (std::size_t s = 0; s < stations; ++s) names.push_back("s" + std::to_string(s));
    const auto table = linkadapt::mcs_table::evdo();
    return medium(p, names, table, tb_sizes(table), pdu::pdu_format::standard, kSlotS);
}

std::vector<std::uint8_t> packet(std::uint32_t n, std::uint8_t fill) {
    return std::vector<std::uint8_t>(n, fill);
}

// Keeps `station`'s uplink queue at least `depth` packets deep.
void top_up(medium& m, std::uint32_t station, std::size_t depth, time_ns now) {
    while (m.queued_packets(station) < depth) m.on_uplink_packet(now, station, packet(1500, 1));
}

TEST(Medium, node_fair_gives_the_ap_and_each_backlogged_station_equal_shares) {
    medium m = make(medium_mode::node_fair, 4);
    std::map<int, int> slots;  // -1: the AP
    const std::vector<bool> down = {true, false, false, true};
    const std::vector<double> rates(4, 1e6);
    for (std::uint64_t n = 0; n < 3000; ++n) {
        top_up(m, 0, 10, static_cast<time_ns>(n) * kSlotNs);
        top_up(m, 2, 10, static_cast<time_ns>(n) * kSlotNs);
        m.on_slot(n, static_cast<time_ns>(n) * kSlotNs, down, rates);
    }
    for (const auto& r : m.take_rows()) ++slots[r.direction == slot_direction::up ? r.station : -1];
    // AP, station 0 and station 2 contend in every slot: 1000 each, exactly.
    EXPECT_EQ(slots[-1], 1000);
    EXPECT_EQ(slots[0], 1000);
    EXPECT_EQ(slots[2], 1000);
    EXPECT_EQ(slots.count(1), 0u);  // idle stations get none
    EXPECT_EQ(slots.count(3), 0u);
    EXPECT_EQ(m.stats().slots_up, 2000u);
    EXPECT_NEAR(m.gauges()[0].second, 1.0 / 3.0, 1e-9);  // share.down
}

TEST(Medium, node_fair_gives_the_ap_every_slot_when_no_station_has_backlog) {
    medium m = make(medium_mode::node_fair, 3);
    for (std::uint64_t n = 0; n < 100; ++n)
        EXPECT_EQ(m.on_slot(n, 0, {true, true, true}, {1e6, 1e6, 1e6}), slot_direction::down);
    EXPECT_EQ(m.stats().slots_down, 100u);
}

TEST(Medium, node_fair_shares_among_stations_when_the_ap_has_no_backlog) {
    medium m = make(medium_mode::node_fair, 2);
    int up0 = 0, up1 = 0;
    for (std::uint64_t n = 0; n < 200; ++n) {
        top_up(m, 0, 5, 0);
        top_up(m, 1, 5, 0);
        m.on_slot(n, 0, {false, false}, {1e6, 1e6});
    }
    for (const auto& r : m.take_rows()) {
        ASSERT_EQ(r.direction, slot_direction::up);
        (r.station == 0 ? up0 : up1)++;
    }
    EXPECT_EQ(up0, 100);
    EXPECT_EQ(up1, 100);
}

TEST(Medium, none_makes_every_slot_downlink_and_records_nothing) {
    medium m = make(medium_mode::none, 2);
    for (std::uint64_t n = 0; n < 50; ++n)
        EXPECT_EQ(m.on_slot(n, 0, {false, false}, {0.0, 0.0}), slot_direction::down);
    EXPECT_TRUE(m.take_rows().empty());
    EXPECT_EQ(m.stats().slots_down, 50u);
    EXPECT_EQ(m.stats().slots_up, 0u);
}

TEST(Medium, uplink_packets_cross_intact_in_order_at_the_end_of_their_slot) {
    medium m = make(medium_mode::node_fair, 1);
    for (std::uint8_t i = 0; i < 20; ++i) m.on_uplink_packet(0, 0, packet(100 + i, i));
    std::vector<std::vector<std::uint8_t>> got;
    time_ns air = 10 * kSlotNs;
    for (std::uint64_t n = 10; n < 400 && got.size() < 20; ++n, air += kSlotNs) {
        ASSERT_EQ(m.on_slot(n, air, {false}, {0.0}), slot_direction::up);
        // Nothing is released before the slot's air time has ended.
        EXPECT_TRUE(m.take_received(air + kSlotNs - 1).empty());
        for (auto& p : m.take_received(air + kSlotNs)) got.push_back(std::move(p));
    }
    ASSERT_EQ(got.size(), 20u);
    for (std::uint8_t i = 0; i < 20; ++i) EXPECT_EQ(got[i], packet(100 + i, i));
    EXPECT_EQ(m.station_stats(0).delivered, 20u);
    EXPECT_FALSE(m.uplink_backlogged(0));
}

TEST(Medium, station_buffer_drops_arrivals_past_its_limit) {
    medium m = make(medium_mode::node_fair, 1, 60.0, 3);
    for (int i = 0; i < 5; ++i) m.on_uplink_packet(0, 0, packet(200, 1));
    EXPECT_EQ(m.queued_packets(0), 3u);
    EXPECT_EQ(m.station_stats(0).dropped_full, 2u);
}

TEST(Medium, a_station_without_a_usable_mcs_does_not_contend) {
    medium m = make(medium_mode::node_fair, 1, -40.0);
    top_up(m, 0, 5, 0);
    for (std::uint64_t n = 0; n < 20; ++n)
        EXPECT_EQ(m.on_slot(n, 0, {true}, {1e6}), slot_direction::down);
}

TEST(Medium, fading_uplink_retransmits_failed_tbs_and_loses_only_what_harq_gave_up) {
    medium_params p;
    p.mode = medium_mode::node_fair;
    p.uplink_mean_snr_db = 6.0;
    p.uplink_doppler_hz = 60.0;  // CQI 4 slots old at 60 Hz: some TBs fail
    p.seed = 3;
    const auto table = linkadapt::mcs_table::evdo();
    medium m(p, {"a"}, table, tb_sizes(table), pdu::pdu_format::standard, kSlotS);
    for (int i = 0; i < 200; ++i) m.on_uplink_packet(0, 0, packet(300, 2));
    std::size_t got = 0;
    for (std::uint64_t n = 0; n < 20000 && m.uplink_backlogged(0); ++n) {
        m.on_slot(n, static_cast<time_ns>(n) * kSlotNs, {false}, {0.0});
        got += m.take_received(static_cast<time_ns>(n + 1) * kSlotNs).size();
    }
    const auto& s = m.station_stats(0);
    EXPECT_GT(s.tbs_failed, 0u);
    EXPECT_GT(s.tbs_ok, s.tbs_failed);
    EXPECT_EQ(got, s.delivered);
    EXPECT_LE(got, 200u);
    if (s.tbs_dropped == 0) {
        EXPECT_EQ(got, 200u);  // nothing lost without a HARQ give-up
    }
    int retx_rows = 0;
    for (const auto& r : m.take_rows())
        if (r.retx > 0) ++retx_rows;
    EXPECT_GT(retx_rows, 0);
}

TEST(Medium, scheduled_splits_slots_between_equal_rate_downlink_and_uplink) {
    medium m = make(medium_mode::scheduled, 1);
    int up = 0, down = 0;
    const std::vector<double> rates = {2.4576e6};  // evdo's top rate, as the uplink's at 60 dB
    for (std::uint64_t n = 0; n < 2000; ++n) {
        top_up(m, 0, 5, 0);
        (m.on_slot(n, 0, {true}, rates) == slot_direction::up ? up : down)++;
    }
    EXPECT_NEAR(up, 1000, 50);
    EXPECT_NEAR(down, 1000, 50);
}

// The medium's policies are the scheduler family's (sched.h): the same decisions, slot by
// slot, as sched.h's pf over the 2N links (averages initialised at R/2N, not 1 bit/s; ties to
// the least recently served link, not the lowest index).
TEST(Medium, scheduled_decides_as_sched_h_pf_over_the_downlink_and_uplink_links) {
    medium m = make(medium_mode::scheduled, 1);
    auto pf = sched::make_scheduler({2, sched::pf_params{medium_params{}.pf_alpha}});
    const double down = 1.2288e6, up = 2.4576e6;  // evdo's top rate: the uplink's at 60 dB
    int ups = 0, contended = 0;
    for (std::uint64_t n = 0; n < 400; ++n) {
        top_up(m, 0, 5, 0);
        const auto dir = m.on_slot(n, 0, {true}, {down});
        const auto rows = m.take_rows();
        ASSERT_EQ(rows.size(), 1u);
        const bool up_contends = rows[0].contenders == 2;
        contended += up_contends;
        const int want = pf->step({down, up_contends ? up : 0.0}, {true, up_contends});
        ASSERT_EQ(dir == slot_direction::up, want == 1) << "slot " << n;
        ups += dir == slot_direction::up;
    }
    EXPECT_GT(contended, 390);
    EXPECT_GT(ups, 100);  // both links are served
    EXPECT_LT(ups, 300);
}

// ---- uplink_decode phy: the PHY's receiver decides (fake reports, explicit slots) ----

medium make_phy(medium_mode mode, std::size_t stations, std::uint32_t max_tx = 3) {
    medium_params p;
    p.mode = mode;
    p.decode = uplink_decode::phy;
    p.max_transmissions = max_tx;
    p.olla_enabled = false;  // the MCS follows the reported SNR alone
    p.seed = 7;
    std::vector<std::string> names;
    for (std::size_t s = 0; s < stations; ++s) names.push_back("s" + std::to_string(s));
    const auto table = linkadapt::mcs_table::evdo();
    return medium(p, names, table, tb_sizes(table), pdu::pdu_format::standard, kSlotS);
}

// What the AP's receiver for `station` reports for `slot`: heard addressed to the station
// (the grant's fields, CRC as given, the decoded bytes when it passed), or not addressed.
wire::rx_indication report(std::uint64_t slot, const wire::slot_grant* g, bool crc_ok,
                           float snr_db = 30.0f) {
    wire::rx_indication r;
    r.slot = slot;
    r.header_ok = true;
    r.snr_db = snr_db;
    r.user = wire::kUserNobody;
    if (g) {
        r.user = g->user;
        r.addressed = true;
        r.mcs = g->mcs;
        r.harq_pid = g->harq_pid;
        r.ndi = g->ndi;
        r.rv = g->rv;
        r.crc_ok = crc_ok;
        if (crc_ok) r.tb = g->tb;
    }
    return r;
}

TEST(MediumPhy, a_station_contends_only_once_the_ap_has_measured_its_uplink) {
    medium m = make_phy(medium_mode::node_fair, 1);
    top_up(m, 0, 5, 0);
    EXPECT_EQ(m.on_slot(0, 0, {false}, {0.0}), slot_direction::down);  // no CQI yet
    EXPECT_FALSE(m.take_uplink_grant().has_value());
    ASSERT_TRUE(m.on_uplink_rx(0, 0, report(0, nullptr, false)));  // the sounding
    EXPECT_EQ(m.on_slot(1, 0, {false}, {0.0}), slot_direction::up);
}

TEST(MediumPhy, the_grant_carries_the_station_tb_and_an_ack_delivers_the_decoded_packets) {
    medium m = make_phy(medium_mode::node_fair, 2);
    m.on_uplink_rx(0, 1, report(0, nullptr, false));
    for (std::uint8_t i = 0; i < 3; ++i) m.on_uplink_packet(0, 1, packet(60 + i, i));
    ASSERT_EQ(m.on_slot(5, 5 * kSlotNs, {false, false}, {0.0, 0.0}), slot_direction::up);
    const auto g = m.take_uplink_grant();
    ASSERT_TRUE(g.has_value());
    EXPECT_FALSE(m.take_uplink_grant().has_value());  // once
    EXPECT_TRUE(g->uplink);
    EXPECT_FALSE(g->empty);
    EXPECT_EQ(g->slot, 5u);
    EXPECT_EQ(g->user, 1);
    EXPECT_EQ(g->rv, 0);
    EXPECT_EQ(g->ndi, 1);  // toggled for the process's first TB
    EXPECT_EQ(g->tb.size(), tb_sizes(linkadapt::mcs_table::evdo())[g->mcs]);
    EXPECT_TRUE(m.take_rows().empty());  // the slot's row waits for its result
    EXPECT_TRUE(m.take_received(100 * kSlotNs).empty());
    m.on_uplink_rx(7 * kSlotNs, 1, report(5, &*g, true, 28.5f));
    const auto got = m.take_received(7 * kSlotNs);
    ASSERT_EQ(got.size(), 3u);
    for (std::uint8_t i = 0; i < 3; ++i) EXPECT_EQ(got[i], packet(60 + i, i));
    const auto rows = m.take_rows();
    ASSERT_EQ(rows.size(), 1u);
    EXPECT_STREQ(rows[0].outcome, "ack");
    EXPECT_STREQ(rows[0].decoded_by, "phy");
    EXPECT_EQ(rows[0].station, 1);
    EXPECT_DOUBLE_EQ(rows[0].snr_db, 28.5);  // the AP's measurement
    EXPECT_EQ(m.station_stats(1).tbs_ok, 1u);
}

TEST(MediumPhy, a_failed_crc_retransmits_the_same_tb_with_the_next_rv_until_max_then_drops) {
    medium m = make_phy(medium_mode::node_fair, 1, 3);
    m.on_uplink_rx(0, 0, report(0, nullptr, false));
    m.on_uplink_packet(0, 0, packet(100, 9));  // one TB
    std::vector<wire::slot_grant> sent;
    for (std::uint64_t n = 1; n <= 3; ++n) {
        ASSERT_EQ(m.on_slot(n, 0, {false}, {0.0}), slot_direction::up) << n;
        sent.push_back(*m.take_uplink_grant());
        m.on_uplink_rx(0, 0, report(n, &sent.back(), false));
    }
    EXPECT_EQ(sent[0].tb, sent[1].tb);
    EXPECT_EQ(sent[1].tb, sent[2].tb);
    EXPECT_EQ(sent[0].harq_pid, sent[2].harq_pid);
    EXPECT_EQ(sent[0].ndi, sent[2].ndi);  // the same TB: the receiver combines
    EXPECT_EQ(sent[0].rv, 0);
    EXPECT_EQ(sent[1].rv, 2);
    EXPECT_EQ(sent[2].rv, 3);
    const auto rows = m.take_rows();
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_STREQ(rows[0].outcome, "nack");
    EXPECT_STREQ(rows[1].outcome, "nack");
    EXPECT_STREQ(rows[2].outcome, "dropped");
    EXPECT_EQ(rows[2].retx, 2);
    EXPECT_TRUE(m.take_received(1'000'000'000).empty());
    EXPECT_FALSE(m.uplink_backlogged(0));  // given up: nothing left to send
    EXPECT_EQ(m.station_stats(0).tbs_dropped, 1u);
}

TEST(MediumPhy, a_slot_the_receiver_did_not_hear_or_never_reported_is_a_nack) {
    medium m = make_phy(medium_mode::node_fair, 1, 5);
    m.on_uplink_rx(0, 0, report(0, nullptr, false));
    top_up(m, 0, 40, 0);
    ASSERT_EQ(m.on_slot(1, 0, {false}, {0.0}), slot_direction::up);
    const auto g1 = *m.take_uplink_grant();
    // The receiver's next report is of slot 2: slot 1's header was never heard.
    m.on_uplink_rx(0, 0, report(2, nullptr, false));
    ASSERT_EQ(m.on_slot(3, 0, {false}, {0.0}), slot_direction::up);
    const auto g3 = *m.take_uplink_grant();
    EXPECT_EQ(g3.tb, g1.tb);  // sent again
    EXPECT_EQ(g3.harq_pid, g1.harq_pid);
    // No report at all: a NACK after feedback_timeout_slots (100).
    std::uint64_t n = 4;
    for (; n < 200; ++n) {
        m.on_slot(n, 0, {false}, {0.0});
        m.take_uplink_grant();
    }
    const auto rows = m.take_rows();
    ASSERT_GE(rows.size(), 2u);
    EXPECT_STREQ(rows[0].outcome, "missed");
    EXPECT_STREQ(rows[1].outcome, "timeout");
    EXPECT_EQ(m.station_stats(0).missed, 1u);
    EXPECT_GE(m.station_stats(0).timeouts, 1u);
}

TEST(MediumPhy, node_fair_shares_stay_equal_while_results_come_lead_slots_late) {
    // The AP and one station always backlogged; each uplink result arrives 6 slots after its
    // slot (grant lead + air time + decoding). Several HARQ processes keep the station
    // contending meanwhile, so the shares stay 1/2 each.
    medium m = make_phy(medium_mode::node_fair, 1);
    m.on_uplink_rx(0, 0, report(0, nullptr, false));
    std::deque<std::pair<std::uint64_t, wire::slot_grant>> in_flight;
    int up = 0, down = 0;
    std::size_t delivered = 0;
    for (std::uint64_t n = 1; n <= 2000; ++n) {
        top_up(m, 0, 20, 0);
        while (!in_flight.empty() && in_flight.front().first + 6 <= n) {
            const auto& f = in_flight.front();
            m.on_uplink_rx(0, 0, report(f.second.slot, &f.second, true));
            in_flight.pop_front();
        }
        if (m.on_slot(n, 0, {true}, {1e6}) == slot_direction::up) {
            ++up;
            in_flight.emplace_back(n, *m.take_uplink_grant());
        } else {
            ++down;
        }
        delivered += m.take_received(0).size();
    }
    EXPECT_EQ(up, 1000);
    EXPECT_EQ(down, 1000);
    EXPECT_GT(delivered, 0u);
    std::uint64_t last = 0;
    for (const auto& r : m.take_rows()) {  // in slot order, every uplink row decided by the PHY
        EXPECT_GE(r.slot, last);
        last = r.slot;
        if (r.direction == slot_direction::up) {
            EXPECT_STREQ(r.decoded_by, "phy");
        }
    }
}

TEST(MediumPhy, reports_are_ignored_in_model_mode_and_for_unknown_stations) {
    medium model = make(medium_mode::node_fair, 1);
    EXPECT_FALSE(model.on_uplink_rx(0, 0, report(0, nullptr, false)));
    medium m = make_phy(medium_mode::node_fair, 1);
    EXPECT_FALSE(m.on_uplink_rx(0, 5, report(0, nullptr, false)));
}

TEST(Medium, invalid_params_name_the_key) {
    medium_params p;
    p.station_buffer_packets = 0;
    try {
        p.validate();
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_NE(std::string(e.what()).find("medium.station_buffer_packets: 0"),
                  std::string::npos);
    }
    EXPECT_EQ(medium_mode_from("node_fair"), medium_mode::node_fair);
    EXPECT_FALSE(medium_mode_from("dcf").has_value());
}

}  // namespace
}  // namespace oppsched::ap
