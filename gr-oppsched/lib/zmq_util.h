#pragma once
// ZeroMQ socket set-up shared by the bridge blocks (docs/daemons.md: every socket has
// timeouts and high-water marks, PUSH sockets ZMQ_IMMEDIATE so nothing queues for a dead
// peer, linger 0 so stopping never waits for one, and ZMQ_MAXMSGSIZE so no peer makes a
// socket allocate more than a bounded message). Only compiled with OPPSCHED_HAVE_ZMQ.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "oppsched/wire.h"

namespace gr {
namespace oppsched {
namespace zmq_util {

inline void check_endpoint(const std::string& name, const std::string& ep) {
    if (ep.empty() || ep.find("://") == std::string::npos)
        throw std::invalid_argument(name + ": '" + ep +
                                    "' is not a ZeroMQ endpoint (ipc://PATH or tcp://HOST:PORT)");
}

inline void check_positive(const std::string& name, int v) {
    if (v < 1) throw std::invalid_argument(name + ": " + std::to_string(v) + " must be >= 1");
}

//! Watches one socket for the end of its ZMTP handshake with a peer (the moment a PUSH
//! with ZMQ_IMMEDIATE starts accepting messages for it).
class handshake_monitor final : public zmq::monitor_t {
  public:
    void on_event_handshake_succeeded(const zmq_event_t&, const char*) override { d_done = true; }
    bool done() const { return d_done; }

  private:
    bool d_done = false;
};

//! ZMQ_MAXMSGSIZE of the sockets: every message is one wire.h frame, at most
//! wire::kMaxFrameLen bytes. A PULL socket takes twice that, as the daemons' do
//! (oppsched/daemon/zmq_endpoint.h): a moderately oversized frame still arrives and is
//! counted malformed by wire::decode; beyond that ZeroMQ drops the peer's connection before
//! allocating the message. A PUSH socket receives nothing; its limit is the frame size.
constexpr std::int64_t kPushMaxMsgSize = ::oppsched::wire::kMaxFrameLen;
constexpr std::int64_t kPullMaxMsgSize = 2 * ::oppsched::wire::kMaxFrameLen;

//! A PUSH socket for \p ep, not connected yet: non-blocking, immediate, no linger.
inline zmq::socket_t make_push(zmq::context_t& ctx, int hwm, int reconnect_ms) {
    zmq::socket_t s(ctx, zmq::socket_type::push);
    s.set(zmq::sockopt::maxmsgsize, kPushMaxMsgSize);
    s.set(zmq::sockopt::sndhwm, hwm);
    s.set(zmq::sockopt::immediate, 1);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::sndtimeo, 0);
    s.set(zmq::sockopt::reconnect_ivl, reconnect_ms);
    return s;
}

//! A PULL socket, not connected yet, no linger.
inline zmq::socket_t make_pull(zmq::context_t& ctx, int hwm, int reconnect_ms) {
    zmq::socket_t s(ctx, zmq::socket_type::pull);
    s.set(zmq::sockopt::maxmsgsize, kPullMaxMsgSize);
    s.set(zmq::sockopt::rcvhwm, hwm);
    s.set(zmq::sockopt::linger, 0);
    s.set(zmq::sockopt::reconnect_ivl, reconnect_ms);
    return s;
}

/*!
 * \brief Connect \p socks[i] to \p eps[i] and wait at most \p wait_ms for every one to
 * finish its handshake with a peer. A connect never needs the peer, so this is only about
 * the first messages: with ZMQ_IMMEDIATE they would be dropped until the pipe is up.
 * \return true when all peers are there; false after the timeout (not an error: the peer
 * may come later, what is sent meanwhile is dropped and counted)
 */
inline bool connect_and_wait(std::vector<zmq::socket_t*> socks, const std::vector<std::string>& eps,
                             int wait_ms) {
    static std::atomic<unsigned> counter{0};
    std::vector<std::unique_ptr<handshake_monitor>> mons;
    for (std::size_t i = 0; i < socks.size(); ++i) {
        if (wait_ms > 0) {
            mons.push_back(std::make_unique<handshake_monitor>());
            mons.back()->init(*socks[i], "inproc://oppsched-monitor-" + std::to_string(counter++),
                              ZMQ_EVENT_HANDSHAKE_SUCCEEDED);
        }
        socks[i]->connect(eps[i]);
    }
    if (wait_ms <= 0) return false;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    for (auto& m : mons) {
        while (!m->done()) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                                  deadline - std::chrono::steady_clock::now())
                                  .count();
            if (left <= 0) return false;
            m->check_event(static_cast<int>(std::min<long long>(left, 50)));
        }
    }
    return true;
}

//! Non-blocking send of one frame; false when it would block (no peer, queue full).
inline bool try_send(zmq::socket_t& s, const std::vector<std::uint8_t>& frame) {
    auto r = s.send(zmq::buffer(frame), zmq::send_flags::dontwait);
    return r.has_value();
}

}  // namespace zmq_util
}  // namespace oppsched
}  // namespace gr
