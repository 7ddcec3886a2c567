#pragma once
// A full disk for a test, without root or a filesystem of its own: RLIMIT_FSIZE lowered for
// the scope of the object, so that a write past `bytes` in any file fails (EFBIG; SIGXFSZ
// ignored meanwhile), as a write to a full disk fails with ENOSPC. Restored on destruction.
#include <sys/resource.h>

#include <csignal>
#include <stdexcept>

namespace oppsched::daemon::testing {

class fsize_limit final {
  public:
    explicit fsize_limit(rlim_t bytes) {
        if (::getrlimit(RLIMIT_FSIZE, &old_) != 0) throw std::runtime_error("getrlimit");
        old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
        rlimit r = old_;
        r.rlim_cur = bytes;
        if (::setrlimit(RLIMIT_FSIZE, &r) != 0) throw std::runtime_error("setrlimit");
    }
    ~fsize_limit() {
        ::setrlimit(RLIMIT_FSIZE, &old_);
        std::signal(SIGXFSZ, old_handler_);
    }
    fsize_limit(const fsize_limit&) = delete;
    fsize_limit& operator=(const fsize_limit&) = delete;

  private:
    rlimit old_{};
    void (*old_handler_)(int) = SIG_DFL;
};

}  // namespace oppsched::daemon::testing
