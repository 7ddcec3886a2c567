#pragma once
// SIGTERM/SIGINT (graceful stop) and SIGUSR1 (write stats now) delivered through a signalfd,
// so a daemon's zmq::poll loop waits on them like on any socket. SIGPIPE is ignored.
//
// IMPORTANT: construct signal_set before any thread exists (before zmq::context_t, which
// starts I/O threads): it blocks the signals in the calling thread and threads inherit the
// mask; a thread without them blocked would take the default action (terminate).
#include <csignal>

namespace oppsched::daemon {

class signal_set final {
  public:
    struct pending_signals {
        bool stop = false;        // SIGTERM or SIGINT arrived
        bool dump_stats = false;  // SIGUSR1 arrived
        int stop_signal = 0;      // which one stopped us (SIGTERM/SIGINT), 0 if none
    };
    signal_set();   // throws std::runtime_error if the signalfd cannot be created
    ~signal_set();  // restores the previous mask
    signal_set(const signal_set&) = delete;
    signal_set& operator=(const signal_set&) = delete;

    int fd() const { return fd_; }  // readable when a signal is pending
    // Reads every pending signal (non-blocking) and reports what arrived since the last call.
    pending_signals drain();

  private:
    int fd_ = -1;
    sigset_t old_mask_;
};

}  // namespace oppsched::daemon
