// Capability drop: see oppsched/daemon/privileges.h.
#include "oppsched/daemon/privileges.h"

#include <dirent.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace oppsched::daemon {
namespace {

int capget_raw(__user_cap_header_struct* h, __user_cap_data_struct* d) {
    return static_cast<int>(::syscall(SYS_capget, h, d));
}
int capset_raw(__user_cap_header_struct* h, const __user_cap_data_struct* d) {
    return static_cast<int>(::syscall(SYS_capset, h, d));
}

int thread_count() {
    int n = 0;
    if (DIR* d = ::opendir("/proc/self/task")) {
        while (const dirent* e = ::readdir(d))
            if (e->d_name[0] != '.') ++n;
        ::closedir(d);
    }
    return n;
}

int cap_last_cap() {
    std::ifstream f("/proc/sys/kernel/cap_last_cap");
    int v = -1;
    if (f >> v && v >= 0) return v;
    return CAP_LAST_CAP;
}

bool holds(unsigned cap) {
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3]{};
    if (capget_raw(&h, d) != 0) return false;
    return (d[cap / 32].effective >> (cap % 32)) & 1u;
}

}  // namespace

std::string privilege_drop::summary() const {
    return "capabilities dropped (bounding set: " + std::to_string(bounding_dropped) +
           " removed, securebits " + (securebits_locked ? "locked" : "unchanged") +
           ", no_new_privs set)";
}

bool has_any_capability() {
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3]{};
    if (capget_raw(&h, d) != 0) return true;  // cannot tell: assume the worst
    for (const auto& x : d)
        if (x.effective || x.permitted) return true;
    return false;
}

privilege_drop drop_all_capabilities() {
    privilege_drop r;
    const int threads = thread_count();
    if (threads > 1)
        throw std::runtime_error("drop_all_capabilities: " + std::to_string(threads) +
                                 " threads exist; capabilities are per thread, call it before "
                                 "starting any (zmq::context_t)");
    if (holds(CAP_SETPCAP)) {
        const unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                   SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED;
        r.securebits_locked = ::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) == 0;
        const int last = cap_last_cap();
        for (int cap = 0; cap <= last; ++cap) {
            if (::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) != 1) continue;
            if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0)
                throw std::runtime_error("PR_CAPBSET_DROP " + std::to_string(cap) + ": " +
                                         std::strerror(errno));
            ++r.bounding_dropped;
        }
    }
    // Ambient set: clearing it needs no privilege (EINVAL on kernels < 4.3: nothing to clear).
    ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3]{};  // all sets empty
    if (capset_raw(&h, d) != 0)
        throw std::runtime_error(std::string("capset: ") + std::strerror(errno));
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
        throw std::runtime_error(std::string("PR_SET_NO_NEW_PRIVS: ") + std::strerror(errno));
    if (has_any_capability()) throw std::runtime_error("capabilities still held after capset");
    return r;
}

}  // namespace oppsched::daemon
