// Buffered CSV writer: see oppsched/daemon/csv_writer.h.
#include "oppsched/daemon/csv_writer.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "oppsched/daemon/partial_file.h"
#include "oppsched/validation.h"

namespace oppsched::daemon {

csv_writer::csv_writer(const std::string& path, std::vector<std::string> header,
                       std::size_t buffer_bytes)
    : path_(path), header_(std::move(header)), buffer_bytes_(buffer_bytes) {
    if (header_.empty()) throw_invalid("csv_writer: empty header for " + path);
    f_ = open_partial(path);
    if (!f_)
        throw std::runtime_error("cannot open " + partial_path(path) + ": " + std::strerror(errno));
    buf_.reserve(buffer_bytes_ + 256);
    for (const auto& h : header_) field(std::string_view(h));
    fields_in_row_ = header_.size();
    end_row();
    rows_ = 0;  // the header is not a row
    header_line_ = buf_;
    flush();
}

csv_writer::~csv_writer() { close(); }

int csv_writer::fd() const { return f_ ? ::fileno(f_) : -1; }

bool csv_writer::sync() {
    if (!flush()) return false;  // counted there
    if (sync_file(f_)) return true;
    ++errors_;
    return false;
}

bool csv_writer::close() {
    if (!f_) return false;
    const bool flushed = flush();  // a failure is counted there; the trace is still renamed
    const bool ok = finish_partial(f_, path_);
    if (!ok) ++errors_;
    return ok && flushed;
}

void csv_writer::sep() {
    if (fields_in_row_++ > 0) buf_ += ',';
}

csv_writer& csv_writer::field(std::int64_t v) {
    sep();
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, v);
    buf_.append(b, r.ptr);
    return *this;
}

csv_writer& csv_writer::field(std::uint64_t v) {
    sep();
    char b[24];
    auto r = std::to_chars(b, b + sizeof b, v);
    buf_.append(b, r.ptr);
    return *this;
}

csv_writer& csv_writer::field(double v) {
    sep();
    if (!std::isfinite(v)) return *this;  // empty -> NaN for pandas
    char b[32];
    const int n = std::snprintf(b, sizeof b, "%.9g", v);
    buf_.append(b, static_cast<std::size_t>(n));
    return *this;
}

csv_writer& csv_writer::field(std::string_view v) {
    sep();
    if (v.find_first_of(",\"\n\r") == std::string_view::npos) {
        buf_.append(v);
        return *this;
    }
    buf_ += '"';
    for (const char c : v) {
        if (c == '"') buf_ += '"';
        buf_ += c;
    }
    buf_ += '"';
    return *this;
}

csv_writer& csv_writer::empty() {
    sep();
    return *this;
}

void csv_writer::end_row() {
    if (fields_in_row_ != header_.size())
        throw std::logic_error("csv_writer " + path_ + ": row has " +
                               std::to_string(fields_in_row_) + " fields, header has " +
                               std::to_string(header_.size()));
    buf_ += '\n';
    fields_in_row_ = 0;
    ++rows_;
    if (buf_.size() >= buffer_bytes_) flush();
}

bool csv_writer::flush() {
    if (!f_) return false;
    bool ok = true;
    if (!buf_.empty()) {
        // Unbuffered stream (open_partial): a short write is a write(2) that failed.
        ok = std::fwrite(buf_.data(), 1, buf_.size(), f_) == buf_.size();
        if (ok) written_ += buf_.size();
    }
    ok = (std::fflush(f_) == 0) && ok;
    if (ok) {
        buf_.clear();
        return true;
    }
    // A full or failing disk: the buffered rows are lost, and counted; the file is cut back
    // to its last whole row, so what was written before stays readable and a later write
    // (once there is room) continues it without a torn line.
    ++errors_;
    std::uint64_t lines = 0;
    for (const char c : buf_) lines += c == '\n';
    if (written_ == 0 && lines > 0) --lines;  // the header, still to be written
    rows_lost_ += lines;
    const int err = errno;
    buf_.clear();
    rewind_file(f_, static_cast<long long>(written_));
    if (written_ == 0) buf_ = header_line_;  // a trace always starts with its header
    errno = err;
    return false;
}

}  // namespace oppsched::daemon
