// Tests of the CURVE side of oppsched/daemon/zmq_endpoint.h: key files, the ZAP handler's
// mapping of client keys to user ids (pure answers and through real sockets), and that a
// non-loopback bind is refused without CURVE and allowed with it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "oppsched/daemon/zmq_endpoint.h"

namespace oppsched::daemon {
namespace {

std::string temp_path(const std::string& name) {
    return ::testing::TempDir() + "/oppsched_curve_test_" + std::to_string(::getpid()) + "_" + name;
}

std::string write_file(const std::string& name, const std::string& text, mode_t mode) {
    const std::string p = temp_path(name);
    ::unlink(p.c_str());
    std::ofstream(p) << text;
    ::chmod(p.c_str(), mode);
    return p;
}

std::string z85_to_bin(const std::string& z85) {
    std::string bin(32, '\0');
    zmq_z85_decode(reinterpret_cast<std::uint8_t*>(bin.data()), z85.c_str());
    return bin;
}

std::vector<std::string> zap_request(const std::string& mechanism,
                                     const std::vector<std::string>& credentials) {
    std::vector<std::string> r = {"1.0", "req-7", kZapDomain, "10.253.0.2", "", mechanism};
    r.insert(r.end(), credentials.begin(), credentials.end());
    return r;
}

TEST(Curve, when_a_key_pair_is_made_then_the_public_key_derives_from_the_secret_one) {
    ASSERT_TRUE(curve_available());
    const auto [pub, sec] = curve_keypair();
    EXPECT_EQ(pub.size(), 40u);
    EXPECT_EQ(curve_public_of(sec), pub);
    EXPECT_THROW(curve_public_of("short"), std::invalid_argument);
}

TEST(Curve, when_a_key_file_is_read_then_a_secret_one_must_be_private_and_hold_a_z85_key) {
    const auto [pub, sec] = curve_keypair();
    EXPECT_EQ(read_curve_key_file(write_file("ok.secret", sec + "\n", 0600), true), sec);
    EXPECT_EQ(read_curve_key_file(write_file("ok.public", pub, 0644), false), pub);
    const std::string open = write_file("open.secret", sec, 0640);
    try {
        read_curve_key_file(open, true);
        FAIL() << "accepted a group-readable secret key";
    } catch (const std::runtime_error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(open), std::string::npos) << m;
        EXPECT_NE(m.find("mode 0640"), std::string::npos) << m;
        EXPECT_EQ(m.find(sec), std::string::npos) << "the message shows the key";
    }
    try {
        read_curve_key_file(write_file("bad.public", "not a key", 0644), false);
        FAIL();
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("does not hold a CURVE key"), std::string::npos);
    }
    EXPECT_THROW(read_curve_key_file(temp_path("missing"), false), std::runtime_error);
    EXPECT_EQ(read_secret_hex_file(write_file("ik", "00112233445566778899aabbccddeeff", 0600), 16),
              "00112233445566778899aabbccddeeff");
    EXPECT_THROW(read_secret_hex_file(write_file("ik2", "0011", 0600), 16), std::runtime_error);
    EXPECT_THROW(
        read_secret_hex_file(write_file("ik3", "00112233445566778899aabbccddeeff", 0604), 16),
        std::runtime_error);
}

TEST(Curve, when_zap_asks_then_a_known_key_gets_its_user_id_and_others_are_refused_and_counted) {
    zmq::context_t ctx(1);
    const auto a = curve_keypair();
    const auto b = curve_keypair();
    zap_handler zap(ctx, {{a.first, "0"}, {b.first, "1"}});
    auto r = zap.answer(zap_request("CURVE", {z85_to_bin(b.first)}));
    ASSERT_EQ(r.size(), 6u);
    EXPECT_EQ(r[0], "1.0");
    EXPECT_EQ(r[1], "req-7");  // the request id echoed
    EXPECT_EQ(r[2], "200");
    EXPECT_EQ(r[4], "1");  // user id of b's key
    r = zap.answer(zap_request("CURVE", {z85_to_bin(curve_keypair().first)}));
    EXPECT_EQ(r.at(2), "400");
    EXPECT_EQ(r.at(4), "");
    r = zap.answer(zap_request("NULL", {}));  // a plain-text peer
    EXPECT_EQ(r.at(2), "400");
    EXPECT_TRUE(zap.answer({"1.0"}).empty());  // no request id to answer
    EXPECT_EQ(zap.answer({"2.0", "x", "", "", "", "CURVE"}).at(2), "500");
    EXPECT_EQ(zap.stats().accepted, 1u);
    EXPECT_EQ(zap.stats().refused_unknown_key, 1u);
    EXPECT_EQ(zap.stats().refused_mechanism, 1u);
    EXPECT_EQ(zap.stats().malformed, 2u);
}

// Receives on `pull` until `done` or 2000 turns of 10 ms (a bound for failure only: the
// test waits for events, never for time to pass), serving ZAP in between.
template <class Done>
void pump(zap_handler& zap, pull_endpoint& pull, std::vector<std::string>& got,
          std::vector<std::string>& ids, Done done) {
    for (int turn = 0; turn < 2000 && !done(); ++turn) {
        zmq::pollitem_t items[] = {zap.pollitem(), pull.pollitem()};
        zmq::poll(items, 2, std::chrono::milliseconds(10));
        zap.serve();
        std::vector<std::uint8_t> msg;
        while (pull.receive(msg)) {
            got.emplace_back(msg.begin(), msg.end());
            ids.push_back(pull.peer_user_id());
        }
    }
}

TEST(Curve, when_clients_connect_with_curve_then_only_a_known_key_is_delivered_with_its_user) {
    zmq::context_t ctx(1);
    const auto server = curve_keypair();
    const auto good = curve_keypair();
    const auto stranger = curve_keypair();
    zap_handler zap(ctx, {{good.first, "3"}});
    socket_options so;
    so.curve.secret_key = server.second;
    pull_endpoint pull(ctx, "uplink", "tcp://127.0.0.1:*", socket_role::bind, so);
    const std::string ep = pull.socket().get(zmq::sockopt::last_endpoint);

    socket_options bad_opt;
    bad_opt.curve = {stranger.second, stranger.first, server.first};
    bad_opt.immediate = false;  // queue until the handshake, which fails
    push_endpoint bad(ctx, "stranger", ep, socket_role::connect, bad_opt);
    EXPECT_TRUE(bad.send(std::vector<std::uint8_t>{'x'}));
    std::vector<std::string> got, ids;
    pump(zap, pull, got, ids, [&] { return zap.stats().refused_unknown_key >= 1; });
    ASSERT_GE(zap.stats().refused_unknown_key, 1u);

    socket_options good_opt;
    good_opt.curve = {good.second, good.first, server.first};
    good_opt.immediate = false;
    push_endpoint client(ctx, "client", ep, socket_role::connect, good_opt);
    EXPECT_TRUE(client.send(std::vector<std::uint8_t>{'a'}));
    pump(zap, pull, got, ids, [&] { return !got.empty(); });
    ASSERT_EQ(got, std::vector<std::string>{"a"});  // never the stranger's
    EXPECT_EQ(ids, std::vector<std::string>{"3"});
    EXPECT_EQ(zap.stats().accepted, 1u);
}

TEST(Curve, when_a_non_loopback_address_is_bound_then_curve_is_required) {
    zmq::context_t ctx(1);
    EXPECT_THROW(pull_endpoint(ctx, "uplink", "tcp://0.0.0.0:*", socket_role::bind),
                 std::runtime_error);
    zap_handler zap(ctx, {});
    socket_options so;
    so.curve.secret_key = curve_keypair().second;
    pull_endpoint pull(ctx, "uplink", "tcp://0.0.0.0:*", socket_role::bind, so);
    EXPECT_EQ(pull.socket().get(zmq::sockopt::curve_server), 1);
}

}  // namespace
}  // namespace oppsched::daemon
