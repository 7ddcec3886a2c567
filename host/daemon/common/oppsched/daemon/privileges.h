#pragma once
// Drops every capability once the daemon holds what it needed them for (the TUN fd, opened
// as a persistent device the runner made; docs/daemons.md "Signals and lifetime").
//
// What it does, in this order (raw syscalls via <linux/capability.h>; libcap is not needed):
//   1. refuses (std::runtime_error) if the process has more than one thread: capability sets
//      are per thread, so call it BEFORE creating zmq::context_t (its I/O threads would keep
//      the capabilities);
//   2. securebits NOROOT | NO_SETUID_FIXUP | KEEP_CAPS (all locked), when CAP_SETPCAP is held,
//      so that uid 0 regains nothing through execve or setuid;
//   3. drops every capability from the bounding set (PR_CAPBSET_DROP 0..cap_last_cap);
//   4. clears the ambient set;
//   5. capset(): effective, permitted and inheritable sets all empty;
//   6. PR_SET_NO_NEW_PRIVS = 1 (no set-uid/file-capability gain through execve);
//   7. verifies with capget() that effective and permitted are empty.
// What is kept: the uid/gid (root stays uid 0 but without CAP_DAC_OVERRIDE etc.: it can only
// write files/dirs uid 0 owns - the runner's run folder - and cannot touch network config),
// open file descriptors (TUN, trace files), and nothing else.
// Without privileges to start with (non-root, no capabilities) it succeeds doing steps 4-7.
#include <string>

namespace oppsched::daemon {

struct privilege_drop {
    int bounding_dropped = 0;  // capabilities removed from the bounding set
    bool securebits_locked = false;
    std::string summary() const;
};

privilege_drop drop_all_capabilities();

// true if the calling thread's effective or permitted set is not empty.
bool has_any_capability();

}  // namespace oppsched::daemon
