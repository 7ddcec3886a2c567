// signalfd-based signal handling: see oppsched/daemon/signals.h.
#include "oppsched/daemon/signals.h"

#include <pthread.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace oppsched::daemon {

signal_set::signal_set() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    if (pthread_sigmask(SIG_BLOCK, &set, &old_mask_) != 0)
        throw std::runtime_error("pthread_sigmask failed");
    fd_ = ::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) {
        const int e = errno;
        pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
        throw std::runtime_error(std::string("signalfd: ") + std::strerror(e));
    }
    std::signal(SIGPIPE, SIG_IGN);
}

signal_set::~signal_set() {
    // A SIGTERM that arrives after the loop has stopped reading (the runner signals the
    // process group and the pid) must not kill a daemon that is already exiting cleanly:
    // ignore the handled signals, drop what is pending, and only then restore the mask.
    std::signal(SIGTERM, SIG_IGN);
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGUSR1, SIG_IGN);
    if (fd_ >= 0) ::close(fd_);
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

signal_set::pending_signals signal_set::drain() {
    pending_signals p;
    signalfd_siginfo si;
    for (;;) {
        const ssize_t n = ::read(fd_, &si, sizeof si);
        if (n != static_cast<ssize_t>(sizeof si)) break;  // EAGAIN: nothing more
        const int sig = static_cast<int>(si.ssi_signo);
        if (sig == SIGTERM || sig == SIGINT) {
            p.stop = true;
            p.stop_signal = sig;
        } else if (sig == SIGUSR1) {
            p.dump_stats = true;
        }
    }
    return p;
}

}  // namespace oppsched::daemon
