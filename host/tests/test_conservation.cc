// The AP's conservation law (oppsched/packet_ledger.h): every packet offered to a queue is
// delivered, dropped with a cause, queued or in flight, in the counters and in packets.csv,
// under random feedback (ACK, NACK, none: HARQ timeouts), late grants, queue overflow and PHY
// restarts; and the ledger's own rules for packets split across TBs.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>

#include "oppsched/ap_core.h"
#include "oppsched/packet_ledger.h"

namespace oppsched::ap {
namespace {

pdu::tb_record tb(std::initializer_list<pdu::segment_record> segs) {
    pdu::tb_record r;
    r.segments = segs;
    return r;
}
// Packet `id` of `len` bytes, bytes [off, off + n).
pdu::segment_record seg(std::uint64_t id, std::uint16_t len, std::uint16_t off, std::uint16_t n) {
    return pdu::segment_record{id, 0, len, off, n};
}

std::vector<std::uint8_t> ipv4_to(std::uint8_t host, std::size_t size) {
    std::vector<std::uint8_t> p(size, 0xab);
    p[0] = 0x45;
    p[1] = 0;
    p[2] = static_cast<std::uint8_t>(size >> 8);
    p[3] = static_cast<std::uint8_t>(size);
    p[8] = 64;
    p[9] = 253;
    p[12] = 10, p[13] = 9, p[14] = 9, p[15] = 9;
    p[16] = 10, p[17] = 0, p[18] = 0, p[19] = host;
    return p;
}

}  // namespace

TEST(packet_ledger, a_packet_is_delivered_when_every_tb_carrying_it_is_acked) {
    packet_ledger l;
    const auto a = tb({seg(1, 100, 0, 60)});
    const auto b = tb({seg(1, 100, 60, 40), seg(2, 10, 0, 10)});
    EXPECT_TRUE(l.on_tb_built(a, {{1, 100}}).empty());
    EXPECT_TRUE(l.on_tb_built(b, {{2, 10}}).empty());
    EXPECT_EQ(l.in_flight(), 2u);
    EXPECT_TRUE(l.on_tb_done(a, tb_fate::acked).empty());  // packet 1 still half in flight
    const auto f = l.on_tb_done(b, tb_fate::acked);
    ASSERT_EQ(f.size(), 2u);
    EXPECT_TRUE(f[0].delivered && f[1].delivered);
    EXPECT_EQ(l.stats().delivered, 2u);
    EXPECT_EQ(l.in_flight(), 0u);
}

TEST(packet_ledger, a_packet_split_across_lost_tbs_is_dropped_once_with_the_first_cause) {
    packet_ledger l;
    const auto a = tb({seg(1, 100, 0, 60)});
    const auto b = tb({seg(1, 100, 60, 40)});
    l.on_tb_built(a, {{1, 100}});
    l.on_tb_built(b, {});
    const auto f = l.on_tb_done(a, tb_fate::timed_out);
    ASSERT_EQ(f.size(), 1u);
    EXPECT_FALSE(f[0].delivered);
    EXPECT_EQ(f[0].cause, loss_cause::harq_timeout);
    EXPECT_TRUE(l.on_tb_done(b, tb_fate::dropped_max_tx).empty());  // already dropped
    EXPECT_TRUE(l.on_tb_done(b, tb_fate::acked).empty());           // finished twice: nothing
    EXPECT_EQ(l.stats().dropped[static_cast<std::size_t>(loss_cause::harq_timeout)], 1u);
    EXPECT_EQ(l.stats().dropped_total(), 1u);
    EXPECT_EQ(l.stats().delivered, 0u);
    EXPECT_EQ(l.in_flight(), 0u);
}

TEST(packet_ledger, a_pulled_packet_the_tb_does_not_carry_is_dropped_as_rejected) {
    packet_ledger l;
    const auto f = l.on_tb_built(tb({seg(2, 10, 0, 10)}), {{1, 70000}, {2, 10}});
    ASSERT_EQ(f.size(), 1u);
    EXPECT_EQ(f[0].packet_id, 1u);
    EXPECT_EQ(f[0].bytes, 70000u);
    EXPECT_EQ(f[0].cause, loss_cause::rejected);
    EXPECT_EQ(to_string(loss_cause::harq_flush), "harq_flush");
}

// Random downlink traffic into a small queue (overflow), random feedback: ACK, NACK or none
// (HARQ timeout), CQI reports for slots whose feedback never comes (the late-grant path), and
// PHY restarts. After every step nothing is unaccounted, and at the end packets.csv gives each
// offered packet one fate or none (queued, in flight), agreeing with the counters. Returns
// the drops by cause.
static std::map<std::string, int> fault_mix(aqm::algorithm_params algorithm) {
    ap_core_params p;
    p.users = {{"ue0", {"10.0.0.1"}, {}, {}}, {"ue1", {"10.0.0.2"}, {}, {}}};
    p.table =
        linkadapt::mcs_table("test", {{"low", 0.0, 100e3, 0, 0.0}, {"high", 10.0, 400e3, 0, 0.0}});
    p.slot_s = 0.01;
    p.lead_slots = 2;
    p.harq.num_processes = 4;
    p.harq.max_transmissions = 3;
    p.harq.feedback_delay_slots = 1;
    p.harq.feedback_timeout_slots = 8;
    p.aqm.params = algorithm;
    p.aqm.limits = {0, 20};
    p.record_packets = true;
    ap_core ap(p);
    std::mt19937_64 rng(2024);
    std::map<std::uint64_t, int> fates;  // packet id -> terminal rows
    std::set<std::uint64_t> offered;
    std::map<std::string, int> causes;
    auto drain = [&] {
        for (const auto& r : ap.take_packet_records()) {
            const std::string ev = r.event;
            if (ev == "enqueue") offered.insert(r.packet_id);
            if (ev == "deliver" || ev == "drop") {
                ++fates[r.packet_id];
                if (ev == "drop") {
                    EXPECT_FALSE(r.reason.empty()) << r.packet_id;
                    ++causes[r.reason];
                }
            }
        }
    };
    std::uint64_t slot = 0;
    for (int step = 0; step < 4000; ++step, ++slot) {
        const time_ns now = static_cast<time_ns>(step) * 10'000'000;
        const int arrivals = static_cast<int>(rng() % 4);
        for (int i = 0; i < arrivals; ++i)
            ap.on_downlink_packet(
                now, ipv4_to(static_cast<std::uint8_t>(1 + rng() % 2), 40 + rng() % 300));
        if (rng() % 500 == 0) {
            ap.on_phy_restart();
            slot = 0;
        }
        const auto g = ap.on_slot_request(now, slot, now + 20'000'000);
        if (!g.empty) {
            const auto r = rng() % 10;
            if (r < 6) {
                ap.on_harq_feedback(g.user, slot, g.harq_pid, true);
            } else if (r < 8) {
                ap.on_harq_feedback(g.user, slot, g.harq_pid, false);
            } else if (r < 9) {
                ap.on_cqi(g.user, slot, 12.0, 10);  // heard, no feedback: a late grant's slot
            }                                       // else nothing: the TB times out
        }
        if (rng() % 3 == 0) ap.on_cqi(static_cast<std::uint32_t>(rng() % 2), slot, 12.0, 10);
        EXPECT_EQ(ap.unaccounted_packets(), 0) << "step " << step;
        if (ap.unaccounted_packets() != 0) break;
        drain();
    }
    drain();
    for (const auto& [id, n] : fates)
        EXPECT_EQ(n, 1) << "packet " << id << " has " << n << " fates";
    std::uint64_t pending = 0;
    for (const auto id : offered) pending += fates.count(id) ? 0 : 1;
    std::map<std::string, std::uint64_t> c;
    for (const auto& [k, v] : ap.counters()) c[k] = v;
    EXPECT_EQ(c["conservation.offered"], offered.size());
    EXPECT_EQ(pending, c["conservation.queued"] + c["conservation.in_flight"]);
    EXPECT_GT(c["conservation.delivered"], 1000u);
    // HARQ losses, whatever the AQM, under their causes.
    EXPECT_GT(causes["harq_max_tx"], 0);
    EXPECT_GT(causes["harq_timeout"], 0);
    return causes;
}

TEST(ap_core, every_offered_packet_is_delivered_dropped_with_a_cause_queued_or_in_flight) {
    const auto causes = fault_mix(aqm::drop_tail_params{});
    EXPECT_GT(causes.at("overflow"), 0);
}

TEST(ap_core, conservation_holds_with_red_early_drops_and_codel_dequeue_drops) {
    fault_mix(aqm::red_params{});
    fault_mix(aqm::codel_params{});
}

}  // namespace oppsched::ap
