// Disk syncs off the daemons' loops: see oppsched/daemon/disk_syncer.h.
#include "oppsched/daemon/disk_syncer.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <vector>

namespace oppsched::daemon {

bool write_file_durably(const std::string& path, const std::string& text) {
    const std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "w");
    if (!f) return false;
    // On the disk before the rename: after a crash (even of the host) the file holds the
    // previous text or this one, never a name pointing at nothing written yet.
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size() &&
                    std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
    const int err = errno;
    if (std::fclose(f) != 0 || !ok) {
        ::unlink(tmp.c_str());
        errno = ok ? errno : err;
        return false;
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        const int e = errno;
        ::unlink(tmp.c_str());
        errno = e;
        return false;
    }
    return true;
}

disk_syncer::disk_syncer() : thread_([this] { run(); }) {}

disk_syncer::~disk_syncer() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void disk_syncer::sync_fd(int fd) {
    if (fd < 0) return;
    {
        std::lock_guard<std::mutex> lk(mu_);
        fds_.insert(fd);
    }
    cv_.notify_all();
}

void disk_syncer::write_file(const std::string& path, std::string text) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        files_[path] = std::move(text);
    }
    cv_.notify_all();
}

void disk_syncer::drain() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return !busy_ && fds_.empty() && files_.empty(); });
}

void disk_syncer::run() {
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
        cv_.wait(lk, [this] { return stop_ || !fds_.empty() || !files_.empty(); });
        if (fds_.empty() && files_.empty()) return;  // stop_, nothing left
        const std::vector<int> fds(fds_.begin(), fds_.end());
        std::map<std::string, std::string> files;
        files.swap(files_);
        fds_.clear();
        busy_ = true;
        lk.unlock();
        for (const int fd : fds)
            if (::fdatasync(fd) != 0) ++errors_;
        for (const auto& [path, text] : files)
            if (!write_file_durably(path, text)) ++errors_;
        ++jobs_;
        lk.lock();
        busy_ = false;
        cv_.notify_all();
    }
}

}  // namespace oppsched::daemon
