#pragma once
// A thread that puts the daemons' files on the disk off their real-time loop. fdatasync and
// fsync wait for the disk (tens of milliseconds on a busy one); the apd must answer each
// slot request within lead_slots and a client its HARQ feedback in time, so the loop only
// fflushes (to the page cache: enough for a crash of the daemon) and hands the rest here.
//
// One job at a time, in order: fdatasync of the trace files' descriptors, then each whole
// file (the stats JSON) written to PATH.tmp, fsynced and renamed to PATH, so the stats on
// the disk never count a trace row the disk lacks. Requests made while a job runs are
// merged into the next one (a file's newest text wins). Start it after the capabilities
// are dropped (drop_all_capabilities refuses a second thread) and before the seccomp
// filter (no thread can be created after it); its calls are on every daemon's allow-list.
// drain() before closing a descriptor it may still sync. Errors are counted, not logged
// (the daemons' loggers are single-threaded): the loop reads errors().
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace oppsched::daemon {

// PATH.tmp written, fsynced and renamed over PATH. false (errno kept) on any error.
bool write_file_durably(const std::string& path, const std::string& text);

class disk_syncer final {
  public:
    disk_syncer();
    ~disk_syncer();  // finishes what was asked, then stops
    disk_syncer(const disk_syncer&) = delete;
    disk_syncer& operator=(const disk_syncer&) = delete;

    void sync_fd(int fd);
    void write_file(const std::string& path, std::string text);
    // Returns once everything asked so far is on the disk.
    void drain();

    std::uint64_t jobs() const { return jobs_.load(); }
    std::uint64_t errors() const { return errors_.load(); }

  private:
    void run();
    std::mutex mu_;
    std::condition_variable cv_;
    std::set<int> fds_;
    std::map<std::string, std::string> files_;
    bool busy_ = false;
    bool stop_ = false;
    std::atomic<std::uint64_t> jobs_{0}, errors_{0};
    std::thread thread_;
};

}  // namespace oppsched::daemon
