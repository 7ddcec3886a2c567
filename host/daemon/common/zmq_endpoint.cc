// ZeroMQ endpoint helpers: see oppsched/daemon/zmq_endpoint.h.
#include "oppsched/daemon/zmq_endpoint.h"

#include <sys/stat.h>
#include <unistd.h>

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
           "' binds a non-loopback address: without ZeroMQ CURVE authentication (not "
           "supported yet, docs/security.md) anyone on that network could inject packets and "
           "forge feedback; bind ipc:// or tcp://127.0.0.1";
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
        if (role == socket_role::bind) {
            if (const auto why = bind_refusal(endpoint); !why.empty())
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
        ++stats_.received;
        return true;
    }
}

}  // namespace oppsched::daemon
