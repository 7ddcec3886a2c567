// ZeroMQ endpoint helpers: see oppsched/daemon/zmq_endpoint.h.
#include "oppsched/daemon/zmq_endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace oppsched::daemon {

namespace {
const std::string kIpc = "ipc://";

// The directory of "ipc://DIR/NAME", or "" for other transports and bare names.
std::string ipc_dir_of(const std::string& endpoint) {
    if (endpoint.compare(0, kIpc.size(), kIpc) != 0) return {};
    const std::string path = endpoint.substr(kIpc.size());
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return {};
    return path.substr(0, slash);
}
}  // namespace

void check_ipc_dir(const std::string& endpoint) {
    const std::string dir = ipc_dir_of(endpoint);
    if (dir.empty()) return;
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0)
        throw std::runtime_error("ipc directory " + dir + ": " + std::strerror(errno));
    if (S_ISLNK(st.st_mode))
        throw std::runtime_error("ipc directory " + dir + " is a symbolic link; refusing it");
    if (!S_ISDIR(st.st_mode))
        throw std::runtime_error("ipc directory " + dir + " is not a directory");
    if (st.st_uid != ::geteuid())
        throw std::runtime_error("ipc directory " + dir + " belongs to uid " +
                                 std::to_string(st.st_uid) + ", not to this process (uid " +
                                 std::to_string(::geteuid()) + ")");
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0)
        throw std::runtime_error("ipc directory " + dir + " is writable by group or others (mode " +
                                 std::to_string((st.st_mode >> 6) & 7) +
                                 std::to_string((st.st_mode >> 3) & 7) +
                                 std::to_string(st.st_mode & 7) + ")");
}

std::string bind_refusal(const std::string& endpoint) {
    static const std::string kTcp = "tcp://";
    if (endpoint.compare(0, kTcp.size(), kTcp) != 0) return {};
    std::string host = endpoint.substr(kTcp.size());
    const auto colon = host.rfind(':');
    if (colon != std::string::npos) host = host.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
        host = host.substr(1, host.size() - 2);
    bool loopback = host == "::1" || host == "localhost" || host == "lo";
    if (!loopback && host.compare(0, 4, "127.") == 0) {
        unsigned a, b, c, d;
        char extra;
        loopback = std::sscanf(host.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &extra) == 4 &&
                   a == 127 && b < 256 && c < 256 && d < 256;
    }
    if (loopback) return {};
    return "'" + endpoint +
           "' binds a non-loopback address: without ZeroMQ CURVE keys anyone on that network "
           "could inject packets and forge feedback (docs/security.md); bind ipc:// or "
           "tcp://127.0.0.1";
}

void ensure_ipc_dir(const std::string& endpoint) {
    const std::string dir = ipc_dir_of(endpoint);
    if (dir.empty()) return;
    // mkdir -p, one component at a time; what this creates is private (0700).
    for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
            throw std::runtime_error("cannot create ipc directory " + part + ": " +
                                     std::strerror(errno));
    }
    check_ipc_dir(endpoint);
}

zmq::socket_t make_socket(zmq::context_t& ctx, zmq::socket_type type, const std::string& name,
                          const std::string& endpoint, socket_role role,
                          const socket_options& opt) {
    zmq::socket_t s(ctx, type);
    s.set(zmq::sockopt::linger, opt.linger_ms);
    s.set(zmq::sockopt::sndtimeo, opt.send_timeout_ms);
    s.set(zmq::sockopt::rcvtimeo, opt.recv_timeout_ms);
    s.set(zmq::sockopt::sndhwm, opt.send_hwm);
    s.set(zmq::sockopt::rcvhwm, opt.recv_hwm);
    s.set(zmq::sockopt::maxmsgsize, opt.max_msg_size);
    if (opt.immediate) s.set(zmq::sockopt::immediate, 1);
    try {
        if (opt.curve.enabled()) {
            if (role == socket_role::bind) {
                s.set(zmq::sockopt::curve_server, 1);
                s.set(zmq::sockopt::curve_secretkey, opt.curve.secret_key);
                s.set(zmq::sockopt::zap_domain, kZapDomain);
            } else {
                s.set(zmq::sockopt::curve_serverkey, opt.curve.server_key);
                s.set(zmq::sockopt::curve_publickey, opt.curve.public_key);
                s.set(zmq::sockopt::curve_secretkey, opt.curve.secret_key);
            }
        }
        if (role == socket_role::bind) {
            if (const auto why = bind_refusal(endpoint); !why.empty() && !opt.curve.enabled())
                throw std::runtime_error("refusing to bind: " + why);
            ensure_ipc_dir(endpoint);
            s.bind(endpoint);
        } else {
            check_ipc_dir(endpoint);
            s.connect(endpoint);
        }
    } catch (const zmq::error_t& e) {
        throw std::runtime_error(name + ": cannot " +
                                 (role == socket_role::bind ? std::string("bind ") : "connect ") +
                                 endpoint + ": " + e.what());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(name + ": " + e.what());
    }
    return s;
}

push_endpoint::push_endpoint(zmq::context_t& ctx, std::string name, const std::string& endpoint,
                             socket_role role, const socket_options& opt)
    : name_(std::move(name)),
      max_len_(opt.max_msg_size > 0 ? static_cast<std::size_t>(opt.max_msg_size) : SIZE_MAX),
      sock_(make_socket(ctx, zmq::socket_type::push, name_, endpoint, role, opt)) {}

bool push_endpoint::send(const void* data, std::size_t len, bool wait) {
    if (len > max_len_) {
        ++stats_.dropped_oversized;
        return false;
    }
    try {
        auto r = sock_.send(zmq::const_buffer(data, len),
                            wait ? zmq::send_flags::none : zmq::send_flags::dontwait);
        if (!r) {  // EAGAIN: no peer (ZMQ_IMMEDIATE), HWM reached or SNDTIMEO expired
            ++stats_.dropped_no_peer;
            return false;
        }
    } catch (const zmq::error_t&) {
        ++stats_.send_errors;
        return false;
    }
    ++stats_.sent;
    return true;
}

namespace {
socket_options pull_options(socket_options o) {
    if (o.max_msg_size > 0 && o.max_msg_size < (std::int64_t{1} << 40)) o.max_msg_size *= 2;
    return o;
}
}  // namespace

pull_endpoint::pull_endpoint(zmq::context_t& ctx, std::string name, const std::string& endpoint,
                             socket_role role, const socket_options& opt)
    : name_(std::move(name)),
      max_len_(opt.max_msg_size > 0 ? static_cast<std::size_t>(opt.max_msg_size) : SIZE_MAX),
      sock_(make_socket(ctx, zmq::socket_type::pull, name_, endpoint, role, pull_options(opt))) {}

bool pull_endpoint::receive(std::vector<std::uint8_t>& out, bool wait) {
    for (;;) {
        zmq::message_t msg;
        try {
            auto r = sock_.recv(msg, wait ? zmq::recv_flags::none : zmq::recv_flags::dontwait);
            if (!r) return false;
        } catch (const zmq::error_t& e) {
            if (e.num() == EINTR) return false;
            ++stats_.recv_errors;
            return false;
        }
        bool multipart = msg.more();
        while (multipart) {  // drain the rest of a multi-part message: one frame per message
            zmq::message_t extra;
            try {
                if (!sock_.recv(extra, zmq::recv_flags::dontwait)) break;
            } catch (const zmq::error_t&) {
                break;
            }
            multipart = extra.more();
        }
        if (msg.more()) {
            ++stats_.dropped_multipart;
            wait = false;
            continue;
        }
        if (msg.size() > max_len_) {
            ++stats_.dropped_oversized;
            wait = false;
            continue;
        }
        const auto* p = static_cast<const std::uint8_t*>(msg.data());
        out.assign(p, p + msg.size());
        // zmq_msg_gets: NULL (not an exception) when the connection has no User-Id.
        const char* uid = zmq_msg_gets(msg.handle(), "User-Id");
        peer_user_id_ = uid ? uid : "";
        ++stats_.received;
        return true;
    }
}

// ---- CURVE keys and the ZAP handler ----------------------------------------------------

namespace {
constexpr std::size_t kZ85KeyLen = 40;  // 32 bytes in Z85

bool is_z85_key(const std::string& k) {
    if (k.size() != kZ85KeyLen) return false;
    std::uint8_t bin[32];
    return zmq_z85_decode(bin, k.c_str()) != nullptr;
}

std::string read_small_file(const std::string& path, bool secret) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw std::runtime_error("key file " + path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw std::runtime_error("key file " + path + " is not a file");
    if (secret && (st.st_mode & 077) != 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw std::runtime_error("secret key file " + path +
                                 " is accessible by group or others "
                                 "(mode " +
                                 std::string(mode) + "); chmod 600 it");
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("key file " + path + ": " + std::strerror(errno));
    std::string text(256, '\0');
    const std::size_t n = std::fread(text.data(), 1, text.size(), f);
    std::fclose(f);
    text.resize(n);
    std::size_t b = 0, e = text.size();
    while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
    return text.substr(b, e - b);
}
}  // namespace

bool curve_available() { return zmq_has("curve") != 0; }

std::pair<std::string, std::string> curve_keypair() {
    char pub[kZ85KeyLen + 1], sec[kZ85KeyLen + 1];
    if (zmq_curve_keypair(pub, sec) != 0)
        throw std::runtime_error(std::string("zmq_curve_keypair: ") + zmq_strerror(zmq_errno()));
    return {pub, sec};
}

std::string curve_public_of(const std::string& secret_z85) {
    if (!is_z85_key(secret_z85))
        throw std::invalid_argument("not a CURVE key (40 characters of Z85)");
    char pub[kZ85KeyLen + 1];
    if (zmq_curve_public(pub, secret_z85.c_str()) != 0)
        throw std::runtime_error(std::string("zmq_curve_public: ") + zmq_strerror(zmq_errno()));
    return pub;
}

std::string read_curve_key_file(const std::string& path, bool secret) {
    std::string k = read_small_file(path, secret);
    if (!is_z85_key(k))
        throw std::runtime_error("key file " + path +
                                 " does not hold a CURVE key (40 characters of Z85, as "
                                 "`oppsched keys generate` writes)");
    return k;
}

std::string read_secret_hex_file(const std::string& path, std::size_t bytes) {
    const std::string k = read_small_file(path, true);
    bool hex = k.size() == 2 * bytes;
    for (char ch : k) hex = hex && std::isxdigit(static_cast<unsigned char>(ch));
    if (!hex)
        throw std::runtime_error("key file " + path + " does not hold " +
                                 std::to_string(2 * bytes) +
                                 " hexadecimal digits (as `oppsched keys generate` writes)");
    return k;
}

zap_handler::zap_handler(zmq::context_t& ctx, std::map<std::string, std::string> users_by_key)
    : users_(std::move(users_by_key)), sock_(ctx, zmq::socket_type::rep) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.bind("inproc://zeromq.zap.01");
}

std::vector<std::string> zap_handler::answer(const std::vector<std::string>& req) {
    // RFC 27: version, request id, domain, address, routing id, mechanism, credentials...
    if (req.size() < 6 || req[0] != "1.0") {
        ++stats_.malformed;
        if (req.size() < 2) return {};
        return {"1.0", req[1], "500", "malformed ZAP request", "", ""};
    }
    const std::string& mechanism = req[5];
    if (mechanism != "CURVE" || req.size() != 7 || req[6].size() != 32) {
        ++stats_.refused_mechanism;
        return {"1.0", req[1], "400", "CURVE with a client key required", "", ""};
    }
    char z85[kZ85KeyLen + 1];
    if (!zmq_z85_encode(z85, reinterpret_cast<const std::uint8_t*>(req[6].data()), 32)) {
        ++stats_.malformed;
        return {"1.0", req[1], "500", "bad key", "", ""};
    }
    const auto it = users_.find(z85);
    if (it == users_.end()) {
        ++stats_.refused_unknown_key;
        return {"1.0", req[1], "400", "unknown client key", "", ""};
    }
    ++stats_.accepted;
    return {"1.0", req[1], "200", "OK", it->second, ""};
}

std::size_t zap_handler::serve() {
    std::size_t n = 0;
    for (;;) {
        std::vector<std::string> req;
        bool more = true;
        while (more) {
            zmq::message_t m;
            try {
                if (!sock_.recv(m, req.empty() ? zmq::recv_flags::dontwait : zmq::recv_flags::none))
                    return n;
            } catch (const zmq::error_t& e) {
                if (e.num() == EAGAIN || e.num() == EINTR) return n;
                throw;
            }
            req.emplace_back(static_cast<const char*>(m.data()), m.size());
            more = m.more();
        }
        auto rep = answer(req);
        if (rep.empty())
            rep = {"1.0", "", "500", "malformed ZAP request", "", ""};  // REP: must reply
        for (std::size_t i = 0; i < rep.size(); ++i)
            sock_.send(zmq::buffer(rep[i]),
                       i + 1 < rep.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
        ++n;
    }
}

}  // namespace oppsched::daemon
