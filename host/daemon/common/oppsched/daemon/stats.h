#pragma once
// Named counters written as one JSON document (docs/daemons.md: "*.stats.json: counters
// written at exit and on SIGUSR1"). Names are dotted paths and are written as nested
// objects: "malformed.uplink" -> {"malformed": {"uplink": 3}}. A name may not be both a
// leaf and a prefix of another name (std::invalid_argument when setting it).
// Keys are written sorted. Non-finite doubles are written as null.
#include <cstdint>
#include <map>
#include <string>
#include <variant>

namespace oppsched::daemon {

class stats_registry final {
  public:
    using value_type = std::variant<std::uint64_t, std::int64_t, double, bool, std::string>;

    // A counter, created at 0. The reference stays valid for the life of this object.
    std::uint64_t& counter(const std::string& name);
    // Sets a value (overwrites, any type).
    void set(const std::string& name, value_type v);
    // Sets every field of a stats struct under prefix + key, as its for_each_field
    // (oppsched/stats_fields.h, or beside the daemon's own structs) names them.
    template <class S>
    void set_fields(const std::string& prefix, const S& stats) {
        for_each_field(stats,
                       [&](const char* key, const auto& value) { set(prefix + key, value); });
    }
    bool contains(const std::string& name) const { return values_.count(name) != 0; }
    const value_type* find(const std::string& name) const;

    std::string to_json() const;
    // Writes "<path>.tmp", fsyncs it, then renames it over path (readers never see a partial
    // file; after a crash path holds the last figures written whole).
    // Returns false on any error (errno kept); never throws for I/O.
    bool write_json(const std::string& path) const;

  private:
    void check_name(const std::string& name) const;
    std::map<std::string, value_type> values_;
};

}  // namespace oppsched::daemon
