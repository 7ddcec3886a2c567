#pragma once
// Typed, strict reading of a daemon's YAML configuration (docs/daemons.md: "each validates
// it at start: unknown keys, wrong types, NaN/negative values ... an error naming the field
// and the value, exit status 2, before any device or socket is created").
//
// Usage:
//   auto root = config_node::load_file(path);              // config_error on I/O/syntax error
//   double p = root.child("aqm").child("params").get<double>("max_p", 0.1,
//                                                             Range::open_closed(0, 1));
//   auto users = root.child("users").items();            // sequence -> nodes "users[0]" ...
//   root.check_no_unknown_keys();                        // every key below root was read
//
// Every error is a config_error (a std::invalid_argument) whose message starts with the dotted
// path of the field and names the offending value, e.g.
//   "aqm.params.max_p: 1.5 not in (0,1]"
//   "harq.max_tx: 'three' is not an integer"
//   "scheduler.kind: 'pff' not one of pf, rr, maxrate"
//   "aqm.params.maxp: unknown key (known here: max_p, min_th)"
//
// Rules:
// - Numbers are plain YAML scalars; quoted scalars ("5") are strings, not numbers.
// - NaN and +-inf are always rejected for numeric types (".nan", "nan", "inf", "1e999").
// - Integers must be written as integers (no "1.5", no "1e3"); range-checked for the type.
// - bool: true/false (also True/False/TRUE/FALSE).
// - A null value (`key:` or `key: ~`) is a type error, never silently "default".
// - Duplicate keys in one mapping are an error.
// - check_no_unknown_keys() walks the whole subtree: every mapping key must have been read
//   by get/require/child/optional_child/get_choice (a key read with a default counts as known
//   even when absent). Reading is tracked across copies of nodes of the same document.
// Cost: parsing is yaml-cpp's; every accessor is O(keys of the mapping).
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "oppsched/daemon/value_range.h"

namespace oppsched::daemon {

// Control bytes of the message (a key or value the file spelt with them) are written as \xNN:
// a NUL would otherwise end what() there and leave the user an empty or cut-off error.
class config_error final : public std::invalid_argument {
  public:
    explicit config_error(const std::string& message);
    explicit config_error(const char* message) : config_error(std::string(message)) {}
};

class config_node final {
  public:
    // Parses a file / a YAML text. Syntax errors name the file, line and column.
    static config_node load_file(const std::string& path);
    static config_node parse(const std::string& yaml_text, const std::string& origin = "<string>");

    // Dotted path of this node: "" for the root, "aqm.params", "users[2]".
    const std::string& path() const { return path_; }
    // "path.key" (or "key" at the root): for messages.
    std::string field(const std::string& key) const;

    bool is_map() const;
    bool is_sequence() const;
    bool is_null() const;
    bool has(const std::string& key) const;  // does not mark the key as read

    // Optional scalar: the default when the key is absent. T is one of bool, int, unsigned,
    // std::int64_t, std::uint64_t, std::uint32_t, std::uint16_t, std::uint8_t, double,
    // float, std::string, or std::vector of one of those (a YAML sequence).
    // The range applies to numbers (and to each element of a numeric vector); the default is
    // not range-checked (the caller's defaults are trusted).
    template <class T>
    T get(const std::string& key, const T& def, const value_range& r = value_range{}) const;
    // Optional value where an explicit null (`key:` / `key: ~` / `key: null`) also means
    // "not set" (for fields a generator writes as null when it has no value).
    template <class T>
    std::optional<T> get_optional(const std::string& key,
                                  const value_range& r = value_range{}) const;
    // Required scalar: config_error "<path>: missing" when absent.
    template <class T>
    T require(const std::string& key, const value_range& r = value_range{}) const;
    // This node itself as a value (e.g. the elements of items()).
    template <class T>
    T as(const value_range& r = value_range{}) const;

    // A string that must be one of `choices`.
    std::string get_choice(const std::string& key, const std::string& def,
                           const std::vector<std::string>& choices) const;

    // Sub-mapping/sequence. child(): config_error when absent; an absent key with
    // child_or_empty() gives an empty mapping (so its get()s all return defaults).
    config_node child(const std::string& key) const;
    config_node child_or_empty(const std::string& key) const;
    std::optional<config_node> optional_child(const std::string& key) const;

    // Elements of a sequence (config_error if this node is not a sequence), paths "x[i]".
    std::vector<config_node> items() const;
    // Keys of a mapping, in document order (config_error if not a mapping). Does not mark them.
    std::vector<std::string> keys() const;
    // Marks a key as known without reading it (e.g. a key documented as ignored).
    void mark_read(const std::string& key) const;

    // config_error naming the first key under this node (recursively) that was never read.
    void check_no_unknown_keys() const;

    // Throws config_error("<path>.<key>: <message>") (or "<path>: <message>" with key "").
    [[noreturn]] void fail(const std::string& key, const std::string& message) const;

    const YAML::Node& yaml() const { return node_; }

  private:
    struct shared_state {
        std::set<std::string> read;  // dotted paths of keys read
    };
    config_node(YAML::Node node, std::string path, std::shared_ptr<shared_state> shared);
    YAML::Node lookup(const std::string& key) const;  // Null-typed invalid node if absent
    config_node sub(const std::string& key, YAML::Node n) const;
    void check_unknown_rec(const YAML::Node& n, const std::string& path) const;

    YAML::Node node_;
    std::string path_;
    std::shared_ptr<shared_state> shared_;
};

}  // namespace oppsched::daemon
