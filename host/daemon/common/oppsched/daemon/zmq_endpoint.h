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
#include <map>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

namespace oppsched::daemon {

// ZeroMQ CURVE (CurveZMQ, RFC 26) for one socket: Curve25519 keys as Z85 text (40
// characters, zmq_z85_encode of 32 bytes). With secret_key set, a bound socket is a CURVE
// server (every peer must hold a client key the zap_handler of the same context accepts;
// traffic is encrypted and authenticated) and a connected socket a CURVE client of
// server_key. docs/security.md, "Runs across machines".
struct curve_keys {
    std::string secret_key;  // this side's secret key; "" = no CURVE
    std::string public_key;  // this side's public key (client side; a server needs none)
    std::string server_key;  // client side: the server's public key
    bool enabled() const { return !secret_key.empty(); }
};

// The ZAP domain the CURVE servers announce (RFC 27); the zap_handler answers any.
inline constexpr const char* kZapDomain = "oppsched";

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
    curve_keys curve;       // CURVE server (bind) or client (connect) when enabled()
};

// true iff this libzmq was built with CURVE (zmq_has("curve"); Debian's is, with libsodium).
bool curve_available();

// A fresh CURVE key pair (zmq_curve_keypair): {public, secret}, Z85.
std::pair<std::string, std::string> curve_keypair();

// The public key of a Z85 secret key (zmq_curve_public). Throws std::invalid_argument if
// `secret_z85` is not a 40-character Z85 key.
std::string curve_public_of(const std::string& secret_z85);

// A key file: one Z85 key (40 characters; surrounding white space ignored), as
// `oppsched keys generate` writes it. A secret key file (secret = true) must not be
// readable or writable by group or others (mode 0600 or stricter), like ssh's. Throws
// std::runtime_error naming the path and what is wrong (never the key).
std::string read_curve_key_file(const std::string& path, bool secret);

// The integrity key file (integrity.h): 32 hexadecimal digits, mode 0600 or stricter.
// Returns the 16 key bytes as a string; throws std::runtime_error naming the path.
std::string read_secret_hex_file(const std::string& path, std::size_t bytes);

// The ZAP handler (ZeroMQ Authentication Protocol, RFC 27) of a context whose CURVE servers
// authenticate clients: it maps each client's CURVE public key to its user id, which then
// rides on every message of that connection as the "User-Id" property
// (pull_endpoint::peer_user_id). An unknown key is refused (status 400): the handshake
// fails and nothing the peer sends is ever delivered. It must exist before the first CURVE
// server socket is bound, and serve() must be called whenever pollitem() is readable (the
// handshake waits for the answer; the daemons poll it in their main loop).
class zap_handler final {
  public:
    struct zap_stats {
        std::uint64_t accepted = 0;  // handshakes of a known key
        std::uint64_t refused_unknown_key = 0;
        std::uint64_t refused_mechanism = 0;  // not CURVE (a plain-text peer on a CURVE socket)
        std::uint64_t malformed = 0;          // requests not of RFC 27's form: unanswerable
    };
    // users_by_key: Z85 public key -> user id (decimal text). Binds inproc://zeromq.zap.01.
    zap_handler(zmq::context_t& ctx, std::map<std::string, std::string> users_by_key);

    // The answer to one request (its frames), as RFC 27 wants it; empty if the request is
    // malformed beyond answering. Counts in stats(). No I/O: the tests call it directly.
    std::vector<std::string> answer(const std::vector<std::string>& request);
    // Answers every pending request (non-blocking). Returns how many were answered.
    std::size_t serve();
    zmq::pollitem_t pollitem() { return {static_cast<void*>(sock_), 0, ZMQ_POLLIN, 0}; }
    const zap_stats& stats() const { return stats_; }

  private:
    std::map<std::string, std::string> users_;
    zmq::socket_t sock_;
    zap_stats stats_;
};

template <class F>
void for_each_field(const zap_handler::zap_stats& s, F&& f) {
    f("accepted", s.accepted);
    f("refused_unknown_key", s.refused_unknown_key);
    f("refused_mechanism", s.refused_mechanism);
    f("malformed", s.malformed);
}

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
// the network inject packets and forge feedback; it needs ZeroMQ CURVE (socket_options::
// curve), so the config loaders reject it without keys, naming the field, and make_socket
// refuses it.
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
    // The user id the zap_handler gave the connection the last message returned by
    // receive() came on ("" on a socket without CURVE).
    const std::string& peer_user_id() const { return peer_user_id_; }

  private:
    std::string name_;
    std::size_t max_len_;
    zmq::socket_t sock_;
    pull_stats stats_;
    std::string peer_user_id_;
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
