// Trace files under a temporary name: see oppsched/daemon/partial_file.h.
#include "oppsched/daemon/partial_file.h"

#include <unistd.h>

#include <cerrno>

namespace oppsched::daemon {

std::FILE* open_partial(const std::string& path) {
    std::FILE* f = std::fopen(partial_path(path).c_str(), "w");
    // Unbuffered: the writers buffer whole rows and records themselves, so that a failed
    // write leaves nothing half-written in a stdio buffer (they cut the file back to its
    // last whole row, rewind_file below).
    if (f) std::setvbuf(f, nullptr, _IONBF, 0);
    return f;
}

bool rewind_file(std::FILE* f, long long size) {
    if (!f) return false;
    std::clearerr(f);
    const int fd = ::fileno(f);
    return ::ftruncate(fd, static_cast<off_t>(size)) == 0 &&
           ::fseeko(f, static_cast<off_t>(size), SEEK_SET) == 0;
}

bool sync_file(std::FILE* f) {
    if (!f) return false;
    if (std::fflush(f) != 0) return false;
    return ::fdatasync(::fileno(f)) == 0;
}

bool finish_partial(std::FILE*& f, const std::string& path) {
    if (!f) return false;
    bool ok = sync_file(f);
    int err = ok ? 0 : errno;
    if (std::fclose(f) != 0 && ok) {
        ok = false;
        err = errno;
    }
    f = nullptr;
    if (ok && std::rename(partial_path(path).c_str(), path.c_str()) != 0) {
        ok = false;
        err = errno;
    }
    errno = err;
    return ok;
}

}  // namespace oppsched::daemon
