// The AP's TBs in HARQ and what each HARQ event means for them (oppsched/held_tbs.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "oppsched/held_tbs.h"

namespace oppsched::ap {
namespace {

using harq::event_kind;

pdu::segment_record seg(std::uint64_t packet_id, std::uint16_t len, std::uint16_t offset) {
    pdu::segment_record s;
    s.packet_id = packet_id;
    s.packet_len = len;
    s.offset = offset;
    s.seg_len = static_cast<std::uint16_t>(len - offset);
    return s;
}

held_tbs with_one_tb(std::uint64_t id = 7, int mcs = 3) {
    held_tbs h;
    held_tb tb;
    tb.user = 1;
    tb.mcs = mcs;
    tb.bytes = {1, 2, 3};
    tb.record.segments = {seg(10, 100, 50), seg(11, 80, 0), seg(10, 100, 0)};
    h.add(id, tb);
    return h;
}

harq::harq_event event(event_kind k, std::uint64_t id = 7) {
    harq::harq_event ev;
    ev.kind = k;
    ev.user = 1;
    ev.process = 2;
    ev.tb.id = id;
    return ev;
}

TEST(HeldTbs, when_acked_then_olla_sees_a_success_at_the_tbs_mcs_and_the_tb_is_forgotten) {
    held_tbs h = with_one_tb(7, 3);
    const auto e = h.on_event(event(event_kind::acked));
    EXPECT_STREQ(e.outcome, "ack");
    EXPECT_TRUE(e.olla_observed);
    EXPECT_TRUE(e.olla_success);
    EXPECT_EQ(e.mcs, 3);
    EXPECT_EQ(h.size(), 0u);
}

TEST(HeldTbs, when_nacked_then_the_tb_is_kept_for_its_retransmission) {
    held_tbs h = with_one_tb();
    const auto e = h.on_event(event(event_kind::nacked));
    EXPECT_STREQ(e.outcome, "nack");
    EXPECT_TRUE(e.olla_observed);
    EXPECT_FALSE(e.olla_success);
    EXPECT_EQ(h.size(), 1u);
    EXPECT_EQ(h.at(7).bytes.size(), 3u);
}

TEST(HeldTbs, when_dropped_after_max_transmissions_then_each_carried_packet_is_dropped_once) {
    held_tbs h = with_one_tb();
    const auto e = h.on_event(event(event_kind::dropped_max_tx));
    EXPECT_STREQ(e.outcome, "dropped");
    EXPECT_TRUE(e.tb_dropped);
    ASSERT_EQ(e.dropped.size(), 2u);
    EXPECT_EQ(e.dropped[0].packet_id, 10u);
    EXPECT_EQ(e.dropped[0].packet_len, 100u);
    EXPECT_EQ(e.dropped[1].packet_id, 11u);
    EXPECT_EQ(h.size(), 0u);
}

TEST(HeldTbs, when_not_received_then_olla_sees_a_failure_and_the_tb_stays) {
    held_tbs h = with_one_tb();
    const auto e = h.on_event(event(event_kind::not_received));
    EXPECT_STREQ(e.outcome, "unheard");
    EXPECT_TRUE(e.olla_observed);
    EXPECT_FALSE(e.olla_success);
    EXPECT_EQ(h.size(), 1u);
}

TEST(HeldTbs, when_timed_out_or_flushed_then_the_row_says_timeout_and_the_tb_is_forgotten) {
    for (const auto k : {event_kind::timed_out, event_kind::flushed}) {
        held_tbs h = with_one_tb();
        const auto e = h.on_event(event(k));
        EXPECT_STREQ(e.outcome, "timeout");
        EXPECT_TRUE(e.timed_out);
        EXPECT_FALSE(e.olla_observed);
        EXPECT_EQ(h.size(), 0u);
    }
}

TEST(HeldTbs, when_feedback_is_stale_or_the_tb_unknown_then_nothing_but_the_count_changes) {
    held_tbs h = with_one_tb();
    const auto stale = h.on_event(event(event_kind::stale_feedback));
    EXPECT_TRUE(stale.stale);
    EXPECT_EQ(stale.outcome, nullptr);
    const auto unknown = h.on_event(event(event_kind::dropped_max_tx, 99));
    EXPECT_STREQ(unknown.outcome, "dropped");  // the row is resolved all the same
    EXPECT_FALSE(unknown.olla_observed);
    EXPECT_FALSE(unknown.tb_dropped);
    EXPECT_EQ(h.size(), 1u);
}

}  // namespace
}  // namespace oppsched::ap
