#pragma once
// Buffered CSV trace writer (traces of docs/daemons.md: pandas reads each in one call).
// Rows are built field by field into an in-memory buffer that is written to the file when it
// exceeds buffer_bytes, on flush() and on destruction. The file is PATH.partial while it is
// written (partial_file.h): sync() puts it on the disk (the daemons call it every stats
// period), close() or the destructor renames it to PATH, so a PATH present is a whole trace
// and a PATH.partial left behind the trace of a daemon that died, whole up to its last sync.
// Doubles use the shortest "%.9g"-like form; NaN/inf are written as empty fields (pandas: NaN).
// Strings containing a comma, quote or newline are quoted (RFC 4180).
//
// A write that fails (a full disk) loses the rows in the buffer, counted in errors() (the
// failed writes) and rows_lost(); the file is cut back to its last whole row, so what was
// written before is kept and the next write that succeeds continues a well-formed trace.
// The daemons report both in their stats (traces.<name>_errors, traces.<name>_rows_lost),
// which summary.json turns into errors naming the trace (docs/testbed.md, "Reliability").
//
//   csv_writer w(path, {"slot", "user", "outcome"});
//   w.field(std::uint64_t{7}).field(std::int64_t{-1}).field("ack").end_row();
//
// end_row() with a field count different from the header throws std::logic_error (a bug).
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace oppsched::daemon {

class csv_writer final {
  public:
    // Creates/truncates PATH.partial and writes the header. Throws std::runtime_error naming
    // the path.
    csv_writer(const std::string& path, std::vector<std::string> header,
               std::size_t buffer_bytes = 1 << 16);
    ~csv_writer();
    csv_writer(const csv_writer&) = delete;
    csv_writer& operator=(const csv_writer&) = delete;

    csv_writer& field(std::int64_t v);
    csv_writer& field(std::uint64_t v);
    csv_writer& field(int v) { return field(static_cast<std::int64_t>(v)); }
    csv_writer& field(unsigned v) { return field(static_cast<std::uint64_t>(v)); }
    csv_writer& field(double v);
    csv_writer& field(std::string_view v);
    csv_writer& field(const char* v) { return field(std::string_view(v)); }
    csv_writer& empty();  // an empty field
    void end_row();

    // Writes the buffer to the file (fflush too). false on I/O error (counted in errors()).
    bool flush();
    // flush() and fdatasync: what was written survives a crash of the daemon (or the host).
    bool sync();
    // sync(), close and rename PATH.partial to PATH (at most once; the destructor calls it).
    // false on an I/O error (counted in errors()); the file then keeps its partial name.
    bool close();
    std::uint64_t rows() const { return rows_; }
    std::uint64_t errors() const { return errors_; }
    std::uint64_t rows_lost() const { return rows_lost_; }  // of rows(): not in the file
    std::size_t columns() const { return header_.size(); }
    const std::string& path() const { return path_; }
    int fd() const;  // of the open file (for disk_syncer), -1 once closed

  private:
    void sep();
    std::string path_;
    std::vector<std::string> header_;
    std::size_t buffer_bytes_;
    std::FILE* f_ = nullptr;
    std::string buf_;
    std::size_t fields_in_row_ = 0;
    std::string header_line_;
    std::uint64_t rows_ = 0;
    std::uint64_t errors_ = 0;
    std::uint64_t rows_lost_ = 0;
    std::uint64_t written_ = 0;  // bytes in the file: whole rows only
};

}  // namespace oppsched::daemon
