// ZeroMQ endpoint helpers: see oppsched/daemon/zmq_endpoint.h.
#include "oppsched/daemon/zmq_endpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace oppsched::daemon {

void ensure_ipc_dir(const std::string& endpoint) {
    static const std::string kIpc = "ipc://";
    if (endpoint.compare(0, kIpc.size(), kIpc) != 0) return;
    const std::string path = endpoint.substr(kIpc.size());
    const auto slash = path.rfind('/');
    if (slash == std::string::npos || slash == 0) return;
    const std::string dir = path.substr(0, slash);
    // mkdir -p, one component at a time.
    for (std::size_t pos = 1; pos <= dir.size(); ++pos) {
        if (pos != dir.size() && dir[pos] != '/') continue;
        const std::string part = dir.substr(0, pos);
        if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
            throw std::runtime_error("cannot create ipc directory " + part + ": " +
                                     std::strerror(errno));
    }
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
        throw std::runtime_error("ipc directory " + dir + " is not a directory");
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
            ensure_ipc_dir(endpoint);
            s.bind(endpoint);
        } else {
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
