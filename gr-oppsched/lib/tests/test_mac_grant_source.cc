// mac_grant_source's receive thread (mac_grant_source_impl.cc) without a flowgraph: a fake
// daemon pushes grant frames while the test thread reads the block's counters; stop() joins
// the thread, after which the published grants are read from a subscriber's queue. The
// ThreadSanitizer build runs this (make check-sanitizers, docs/fuzzing.md).
#include <gnuradio/blocks/message_debug.h>
#include <gnuradio/oppsched/mac_grant_source.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "oppsched/wire.h"
#include "slot_messages.h"

using namespace gr::oppsched;
namespace wire = ::oppsched::wire;

namespace {

// Polls \p done until it holds or 20 s pass: a bound on a failure, not a speed assumption.
template <typename Pred>
bool wait_for(Pred done) {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done()) {
        if (std::chrono::steady_clock::now() > give_up) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

wire::slot_grant grant_of(std::uint64_t slot) {
    wire::slot_grant g;
    g.slot = slot;
    if (slot % 3 == 0) return g;  // an empty slot
    g.empty = false;
    g.user = static_cast<std::uint16_t>(slot % 4);
    g.mcs = static_cast<std::uint8_t>(slot % 8);
    g.harq_pid = static_cast<std::uint8_t>(slot % 8);
    g.ndi = static_cast<std::uint8_t>(slot % 2);
    g.rv = static_cast<std::uint8_t>(slot % 4);
    g.uplink = slot % 5 == 0;
    for (std::uint64_t i = 0; i < 10 + slot; ++i)
        g.tb.push_back(static_cast<std::uint8_t>(i ^ slot));
    return g;
}

}  // namespace

TEST(MacGrantSource, the_receive_thread_publishes_every_grant_in_order_and_stop_joins_it) {
    const std::string base =
        "ipc:///tmp/oppsched-mac-grant-source-test-" + std::to_string(getpid());
    const std::string req_ep = base + "-requests", grant_ep = base + "-grants";
    zmq::context_t ctx;
    zmq::socket_t requests(ctx, zmq::socket_type::pull), grants(ctx, zmq::socket_type::push);
    requests.set(zmq::sockopt::linger, 0);
    grants.set(zmq::sockopt::linger, 0);
    requests.bind(req_ep);
    grants.bind(grant_ep);

    auto block = mac_grant_source::make(req_ep, grant_ep, /*hwm=*/1000, /*reconnect_ms=*/10,
                                        /*connect_wait_ms=*/20'000);
    auto store = gr::blocks::message_debug::make();
    const pmt::pmt_t store_port = pmt::mp("store");
    block->message_port_sub(pmt::mp("grant"), pmt::cons(store->alias_pmt(), store_port));
    ASSERT_TRUE(block->start());

    // 60 grants, one frame that does not decode and one of another type, then 60 more.
    constexpr std::uint64_t n = 120;
    std::uint32_t seq = 0;
    for (std::uint64_t slot = 0; slot < n; ++slot) {
        if (slot == n / 2) {
            ASSERT_TRUE(grants.send(zmq::str_buffer("not a frame"), zmq::send_flags::none));
            wire::slot_request r;
            r.slot = 7;
            // (its sequence number is not the grants': they stay without a gap)
            ASSERT_TRUE(grants.send(zmq::buffer(wire::encode(r, 0)), zmq::send_flags::none));
        }
        ASSERT_TRUE(
            grants.send(zmq::buffer(wire::encode(grant_of(slot), seq++)), zmq::send_flags::none));
    }
    // The counters are read here while the receive thread updates them.
    EXPECT_TRUE(wait_for([&] {
        return block->grants_received() == n && block->grants_malformed() == 1 &&
               block->grants_wrong_type() == 1;
    })) << block->grants_received()
        << " grants, " << block->grants_malformed() << " malformed, " << block->grants_wrong_type()
        << " of another type";
    ASSERT_TRUE(block->stop());
    EXPECT_EQ(block->grants_seq_lost(), 0u);

    // After stop() the thread is gone: every grant it published is in the queue, in order.
    ASSERT_EQ(store->nmsgs(store_port), n);
    for (std::uint64_t slot = 0; slot < n; ++slot) {
        const auto got = slot_msg::grant_from_pmt(store->delete_head_nowait(store_port));
        ASSERT_TRUE(got.ok()) << got.error();
        const wire::slot_grant want = grant_of(slot);
        EXPECT_EQ(got->slot, slot);
        EXPECT_EQ(got->empty, want.empty) << "slot " << slot;
        EXPECT_EQ(got->uplink, want.uplink) << "slot " << slot;
        EXPECT_EQ(got->tb, want.tb) << "slot " << slot;
        if (!want.empty) {
            EXPECT_EQ(got->user, want.user) << "slot " << slot;
            EXPECT_EQ(got->mcs, want.mcs) << "slot " << slot;
            EXPECT_EQ(got->harq_pid, want.harq_pid) << "slot " << slot;
            EXPECT_EQ(got->ndi, want.ndi != 0) << "slot " << slot;
            EXPECT_EQ(got->rv, want.rv) << "slot " << slot;
        }
    }
    // A second stop (the destructor's) finds no thread to join.
    EXPECT_TRUE(block->stop());
}
