// HARQ entity: stop-and-wait processes, NDI, RV sequence, max transmissions (Andrew & Hanly, CLAMP,
// §V-D: n = 5 slow fading, 15 fast), feedback delay and timeout. The clock is a slot counter.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include "oppsched/harq.h"

using namespace oppsched::harq;

namespace {

harq_params small(std::uint32_t users = 1, std::uint32_t procs = 2, std::uint32_t max_tx = 5) {
    harq_params c;
    c.num_users = users;
    c.num_processes = procs;
    c.max_transmissions = max_tx;
    c.feedback_delay_slots = 4;
    c.feedback_timeout_slots = 10;
    return c;
}

std::string message_of(const harq_params& c) {
    try {
        validate(c);
    } catch (const std::invalid_argument& e) {
        return e.what();
    }
    return "";
}

// Sends a TB, then NACKs it until it is dropped; returns the final event.
harq_event nack_until_done(harq_entity& h, std::uint32_t user, tb_ref tb, slot_t& now) {
    tx_grant g = h.new_transmission(user, tb, now);
    for (;;) {
        now += h.config().feedback_delay_slots;
        const harq_event ev = h.on_feedback(user, g.process, g.ndi, false, now);
        if (ev.kind != event_kind::nacked) return ev;
        const auto r = h.next_retransmission(now);
        EXPECT_TRUE(r.has_value());
        g = h.retransmit(r->user, r->process, now);
    }
}

TEST(harq, when_max_tx_reached_then_tb_is_dropped) {
    for (std::uint32_t max_tx :
         {5u, 15u}) {  // Andrew & Hanly, CLAMP: n = 5 (slow), n = 15 (fast fading)
        harq_entity h(small(1, 2, max_tx));
        slot_t now = 0;
        const harq_event ev = nack_until_done(h, 0, tb_ref{4242, 1500}, now);
        EXPECT_EQ(ev.kind, event_kind::dropped_max_tx);
        EXPECT_EQ(ev.tb, (tb_ref{4242, 1500})) << "the MAC must learn which TB to drop";
        EXPECT_EQ(ev.transmissions, max_tx);
        EXPECT_EQ(h.stats().failed_final, 1u);
        EXPECT_EQ(h.stats().tx_attempts, max_tx);
        EXPECT_EQ(h.stats().nacks, max_tx);
        EXPECT_EQ(h.stats().tb_sent, 1u);
        EXPECT_EQ(h.in_flight(), 0u);
        EXPECT_EQ(h.process(0, 0).phase, process_phase::idle);
        EXPECT_FALSE(h.next_retransmission(now + 100).has_value());
    }
}

TEST(harq, single_transmission_config_drops_on_the_first_nack) {
    harq_entity h(small(1, 1, 1));
    const tx_grant g = h.new_transmission(0, {1, 100}, 0);
    EXPECT_EQ(h.on_feedback(0, g.process, g.ndi, false, 4).kind, event_kind::dropped_max_tx);
}

TEST(harq, ack_frees_the_process_and_reports_the_tb) {
    harq_entity h(small());
    const tx_grant g = h.new_transmission(0, {7, 900}, 10);
    EXPECT_EQ(g.transmission, 1u);
    EXPECT_FALSE(g.is_retransmission());
    const harq_event ev = h.on_feedback(0, g.process, g.ndi, true, 14);
    EXPECT_EQ(ev.kind, event_kind::acked);
    EXPECT_EQ(ev.tb.id, 7u);
    EXPECT_EQ(h.stats().acked, 1u);
    EXPECT_EQ(h.in_flight(), 0u);
    EXPECT_EQ(h.free_process(0, 14), std::optional<std::uint8_t>(0));
}

TEST(harq, ndi_toggles_per_new_tb_and_stays_on_retransmissions) {
    harq_entity h(small(1, 1));
    slot_t now = 0;
    bool previous = false;  // process NDI before any TB
    for (int tb = 0; tb < 6; ++tb) {
        const tx_grant g = h.new_transmission(0, {static_cast<std::uint64_t>(tb), 10}, now);
        EXPECT_NE(g.ndi, previous) << "TB " << tb << ": new data must toggle the NDI";
        previous = g.ndi;
        now += 4;
        if (tb % 2 == 1) {  // every other TB needs one retransmission
            EXPECT_EQ(h.on_feedback(0, g.process, g.ndi, false, now).kind, event_kind::nacked);
            const tx_grant r = h.retransmit(0, g.process, now);
            EXPECT_EQ(r.ndi, g.ndi) << "a retransmission keeps the NDI";
            EXPECT_TRUE(r.is_retransmission());
            now += 4;
            h.on_feedback(0, r.process, r.ndi, true, now);
        } else {
            h.on_feedback(0, g.process, g.ndi, true, now);
        }
    }
}

TEST(harq, redundancy_versions_follow_the_configured_sequence) {
    for (const std::vector<std::uint8_t>& seq :
         {std::vector<std::uint8_t>{0, 2, 3, 1}, std::vector<std::uint8_t>{0, 3},
          std::vector<std::uint8_t>{0}}) {
        harq_params c = small(1, 1, 9);
        c.rv_sequence = seq;
        harq_entity h(c);
        slot_t now = 0;
        tx_grant g = h.new_transmission(0, {1, 100}, now);
        std::vector<std::uint8_t> rvs = {g.rv};
        for (int k = 1; k < 9; ++k) {
            now += 4;
            h.on_feedback(0, g.process, g.ndi, false, now);
            g = h.retransmit(0, g.process, now);
            rvs.push_back(g.rv);
            EXPECT_EQ(g.transmission, static_cast<std::uint32_t>(k + 1));
        }
        for (std::size_t k = 0; k < rvs.size(); ++k) {
            EXPECT_EQ(rvs[k], seq[k % seq.size()]) << "transmission " << k + 1;
        }
    }
}

TEST(harq, process_is_not_reusable_before_its_feedback_is_due) {
    harq_entity h(small(1, 1));
    const tx_grant g = h.new_transmission(0, {1, 100}, 100);
    EXPECT_FALSE(h.free_process(0, 100).has_value());
    // An ACK that arrives early (uplink faster than configured) still cannot free the
    // process before slot 100 + 4.
    EXPECT_EQ(h.on_feedback(0, g.process, g.ndi, true, 101).kind, event_kind::acked);
    EXPECT_FALSE(h.free_process(0, 103).has_value());
    EXPECT_TRUE(h.free_process(0, 104).has_value());
    EXPECT_THROW(h.new_transmission(0, {2, 100}, 103), std::invalid_argument);
}

TEST(harq, retransmission_is_not_offered_before_the_feedback_is_due) {
    harq_entity h(small(1, 1));
    const tx_grant g = h.new_transmission(0, {1, 100}, 100);
    h.on_feedback(0, g.process, g.ndi, false, 102);  // early NACK
    EXPECT_FALSE(h.next_retransmission(103).has_value());
    EXPECT_THROW(h.retransmit(0, 0, 103), std::invalid_argument);
    ASSERT_TRUE(h.next_retransmission(104).has_value());
    EXPECT_EQ(h.retransmit(0, 0, 104).transmission, 2u);
}

TEST(harq, feedback_timeout_frees_the_process_and_reports_the_tb) {
    harq_entity h(small(2, 2));
    const tx_grant g = h.new_transmission(1, {99, 512}, 0);
    std::vector<harq_event> out;
    h.expire(9, out);
    EXPECT_TRUE(out.empty()) << "timeout is 10 slots";
    h.expire(10, out);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind, event_kind::timed_out);
    EXPECT_EQ(out[0].user, 1u);
    EXPECT_EQ(out[0].process, g.process);
    EXPECT_EQ(out[0].tb.id, 99u);
    EXPECT_EQ(h.stats().timeouts, 1u);
    EXPECT_EQ(h.in_flight(), 0u);
    EXPECT_TRUE(h.free_process(1, 10).has_value());
    // The ACK that finally limps in is stale: the TB was already reported.
    EXPECT_EQ(h.on_feedback(1, g.process, g.ndi, true, 12).kind, event_kind::stale_feedback);
    EXPECT_EQ(h.stats().acked, 0u);
    EXPECT_EQ(h.stats().stale_feedback, 1u);
}

TEST(harq, stale_feedback_changes_nothing) {
    harq_entity h(small(1, 1));
    const tx_grant g = h.new_transmission(0, {1, 100}, 0);
    EXPECT_EQ(h.on_feedback(0, 0, !g.ndi, true, 4).kind, event_kind::stale_feedback);  // old TB
    EXPECT_EQ(h.process(0, 0).phase, process_phase::awaiting_feedback);
    EXPECT_EQ(h.on_feedback(0, 0, g.ndi, false, 4).kind, event_kind::nacked);
    EXPECT_EQ(h.on_feedback(0, 0, g.ndi, false, 5).kind, event_kind::stale_feedback);  // dup
    EXPECT_EQ(h.process(0, 0).phase, process_phase::retx_pending);
    EXPECT_EQ(h.stats().stale_feedback, 2u);
    // With the transmission slot echoed, feedback for an earlier transmission is stale too.
    const tx_grant r = h.retransmit(0, 0, 6);
    EXPECT_EQ(h.on_feedback(0, 0, r.ndi, true, 9, slot_t{0}).kind, event_kind::stale_feedback);
    EXPECT_EQ(h.on_feedback(0, 0, r.ndi, true, 10, slot_t{6}).kind, event_kind::acked);
    EXPECT_THROW(h.on_feedback(0, 1, true, true, 5), std::invalid_argument);
    EXPECT_THROW(h.on_feedback(1, 0, true, true, 5), std::invalid_argument);
}

// A transmission the receiver never got (its slot went out empty because the grant came
// late, or the header was lost) is undone: same NDI, same RV, not counted towards
// max_transmissions; the next TB on the process still toggles the NDI exactly once.
TEST(harq, when_a_transmission_is_not_received_then_it_is_sent_again_with_the_same_ndi_and_rv) {
    harq_entity h(small(1, 1, 2));
    const tx_grant z = h.new_transmission(0, {1, 100}, 0);
    ASSERT_EQ(h.on_feedback(0, 0, z.ndi, true, 4).kind, event_kind::acked);
    const tx_grant a = h.new_transmission(0, {2, 100}, 4);
    EXPECT_NE(a.ndi, z.ndi);
    EXPECT_EQ(h.on_not_received(0, 0, 3, 6).kind, event_kind::stale_feedback);  // other slot
    const harq_event ev = h.on_not_received(0, 0, 4, 6);
    EXPECT_EQ(ev.kind, event_kind::not_received);
    EXPECT_EQ(ev.tb.id, 2u);
    EXPECT_FALSE(h.free_process(0, 100).has_value());  // the TB holds its process
    const tx_grant a2 = h.retransmit(0, 0, 8);
    EXPECT_EQ(a2.ndi, a.ndi);  // still new data to the receiver
    EXPECT_EQ(a2.rv, a.rv);    // the undone transmission is repeated
    EXPECT_EQ(a2.transmission, 1u);
    EXPECT_EQ(a2.unheard, 1u);
    EXPECT_EQ(a2.tb.id, 2u);
    // NACK on the one counted transmission, then the second (last of max 2) is a real one.
    ASSERT_EQ(h.on_feedback(0, 0, a2.ndi, false, 12, slot_t{8}).kind, event_kind::nacked);
    const tx_grant a3 = h.retransmit(0, 0, 12);
    EXPECT_EQ(a3.transmission, 2u);
    EXPECT_EQ(a3.rv, 2);
    ASSERT_EQ(h.on_feedback(0, 0, a3.ndi, true, 16, slot_t{12}).kind, event_kind::acked);
    const tx_grant b = h.new_transmission(0, {3, 100}, 16);
    EXPECT_NE(b.ndi, a.ndi);
    EXPECT_EQ(b.unheard, 0u);
    EXPECT_EQ(h.stats().not_received, 1u);
    EXPECT_EQ(h.stats().tx_attempts, 5u);  // slots used, the unheard one included
    EXPECT_EQ(h.stats().tb_sent, 3u);
}

TEST(harq, when_max_transmissions_are_not_received_then_the_tb_is_dropped) {
    harq_entity h(small(1, 1, 3));
    tx_grant g = h.new_transmission(0, {7, 100}, 0);
    slot_t now = 0;
    EXPECT_EQ(h.on_not_received(0, 0, now, now + 4).kind, event_kind::not_received);
    now += 4;
    g = h.retransmit(0, 0, now);
    EXPECT_EQ(h.on_not_received(0, 0, now, now + 4).kind, event_kind::not_received);
    now += 4;
    g = h.retransmit(0, 0, now);
    EXPECT_EQ(g.transmission, 1u);
    EXPECT_EQ(g.unheard, 2u);
    const harq_event last = h.on_not_received(0, 0, now, now + 4);
    EXPECT_EQ(last.kind, event_kind::dropped_max_tx);
    EXPECT_EQ(last.tb.id, 7u);
    EXPECT_EQ(h.stats().failed_final, 1u);
    EXPECT_EQ(h.in_flight(), 0u);
    EXPECT_EQ(h.stats().tb_sent, h.stats().acked + h.stats().failed_final + h.stats().timeouts +
                                     h.stats().flushed + h.in_flight());
}

TEST(harq, retransmissions_are_offered_oldest_nack_first) {
    harq_entity h(small(3, 2));
    const tx_grant a = h.new_transmission(2, {1, 10}, 0);
    const tx_grant b = h.new_transmission(0, {2, 10}, 1);
    const tx_grant c = h.new_transmission(1, {3, 10}, 2);
    h.on_feedback(0, b.process, b.ndi, false, 5);
    h.on_feedback(2, a.process, a.ndi, false, 6);
    h.on_feedback(1, c.process, c.ndi, true, 6);
    std::vector<retx_ref> pending;
    h.pending_retransmissions(6, pending);
    ASSERT_EQ(pending.size(), 2u);
    EXPECT_EQ(pending[0].user, 0u);
    EXPECT_EQ(pending[1].user, 2u);
    EXPECT_EQ(h.next_retransmission(6)->user, 0u);
    EXPECT_EQ(h.next_retransmission(2, 6)->process, a.process);
    EXPECT_FALSE(h.next_retransmission(1, 6).has_value());
}

TEST(harq, a_user_with_every_process_busy_has_none_free) {
    harq_entity h(small(1, 3));
    for (std::uint64_t k = 0; k < 3; ++k) h.new_transmission(0, {k, 10}, 0);
    EXPECT_FALSE(h.free_process(0, 50).has_value());
    EXPECT_EQ(h.in_flight(0), 3u);
    try {
        h.new_transmission(0, {9, 10}, 1);
        FAIL();
    } catch (const std::invalid_argument& e) {
        EXPECT_EQ(std::string(e.what()),
                  "harq.new_transmission: user 0 has no free process at slot 1");
    }
}

TEST(harq, flush_user_reports_every_tb_it_held) {
    harq_entity h(small(2, 4));
    const tx_grant g = h.new_transmission(0, {1, 10}, 0);
    h.new_transmission(0, {2, 10}, 0);
    h.new_transmission(1, {3, 10}, 0);
    h.on_feedback(0, g.process, g.ndi, false, 4);  // one waiting for retransmission
    std::vector<harq_event> out;
    h.flush_user(0, 5, out);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].tb.id + out[1].tb.id, 3u);
    EXPECT_EQ(h.in_flight(), 1u);
    EXPECT_EQ(h.stats().flushed, 2u);
    EXPECT_FALSE(h.next_retransmission(5).has_value());
}

TEST(harq, users_can_be_added_not_removed) {
    harq_entity h(small(1, 2));
    h.set_num_users(3);
    EXPECT_TRUE(h.free_process(2, 0).has_value());
    EXPECT_THROW(h.set_num_users(2), std::invalid_argument);
    EXPECT_THROW(h.free_process(3, 0), std::invalid_argument);
}

TEST(harq, configuration_is_validated_with_the_field_named) {
    harq_params c = small();
    c.max_transmissions = 0;
    EXPECT_EQ(message_of(c), "harq.max_transmissions: 0 not in [1, 64]");
    c = small();
    c.num_processes = 17;
    EXPECT_EQ(message_of(c), "harq.num_processes: 17 not in [1, 16]");
    c = small();
    c.rv_sequence = {0, 4};
    EXPECT_EQ(message_of(c), "harq.rv_sequence[1]: 4 not in [0, 3]");
    c.rv_sequence = {};
    EXPECT_EQ(message_of(c), "harq.rv_sequence: 0 entries not in [1, 8]");
    c = small();
    c.feedback_delay_slots = 0;
    EXPECT_EQ(message_of(c), "harq.feedback_delay_slots: 0 not >= 1");
    c = small();
    c.feedback_timeout_slots = 4;
    EXPECT_EQ(message_of(c), "harq.feedback_timeout_slots: 4 not > feedback_delay_slots 4");
    EXPECT_EQ(message_of(small()), "");
    c.max_transmissions = 0;
    EXPECT_THROW(harq_entity{c}, std::invalid_argument);
}

// A MAC-like driver: every slot expire, serve a pending retransmission first, else start a
// new TB for a random user with a free process; the client answers ACK, NACK or nothing
// (lost), possibly late (after the timeout). After the traffic stops and every feedback has
// been delivered, every process must be idle and every TB accounted for exactly once.
TEST(harq, no_process_is_stuck_after_long_random_ack_nack_loss_sequences) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
        harq_params c;
        c.num_users = 4;
        c.num_processes = 4;
        c.max_transmissions = 5;
        c.feedback_delay_slots = 3;
        c.feedback_timeout_slots = 8;
        harq_entity h(c);
        std::mt19937_64 rng(seed);
        std::uniform_int_distribution<std::uint32_t> any_user(0, 3);
        std::uniform_real_distribution<double> u01(0.0, 1.0);
        std::uniform_int_distribution<slot_t> extra_delay(0, 7);  // sometimes past the timeout

        struct feedback {
            std::uint32_t user;
            std::uint8_t process;
            bool ndi;
            bool ack;
        };
        std::multimap<slot_t, feedback> uplink;
        std::map<std::uint64_t, int> outcome_count;  // TB id -> final outcomes reported
        std::uint64_t next_id = 1;
        std::vector<harq_event> events;
        const auto account = [&](const harq_event& ev) {
            if (ev.kind == event_kind::acked || ev.kind == event_kind::dropped_max_tx ||
                ev.kind == event_kind::timed_out) {
                ++outcome_count[ev.tb.id];
            }
        };
        const auto send = [&](const tx_grant& g, slot_t now) {
            const double x = u01(rng);
            if (x < 0.05) return;  // feedback lost
            const slot_t at = now + c.feedback_delay_slots + extra_delay(rng);
            uplink.emplace(at, feedback{g.user, g.process, g.ndi, x > 0.45});  // ~42% NACK
        };

        constexpr slot_t kTrafficSlots = 20000;
        for (slot_t now = 0; now < kTrafficSlots + 100; ++now) {
            events.clear();
            h.expire(now, events);
            for (const auto& ev : events) account(ev);
            for (auto it = uplink.begin(); it != uplink.end() && it->first <= now;) {
                account(h.on_feedback(it->second.user, it->second.process, it->second.ndi,
                                      it->second.ack, now));
                it = uplink.erase(it);
            }
            if (const auto r = h.next_retransmission(now)) {
                send(h.retransmit(r->user, r->process, now), now);
            } else if (now < kTrafficSlots) {
                const std::uint32_t user = any_user(rng);
                if (h.free_process(user, now)) {
                    send(h.new_transmission(user, {next_id++, 100}, now), now);
                }
            }
            // The accounting identity holds at every slot.
            const harq_stats& s = h.stats();
            ASSERT_EQ(s.tb_sent, s.acked + s.failed_final + s.timeouts + s.flushed + h.in_flight())
                << "seed " << seed << " slot " << now;
            ASSERT_LE(h.in_flight(), 16u);
        }
        EXPECT_EQ(h.in_flight(), 0u) << "seed " << seed;
        EXPECT_TRUE(uplink.empty());
        for (std::uint32_t u = 0; u < 4; ++u) {
            for (std::uint8_t p = 0; p < 4; ++p) {
                EXPECT_EQ(h.process(u, p).phase, process_phase::idle) << u << "/" << int(p);
            }
        }
        const harq_stats& s = h.stats();
        EXPECT_EQ(outcome_count.size(), s.tb_sent) << "every TB got an outcome";
        for (const auto& [id, n] : outcome_count) ASSERT_EQ(n, 1) << "TB " << id;
        // Every path was exercised.
        EXPECT_GT(s.tb_sent, 5000u);
        EXPECT_GT(s.acked, 1000u);
        EXPECT_GT(s.failed_final, 10u);
        EXPECT_GT(s.timeouts, 100u);
        EXPECT_GT(s.stale_feedback, 50u);
        EXPECT_GT(s.tx_attempts, s.tb_sent);
    }
}

}  // namespace
