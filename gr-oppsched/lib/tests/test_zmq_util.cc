// The bridge blocks' ZeroMQ sockets (zmq_util.h): each carries a ZMQ_MAXMSGSIZE derived from
// the largest wire frame, and that bound still admits the largest frame the MAC sends.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "oppsched/wire.h"
#include "zmq_util.h"

using namespace gr::oppsched;

TEST(ZmqUtil, every_bridge_socket_has_a_message_size_bound_from_the_wire_frame_limit) {
    zmq::context_t ctx;
    zmq::socket_t push = zmq_util::make_push(ctx, 10, 100);
    zmq::socket_t pull = zmq_util::make_pull(ctx, 10, 100);
    EXPECT_EQ(push.get(zmq::sockopt::maxmsgsize),
              static_cast<std::int64_t>(::oppsched::wire::kMaxFrameLen));
    EXPECT_EQ(pull.get(zmq::sockopt::maxmsgsize),
              2 * static_cast<std::int64_t>(::oppsched::wire::kMaxFrameLen));
}

TEST(ZmqUtil, the_largest_wire_frame_passes_the_pull_bound) {
    // A maximal uplink_packet: the biggest body a frame carries.
    ::oppsched::wire::uplink_packet p;
    p.user = 1;
    p.packet.assign(65535, 0xA5);
    const std::vector<std::uint8_t> frame = ::oppsched::wire::encode(p, 3);
    ASSERT_LE(frame.size(), ::oppsched::wire::kMaxFrameLen);

    const std::string ep = "ipc:///tmp/oppsched-zmq-util-test-" + std::to_string(getpid());
    zmq::context_t ctx;
    zmq::socket_t pull = zmq_util::make_pull(ctx, 10, 100);
    pull.set(zmq::sockopt::rcvtimeo, 10'000);  // a bound on a failure, not a speed assumption
    pull.bind(ep);
    zmq::socket_t push(ctx, zmq::socket_type::push);
    push.set(zmq::sockopt::linger, 0);
    push.connect(ep);
    ASSERT_TRUE(push.send(zmq::buffer(frame), zmq::send_flags::none));
    zmq::message_t m;
    ASSERT_TRUE(pull.recv(m, zmq::recv_flags::none));
    EXPECT_EQ(m.size(), frame.size());
    auto f = ::oppsched::wire::decode(static_cast<const std::uint8_t*>(m.data()), m.size());
    ASSERT_TRUE(f.ok()) << f.error();
    EXPECT_EQ(std::get<::oppsched::wire::uplink_packet>(f->msg), p);
    pull.unbind(ep);
}
