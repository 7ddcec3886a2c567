// Stats JSON: see oppsched/daemon/stats.h.
#include "oppsched/daemon/stats.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "oppsched/daemon/disk_syncer.h"
#include "oppsched/daemon/json.h"
#include "oppsched/validation.h"

namespace oppsched::daemon {
namespace {

void append_value(std::string& out, const stats_registry::value_type& v) {
    if (const auto* u = std::get_if<std::uint64_t>(&v)) {
        out += std::to_string(*u);
    } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
        out += std::to_string(*i);
    } else if (const auto* d = std::get_if<double>(&v)) {
        if (!std::isfinite(*d)) {
            out += "null";
        } else {
            char b[32];
            std::snprintf(b, sizeof b, "%.17g", *d);
            out += b;
        }
    } else if (const auto* b = std::get_if<bool>(&v)) {
        out += *b ? "true" : "false";
    } else {
        append_json_string(out, std::get<std::string>(v));
    }
}

std::vector<std::string> split(const std::string& name) {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
        const auto dot = name.find('.', start);
        parts.push_back(name.substr(start, dot - start));
        if (dot == std::string::npos) break;
        start = dot + 1;
    }
    return parts;
}

}  // namespace

void stats_registry::check_name(const std::string& name) const {
    if (name.empty() || name.front() == '.' || name.back() == '.' ||
        name.find("..") != std::string::npos)
        throw_invalid("stats name '" + name + "' is not a dotted path");
    if (values_.count(name)) return;
    // Neither a prefix of an existing name nor having an existing name as its prefix.
    const auto it = values_.lower_bound(name + ".");
    if (it != values_.end() && it->first.compare(0, name.size() + 1, name + ".") == 0)
        throw_invalid("stats name '" + name + "' is a prefix of '" + it->first + "'");
    for (std::size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1))
        if (values_.count(name.substr(0, dot)))
            throw_invalid("stats name '" + name + "' extends leaf '" + name.substr(0, dot) + "'");
}

std::uint64_t& stats_registry::counter(const std::string& name) {
    auto it = values_.find(name);
    if (it == values_.end()) {
        check_name(name);
        it = values_.emplace(name, std::uint64_t{0}).first;
    }
    if (!std::holds_alternative<std::uint64_t>(it->second)) it->second = std::uint64_t{0};
    return std::get<std::uint64_t>(it->second);
}

void stats_registry::set(const std::string& name, value_type v) {
    auto it = values_.find(name);
    if (it == values_.end()) {
        check_name(name);
        values_.emplace(name, std::move(v));
    } else if (std::holds_alternative<std::uint64_t>(it->second) &&
               std::holds_alternative<std::uint64_t>(v)) {
        std::get<std::uint64_t>(it->second) = std::get<std::uint64_t>(v);  // keep references
    } else {
        it->second = std::move(v);
    }
}

const stats_registry::value_type* stats_registry::find(const std::string& name) const {
    const auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
}

std::string stats_registry::to_json() const {
    // values_ is sorted, so names sharing a prefix are adjacent: emit a nested object by
    // closing/opening levels between consecutive names.
    std::string out = "{";
    std::vector<std::string> open;  // currently open object path
    std::vector<bool> first{true};
    for (const auto& [name, value] : values_) {
        const auto parts = split(name);
        std::size_t common = 0;
        while (common < open.size() && common + 1 < parts.size() && open[common] == parts[common])
            ++common;
        while (open.size() > common) {
            out += "}";
            open.pop_back();
            first.pop_back();
        }
        for (std::size_t i = common; i + 1 < parts.size(); ++i) {
            if (!first.back()) out += ",";
            first.back() = false;
            append_json_string(out, parts[i]);
            out += ":{";
            open.push_back(parts[i]);
            first.push_back(true);
        }
        if (!first.back()) out += ",";
        first.back() = false;
        append_json_string(out, parts.back());
        out += ":";
        append_value(out, value);
    }
    while (!open.empty()) {
        out += "}";
        open.pop_back();
    }
    out += "}\n";
    return out;
}

bool stats_registry::write_json(const std::string& path) const {
    return write_file_durably(path, to_json());
}

}  // namespace oppsched::daemon
