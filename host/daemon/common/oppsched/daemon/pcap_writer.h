#pragma once
// A pcap file writer (the classic libpcap format with nanosecond timestamps, magic
// 0xA1B23C4D, which Wireshark and tcpdump read), for the MAC captures of mac_capture.h.
// Records are buffered and written to the file when the buffer fills, at most every
// flush_interval (checked on write() and poll()), on flush() and on
// destruction, so a capture is readable while the run goes on and complete after a clean
// exit. The file is PATH.partial until the writer is destroyed, then renamed to PATH
// (partial_file.h): a PATH.partial left behind is the capture of a daemon that died.
//
// A size limit bounds the file: the first record that would take it past max_bytes is not
// written, neither is any after it; a warning "capture truncated" names the file and the
// limit once, and dropped() counts the records left out.
//
// A write that fails (a full disk) loses the buffered records, counted in errors() (the
// failed writes) and lost(); the file is cut back to its last whole record, so what was
// written before is kept and a later write continues a well-formed capture.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::daemon {

// CLOCK_REALTIME in ns (pcap timestamps are wall-clock time).
time_ns realtime_ns();

class pcap_writer final {
  public:
    static constexpr std::size_t kFileHeaderBytes = 24;
    static constexpr std::size_t kRecordHeaderBytes = 16;
    static constexpr std::uint32_t kMagicNs = 0xA1B23C4Du;

    struct options {
        std::uint32_t linktype = 147;    // LINKTYPE_USER0 (DLT_USER0)
        std::uint32_t snaplen = 262144;  // records are never cut; this is what the header says
        std::uint64_t max_bytes = 256ull << 20;  // file size limit, header included
        time_ns flush_interval = kNsPerSec;
        std::size_t buffer_bytes = 1 << 16;
    };

    // Creates/truncates PATH.partial and writes the file header. Throws std::runtime_error naming
    // the path; std::invalid_argument for max_bytes below the file header.
    pcap_writer(const std::string& path, const options& opt);
    ~pcap_writer();
    pcap_writer(const pcap_writer&) = delete;
    pcap_writer& operator=(const pcap_writer&) = delete;

    // One record of a ++ b (a pseudo-header and a payload, without copying them together),
    // stamped `t` (ns since the epoch). false if it was not written (size limit, or a record
    // longer than the snaplen, counted in dropped()).
    bool write(time_ns t, const std::uint8_t* a, std::size_t a_len, const std::uint8_t* b,
               std::size_t b_len);
    // Flushes if flush_interval has passed since the last flush (call once per loop turn).
    void poll();
    // Buffer to the file and fflush. false on an I/O error (counted in errors()).
    bool flush();
    // flush, fdatasync and rename PATH.partial to PATH (at most once; the destructor calls
    // it). false on an I/O error (counted in errors()).
    bool close();

    std::uint64_t records() const { return records_; }
    std::uint64_t bytes() const { return bytes_; }  // of the file, header included
    std::uint64_t dropped() const { return dropped_; }
    std::uint64_t errors() const { return errors_; }
    std::uint64_t lost() const { return lost_; }  // of records(): lost to a failed write
    bool truncated() const { return truncated_; }
    const std::string& path() const { return path_; }
    int fd() const { return f_ ? fileno(f_) : -1; }  // for disk_syncer

  private:
    std::string path_;
    options opt_;
    std::FILE* f_ = nullptr;
    std::vector<std::uint8_t> buf_;
    std::vector<std::uint8_t> header_;  // the file header, rewritten if it never got out
    std::uint64_t records_ = 0, bytes_ = 0, dropped_ = 0, errors_ = 0, lost_ = 0;
    std::uint64_t buf_records_ = 0;  // records in buf_
    std::uint64_t written_ = 0;      // bytes in the file: whole records only
    bool truncated_ = false;
    time_ns last_flush_ = 0;
};

}  // namespace oppsched::daemon
