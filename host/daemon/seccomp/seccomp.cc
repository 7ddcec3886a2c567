// The daemons' seccomp allow-lists: see oppsched/daemon/seccomp.h.
#include "oppsched/daemon/seccomp.h"

#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>

namespace oppsched::daemon {
namespace {

// Every daemon: memory, threads' synchronisation, time, its open files and the stats file
// it replaces (open, write, fsync, rename), signals it takes through a signalfd, exit.
const char* const kCommon[] = {
    // file descriptors already open, and the stats/trace files written while running
    "read", "write", "readv", "writev", "pread64", "pwrite64", "close", "lseek", "fstat",
    "newfstatat", "statx", "stat", "lstat", "openat", "open", "fcntl", "fsync", "fdatasync",
    "rename", "renameat", "renameat2", "unlink", "unlinkat",
    // a trace cut back to its last whole row after a failed write (a full disk: csv_writer.h)
    "ftruncate",
    // memory (malloc, the C++ runtime)
    "mmap", "munmap", "mremap", "mprotect", "brk", "madvise",
    // threads already running (ZeroMQ's I/O and reaper threads) and their wake-ups; a
    // ZeroMQ thread may still be starting when the filter is installed: it reads and sets
    // again its own scheduling parameters (without CAP_SYS_NICE nothing can be raised) and
    // names itself (prctl PR_SET_NAME, allowed below)
    "futex", "sched_yield", "sched_getaffinity", "sched_getparam", "sched_getscheduler",
    "sched_setscheduler", "set_robust_list", "rseq", "getrandom", "eventfd2",
    // waiting
    "poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2", "epoll_ctl",
    "epoll_create1", "clock_gettime", "clock_getres", "gettimeofday", "time", "clock_nanosleep",
    "nanosleep", "timerfd_settime", "timerfd_gettime",
    // identity (logging, libc)
    "getpid", "gettid", "getuid", "geteuid", "getgid", "getegid", "uname", "getrusage",
    // signals: the signalfd's mask, a handler reset at exit, the return from a handler
    "rt_sigprocmask", "rt_sigaction", "rt_sigreturn", "restart_syscall", "sigaltstack",
    // leaving
    "exit", "exit_group"};

// ZeroMQ's sockets: connections accepted on the bound endpoints and re-made on the
// connecting ones after a peer restarts (socket() itself is limited to AF_UNIX/INET/INET6).
// A CURVE handshake keeps its session keys in libsodium's locked memory (sodium_mlock:
// mlock, munlock), in the I/O thread, whenever a connection is made.
const char* const kZmq[] = {"connect",     "accept",      "accept4",    "getsockopt", "setsockopt",
                            "getsockname", "getpeername", "sendto",     "recvfrom",   "sendmsg",
                            "recvmsg",     "shutdown",    "socketpair", "mlock",      "munlock"};

// The delay stage: its two AF_PACKET sockets (opened before), batches of frames.
const char* const kDelay[] = {"sendto",   "recvfrom", "sendmsg",    "recvmsg",
                              "sendmmsg", "recvmmsg", "getsockopt", "setsockopt"};

struct ctx_deleter {
    void operator()(void* c) const { seccomp_release(c); }
};

void check(int rc, const std::string& what) {
    if (rc < 0) throw std::runtime_error("seccomp: " + what + ": " + std::strerror(-rc));
}

}  // namespace

const char* to_string(seccomp_profile p) {
    switch (p) {
        case seccomp_profile::apd:
            return "apd";
        case seccomp_profile::client:
            return "client";
        case seccomp_profile::delay:
            return "delay";
    }
    return "?";
}

std::vector<std::string> seccomp_allowed(seccomp_profile p) {
    std::vector<std::string> out(std::begin(kCommon), std::end(kCommon));
    if (p == seccomp_profile::delay)
        out.insert(out.end(), std::begin(kDelay), std::end(kDelay));
    else
        out.insert(out.end(), std::begin(kZmq), std::end(kZmq));
    return out;
}

std::string seccomp_result::summary() const {
    return "seccomp filter installed (" + std::to_string(rules) +
           " system calls allowed, any other kills the process)";
}

seccomp_result install_seccomp(seccomp_profile p) {
    std::unique_ptr<void, ctx_deleter> ctx(seccomp_init(SCMP_ACT_KILL_PROCESS));
    if (!ctx) throw std::runtime_error("seccomp: seccomp_init failed");
    check(seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_TSYNC, 1), "SCMP_FLTATR_CTL_TSYNC");
    seccomp_result r;
    for (const auto& name : seccomp_allowed(p)) {
        const int nr = seccomp_syscall_resolve_name(name.c_str());
        if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
        check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, nr, 0), "allow " + name);
        ++r.rules;
    }
    // raise()/abort() signal the process itself (tgkill(getpid(), ...)); never another one.
    check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(tgkill), 1,
                           SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(::getpid()))),
          "allow tgkill");
    ++r.rules;
    // Thread names (pthread_setname_np on itself), nothing else of prctl.
    check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(prctl), 1,
                           SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(PR_SET_NAME))),
          "allow prctl");
    ++r.rules;
    if (p != seccomp_profile::delay) {
        // New ZeroMQ connections only: Unix, IPv4 and IPv6 sockets (no AF_PACKET, netlink..).
        for (const int domain : {AF_UNIX, AF_INET, AF_INET6})
            check(seccomp_rule_add(ctx.get(), SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
                                   SCMP_A0(SCMP_CMP_EQ, static_cast<scmp_datum_t>(domain))),
                  "allow socket");
        ++r.rules;
    }
    check(seccomp_load(ctx.get()), "seccomp_load");
    return r;
}

int seccomp_mode() {
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("Seccomp:", 0) == 0) return std::atoi(line.c_str() + 8);
    return -1;
}

}  // namespace oppsched::daemon
