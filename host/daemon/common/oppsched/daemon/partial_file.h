#pragma once
// Trace files written under a temporary name (docs/daemons.md "Traces"): a daemon writes
// NAME.partial, flushes it to the disk every stats period (fflush + fdatasync), and renames
// it to NAME when it closes the file at a clean exit. A file still named NAME.partial after a
// run is the trace of a daemon that died: complete up to its last flush, perhaps with a cut
// last line, which the runner reports (tools/oppsched/experiments/testbed/traces.py).
#include <cstdio>
#include <string>

namespace oppsched::daemon {

inline constexpr const char* kPartialSuffix = ".partial";

inline std::string partial_path(const std::string& path) { return path + kPartialSuffix; }

// Opens partial_path(path) for writing (truncated, unbuffered: the writers keep their own
// buffers); nullptr with errno on failure.
std::FILE* open_partial(const std::string& path);

// After a failed write (a full disk): the file cut back to `size` bytes (its last whole row
// or record) and the position set there, the stream's error flag cleared, so that the
// next write continues a well-formed file. false if that failed too.
bool rewind_file(std::FILE* f, long long size);

// fflush + fdatasync of an open trace file. false on an I/O error.
bool sync_file(std::FILE* f);

// sync_file, fclose, and rename partial_path(path) to path. f is null afterwards. false
// (errno kept) on any error; the file then stays under its partial name.
bool finish_partial(std::FILE*& f, const std::string& path);

}  // namespace oppsched::daemon
