#pragma once
// The daemons' seccomp filters (docs/security.md, "Seccomp"): once a daemon has opened
// everything it needs (TUN, trace files, sockets) and dropped its privileges, it installs an
// allow-list of the system calls its loop makes; any other call kills the whole process
// (SECCOMP_RET_KILL_PROCESS: the run sees it die by SIGSYS, and the kernel's audit log names
// the call). The lists were taken from `strace -f -c` of real runs in every mode (abstract
// and sample PHY, MAC captures, medium modes, the apd restart fault) and are kept in
// seccomp.cc with the reason for each group.
//
// install_seccomp() applies to every thread of the process at once (TSYNC), so it may be
// called after ZeroMQ started its I/O threads. It sets no_new_privs (libseccomp does).
// Throws std::runtime_error naming the libseccomp call that failed.
#include <string>
#include <vector>

namespace oppsched::daemon {

enum class seccomp_profile {
    apd,     // ZeroMQ (bound and accepted ipc/tcp sockets), TUN, stats/trace files
    client,  // the same, plus a timerfd and a connecting uplink socket (reconnects)
    delay,   // AF_PACKET sockets opened before, epoll, timerfd, signalfd, the stats file
};

const char* to_string(seccomp_profile p);

// The system calls the profile allows, by name (those this architecture lacks are skipped
// when the filter is built).
std::vector<std::string> seccomp_allowed(seccomp_profile p);

struct seccomp_result {
    int rules = 0;  // rules added (names known on this architecture)
    std::string summary() const;
};

seccomp_result install_seccomp(seccomp_profile p);

// The Seccomp: field of /proc/self/status (0 none, 1 strict, 2 filter), -1 if unreadable.
int seccomp_mode();

}  // namespace oppsched::daemon
