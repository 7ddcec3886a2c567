#pragma once
// ZeroMQ endpoints as docs/daemons.md wants them: every socket has send/receive timeouts and
// high-water marks, LINGER 0, ZMQ_MAXMSGSIZE (ZeroMQ silently drops - and disconnects - a
// peer sending a bigger message; the receiver also checks sizes itself), ZMQ_IMMEDIATE on
// PUSH sockets (nothing queues for a peer that is not there), and ipc:// directories are
// created on demand (0700) and checked before use (owner, no symlink, no group/other write). A
// daemon never blocks on a peer: push_endpoint::send() is non-blocking and counts what it could not
// send.
//
// Thread-safety: none (one thread per socket, as ZeroMQ requires).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>
#include <zmq.hpp>

namespace oppsched::daemon {

struct socket_options {
    int send_timeout_ms = 100;  // ZMQ_SNDTIMEO (only used by send(..., wait = true))
    int recv_timeout_ms = 100;  // ZMQ_RCVTIMEO (only used by receive(..., wait = true))
    int send_hwm = 1000;        // ZMQ_SNDHWM, messages
    int recv_hwm = 1000;        // ZMQ_RCVHWM, messages
    // Largest message accepted, bytes (wire::kMaxFrameLen). push_endpoint refuses to send
    // more; pull_endpoint drops and counts bigger ones. ZMQ_MAXMSGSIZE is set to twice this
    // on PULL sockets (so a moderately oversized message reaches the endpoint and is
    // counted; a peer sending beyond that is disconnected by ZeroMQ, uncounted: it protects
    // memory) and to this value on other sockets.
    std::int64_t max_msg_size = 70'000;
    bool immediate = true;  // ZMQ_IMMEDIATE (PUSH side)
    int linger_ms = 0;      // ZMQ_LINGER
};

enum class socket_role { bind, connect };

// For "ipc://DIR/NAME": creates DIR (and parents, mode 0700) if missing, then
// check_ipc_dir. No-op for other transports. Throws std::runtime_error naming the directory
// and errno text on failure.
void ensure_ipc_dir(const std::string& endpoint);

// For "ipc://DIR/NAME": DIR must be a directory (not a symbolic link) owned by this
// process's effective uid and writable by no one else, so that no other user can take or
// replace the socket. No-op for other transports. Throws std::runtime_error naming DIR.
void check_ipc_dir(const std::string& endpoint);

// For a bound endpoint: "" if it may be bound without authentication (ipc://, inproc://,
// tcp:// on a loopback address: 127.0.0.0/8, [::1], localhost, lo), else why not. Binding
// any other address (tcp://*, 0.0.0.0, an interface, a LAN address) would let anyone on
// the network inject packets and forge feedback; it needs ZeroMQ CURVE, which the daemons
// do not support yet (docs/security.md), so the config loaders reject it naming the field
// and make_socket refuses it.
std::string bind_refusal(const std::string& endpoint);

// Creates a socket of `type`, applies `opt` (ZMQ_MAXMSGSIZE = opt.max_msg_size), then binds or
// connects (ensure_ipc_dir first for bind). Throws std::runtime_error("<name>: cannot bind
// <endpoint>: <zmq error>") on failure.
zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, const std::string& name,
                          const std::string& endpoint, socket_role role, const socket_options& opt);

// A PUSH socket that never blocks the caller (unless asked to wait up to SNDTIMEO).
class push_endpoint final {
  public:
    struct push_stats {
        std::uint64_t sent = 0;
        std::uint64_t dropped_no_peer = 0;    // EAGAIN: no peer connected or HWM reached
        std::uint64_t dropped_oversized = 0;  // larger than max_msg_size: never sent
        std::uint64_t send_errors = 0;        // any other zmq error
    };
    push_endpoint(zmq::context_t& ctx, std::string name, const std::string& endpoint,
                  socket_role role, const socket_options& opt = socket_options{});

    // true if queued to ZeroMQ. wait=false: ZMQ_DONTWAIT (returns at once); wait=true:
    // blocks at most send_timeout_ms. Every false is counted in stats().
    bool send(const void* data, std::size_t len, bool wait = false);
    bool send(const std::vector<std::uint8_t>& msg, bool wait = false) {
        return send(msg.data(), msg.size(), wait);
    }
    const push_stats& stats() const { return stats_; }
    const std::string& name() const { return name_; }
    zmq::socket_t& socket() { return sock_; }

  private:
    std::string name_;
    std::size_t max_len_;
    zmq::socket_t sock_;
    push_stats stats_;
};

// A PULL socket; receive() is non-blocking by default and drops oversized messages itself.
class pull_endpoint final {
  public:
    struct pull_stats {
        std::uint64_t received = 0;  // messages handed to the caller
        std::uint64_t dropped_oversized = 0;
        std::uint64_t dropped_multipart = 0;  // extra frames of a multi-part message
        std::uint64_t recv_errors = 0;
    };
    pull_endpoint(zmq::context_t& ctx, std::string name, const std::string& endpoint,
                  socket_role role, const socket_options& opt = socket_options{});

    // true and `out` filled if a message was read; false if none (or only dropped ones) was
    // available (wait=false) / arrived within recv_timeout_ms (wait=true). Only single-frame
    // messages of at most max_msg_size bytes are returned; the rest are counted and dropped.
    bool receive(std::vector<std::uint8_t>& out, bool wait = false);
    // For zmq::poll: {static_cast<void*>(ep.socket()), 0, ZMQ_POLLIN, 0}.
    zmq::socket_t& socket() { return sock_; }
    zmq::pollitem_t pollitem() { return {static_cast<void*>(sock_), 0, ZMQ_POLLIN, 0}; }
    const pull_stats& stats() const { return stats_; }
    const std::string& name() const { return name_; }

  private:
    std::string name_;
    std::size_t max_len_;
    zmq::socket_t sock_;
    pull_stats stats_;
};

// The stats keys of both endpoints (stats_registry::set_fields), as stats_fields.h does for the
// MAC.
template <class F>
void for_each_field(const push_endpoint::push_stats& s, F&& f) {
    f("sent", s.sent);
    f("dropped_no_peer", s.dropped_no_peer);
    f("dropped_oversized", s.dropped_oversized);
    f("send_errors", s.send_errors);
}

template <class F>
void for_each_field(const pull_endpoint::pull_stats& s, F&& f) {
    f("received", s.received);
    f("dropped_oversized", s.dropped_oversized);
    f("dropped_multipart", s.dropped_multipart);
    f("recv_errors", s.recv_errors);
}

}  // namespace oppsched::daemon
