// pcap file writer: see oppsched/daemon/pcap_writer.h.
#include "oppsched/daemon/pcap_writer.h"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "oppsched/daemon/log.h"
#include "oppsched/daemon/partial_file.h"

namespace oppsched::daemon {

namespace {

// pcap is written in the host's byte order; readers tell it from the magic number.
template <class T>
void put(std::vector<std::uint8_t>& out, T v) {
    std::uint8_t b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    out.insert(out.end(), b, b + sizeof v);
}

}  // namespace

time_ns realtime_ns() {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<time_ns>(ts.tv_sec) * kNsPerSec + ts.tv_nsec;
}

pcap_writer::pcap_writer(const std::string& path, const options& opt) : path_(path), opt_(opt) {
    if (opt_.max_bytes < kFileHeaderBytes)
        throw std::invalid_argument("pcap max_bytes: " + std::to_string(opt_.max_bytes) +
                                    " is smaller than the file header (24 bytes)");
    f_ = open_partial(path);
    if (!f_)
        throw std::runtime_error("cannot create " + partial_path(path) + ": " +
                                 std::strerror(errno));
    buf_.reserve(opt_.buffer_bytes + 1024);
    put<std::uint32_t>(buf_, kMagicNs);
    put<std::uint16_t>(buf_, 2);  // version 2.4
    put<std::uint16_t>(buf_, 4);
    put<std::int32_t>(buf_, 0);   // thiszone
    put<std::uint32_t>(buf_, 0);  // sigfigs
    put<std::uint32_t>(buf_, opt_.snaplen);
    put<std::uint32_t>(buf_, opt_.linktype);
    header_ = buf_;
    bytes_ = kFileHeaderBytes;
    last_flush_ = monotonic_ns();
    if (!flush()) {
        std::fclose(f_);
        throw std::runtime_error("cannot write " + partial_path(path) + ": " +
                                 std::strerror(errno));
    }
}

pcap_writer::~pcap_writer() {
    if (f_ && !close())
        spdlog::error("{}: cannot finish the capture: {}", path_, std::strerror(errno));
}

bool pcap_writer::close() {
    if (!f_) return false;
    const bool flushed = flush();  // a failure is counted there; the capture is still renamed
    if (truncated_)
        spdlog::warn("{}: capture truncated at {} bytes (limit {}): {} records not written", path_,
                     bytes_, opt_.max_bytes, dropped_);
    const bool ok = finish_partial(f_, path_);
    if (!ok) ++errors_;
    return ok && flushed;
}

bool pcap_writer::write(time_ns t, const std::uint8_t* a, std::size_t a_len, const std::uint8_t* b,
                        std::size_t b_len) {
    const std::size_t len = a_len + b_len;
    if (truncated_ || len > opt_.snaplen) {
        ++dropped_;
        return false;
    }
    if (bytes_ + kRecordHeaderBytes + len > opt_.max_bytes) {
        truncated_ = true;
        ++dropped_;
        spdlog::warn(
            "{}: capture truncated: the next record would pass the size limit of {} "
            "bytes; no more records are written",
            path_, opt_.max_bytes);
        flush();
        return false;
    }
    const time_ns ts = t < 0 ? 0 : t;
    put<std::uint32_t>(buf_, static_cast<std::uint32_t>(ts / kNsPerSec));
    put<std::uint32_t>(buf_, static_cast<std::uint32_t>(ts % kNsPerSec));
    put<std::uint32_t>(buf_, static_cast<std::uint32_t>(len));
    put<std::uint32_t>(buf_, static_cast<std::uint32_t>(len));
    if (a_len) buf_.insert(buf_.end(), a, a + a_len);
    if (b_len) buf_.insert(buf_.end(), b, b + b_len);
    bytes_ += kRecordHeaderBytes + len;
    ++records_;
    ++buf_records_;
    if (buf_.size() >= opt_.buffer_bytes)
        flush();
    else
        poll();
    return true;
}

void pcap_writer::poll() {
    // In the page cache: a crash of the daemon leaves every record up to the last
    // flush_interval (the daemons put it on the disk every stats period, disk_syncer.h).
    if (monotonic_ns() - last_flush_ >= opt_.flush_interval) flush();
}

bool pcap_writer::flush() {
    last_flush_ = monotonic_ns();
    if (!f_) return false;
    bool ok = true;
    if (!buf_.empty()) {
        // Unbuffered stream (open_partial): a short write is a write(2) that failed.
        ok = std::fwrite(buf_.data(), 1, buf_.size(), f_) == buf_.size();
        if (ok) written_ += buf_.size();
    }
    ok = std::fflush(f_) == 0 && ok;
    if (ok) {
        buf_.clear();
        buf_records_ = 0;
        return true;
    }
    // A full or failing disk: the buffered records are lost, and counted; the file is cut
    // back to its last whole record (the header first, if it never reached the file).
    ++errors_;
    const int err = errno;
    lost_ += buf_records_;
    buf_records_ = 0;
    buf_.clear();
    rewind_file(f_, static_cast<long long>(written_));
    if (written_ == 0) buf_ = header_;
    bytes_ = written_ + buf_.size();
    errno = err;
    return false;
}

}  // namespace oppsched::daemon
