// The daemons' seccomp allow-lists (host/daemon/seccomp): each test forks, installs a
// profile in the child and makes one call; the parent reads how the child ended.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <zmq.hpp>

#include "oppsched/daemon/seccomp.h"

namespace {

using oppsched::daemon::install_seccomp;
using oppsched::daemon::seccomp_allowed;
using oppsched::daemon::seccomp_mode;
using oppsched::daemon::seccomp_profile;

// Runs body() in a child under profile p; returns its wait status. The child exits 0 when
// body returns true, 1 when it returns false, 3 if the filter could not be installed.
int in_child(seccomp_profile p, const std::function<bool()>& body) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        try {
            install_seccomp(p);
        } catch (...) {
            ::_exit(3);
        }
        ::_exit(body() ? 0 : 1);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
}

bool killed_by_sigsys(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS; }
bool exited_ok(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

TEST(seccomp, when_installed_then_proc_status_says_filter_and_the_loop_calls_still_work) {
    for (const auto p : {seccomp_profile::apd, seccomp_profile::client, seccomp_profile::delay}) {
        EXPECT_EQ(seccomp_mode(), 0);  // the test process itself is never filtered
        const int st = in_child(p, [] {
            int fds[2];
            if (::pipe(fds) != 0) return false;  // pipe2 is not needed by the daemons...
            return false;
        });
        // ...so pipe() is refused: proof that the filter is there at all.
        EXPECT_TRUE(killed_by_sigsys(st)) << to_string(p) << " status " << st;
        const int ok = in_child(p, [] {
            char b = 'x';
            return seccomp_mode() == 2 && ::write(STDERR_FILENO, &b, 0) == 0 && ::getpid() > 0;
        });
        EXPECT_TRUE(exited_ok(ok)) << to_string(p) << " status " << ok;
    }
}

TEST(seccomp, when_a_filtered_daemon_calls_execve_then_it_is_killed_by_sigsys) {
    for (const auto p : {seccomp_profile::apd, seccomp_profile::client, seccomp_profile::delay}) {
        const int st = in_child(p, [] {
            char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
            ::execve("/bin/true", argv, nullptr);
            return false;  // not reached: killed before
        });
        EXPECT_TRUE(killed_by_sigsys(st)) << to_string(p) << " status " << st;
    }
}

TEST(seccomp, when_a_filtered_daemon_signals_another_process_or_forks_then_it_is_killed) {
    const int kill_parent =
        in_child(seccomp_profile::apd, [] { return ::kill(::getppid(), 0) == 0; });
    EXPECT_TRUE(killed_by_sigsys(kill_parent)) << kill_parent;
    const int forked = in_child(seccomp_profile::client, [] { return ::fork() >= 0; });
    EXPECT_TRUE(killed_by_sigsys(forked)) << forked;
    // Signalling itself stays possible (raise, abort).
    const int self = in_child(seccomp_profile::apd, [] {
        // other tests of this binary leave SIGTERM blocked and ignored (signal_set)
        ::signal(SIGTERM, SIG_DFL);
        sigset_t term;
        sigemptyset(&term);
        sigaddset(&term, SIGTERM);
        ::sigprocmask(SIG_UNBLOCK, &term, nullptr);
        ::raise(SIGTERM);
        return true;
    });
    EXPECT_TRUE(WIFSIGNALED(self) && WTERMSIG(self) == SIGTERM) << self;
}

TEST(seccomp, when_the_zmq_daemons_open_a_socket_then_only_unix_and_inet_are_allowed) {
    const int unix_ok = in_child(seccomp_profile::client, [] {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        return fd >= 0 && ::close(fd) == 0;
    });
    EXPECT_TRUE(exited_ok(unix_ok)) << unix_ok;
    const int inet_ok = in_child(seccomp_profile::apd, [] {
        const int fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
        return fd >= 0 && ::close(fd) == 0;
    });
    EXPECT_TRUE(exited_ok(inet_ok)) << inet_ok;
    const int netlink =
        in_child(seccomp_profile::apd, [] { return ::socket(AF_NETLINK, SOCK_RAW, 0) >= 0; });
    EXPECT_TRUE(killed_by_sigsys(netlink)) << netlink;
    // The delay stage opens its AF_PACKET sockets before: no socket() at all afterwards.
    const int delay =
        in_child(seccomp_profile::delay, [] { return ::socket(AF_UNIX, SOCK_STREAM, 0) >= 0; });
    EXPECT_TRUE(killed_by_sigsys(delay)) << delay;
}

TEST(seccomp, when_installed_while_zmq_threads_are_starting_then_they_survive_and_carry_messages) {
    // The daemons install the filter right after making their sockets: ZeroMQ's I/O and
    // reaper threads may still be starting (they set their scheduling and their names).
    const std::string ep = "ipc:///tmp/oppsched_seccomp_" + std::to_string(::getpid());
    for (int round = 0; round < 20; ++round) {
        const pid_t pid = ::fork();
        if (pid == 0) {
            zmq::context_t ctx(1);
            zmq::socket_t rx(ctx, zmq::socket_type::pull);
            rx.bind(ep);
            zmq::socket_t tx(ctx, zmq::socket_type::push);
            tx.connect(ep);
            install_seccomp(round % 2 ? seccomp_profile::apd : seccomp_profile::client);
            tx.send(zmq::buffer(std::string("slot")), zmq::send_flags::none);
            zmq::message_t m;
            const bool ok = rx.recv(m, zmq::recv_flags::none) && m.to_string() == "slot";
            tx.close();
            rx.close();
            ctx.close();
            ::_exit(ok ? 0 : 1);
        }
        int status = 0;
        ::waitpid(pid, &status, 0);
        ASSERT_TRUE(exited_ok(status)) << "round " << round << " status " << status;
    }
}

TEST(seccomp, when_the_lists_are_read_then_no_process_creating_call_is_allowed) {
    for (const auto p : {seccomp_profile::apd, seccomp_profile::client, seccomp_profile::delay}) {
        const auto names = seccomp_allowed(p);
        for (const char* banned :
             {"execve", "execveat", "fork", "vfork", "clone", "clone3", "ptrace", "kill", "setuid",
              "capset", "bind", "listen", "mount", "chmod", "socket"})
            EXPECT_EQ(std::count(names.begin(), names.end(), banned), 0)
                << to_string(p) << " allows " << banned;
    }
}

}  // namespace
