// Strict YAML configuration reader: see oppsched/daemon/config.h.
#include "oppsched/daemon/config.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace oppsched::daemon {
namespace {

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) s += ", ";
        s += v[i];
    }
    return s;
}

const char* kind_name(const YAML::Node& n) {
    switch (n.Type()) {
        case YAML::NodeType::Null:
            return "null";
        case YAML::NodeType::Sequence:
            return "a list";
        case YAML::NodeType::Map:
            return "a mapping";
        case YAML::NodeType::Scalar:
            return "a scalar";
        default:
            return "undefined";
    }
}

// A scalar shown in an error: quoted when it is not a number-looking token.
std::string show(const YAML::Node& n) {
    if (!n.IsScalar()) return kind_name(n);
    return "'" + n.Scalar() + "'";
}

bool is_quoted(const YAML::Node& n) { return n.Tag() == "!"; }

template <class T>
constexpr const char* type_word() {
    if constexpr (std::is_same_v<T, bool>)
        return "a boolean (true/false)";
    else if constexpr (std::is_floating_point_v<T>)
        return "a number";
    else if constexpr (std::is_unsigned_v<T>)
        return "a non-negative integer";
    else if constexpr (std::is_integral_v<T>)
        return "an integer";
    else
        return "a string";
}

template <class T>
struct is_vector : std::false_type {};
template <class U>
struct is_vector<std::vector<U>> : std::true_type {
    using elem = U;
};

}  // namespace

config_node::config_node(YAML::Node node, std::string path, std::shared_ptr<shared_state> shared)
    : node_(std::move(node)), path_(std::move(path)), shared_(std::move(shared)) {}

namespace {
// Duplicate keys are kept by yaml-cpp's map list; reject them once, at load.
void check_duplicates(const YAML::Node& n, const std::string& path) {
    auto sub = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
    if (n.IsMap()) {
        std::set<std::string> seen;
        for (const auto& kv : n) {
            if (!kv.first.IsScalar())
                throw config_error((path.empty() ? std::string("<root>") : path) +
                                   ": mapping key is not a scalar");
            const std::string k = kv.first.Scalar();
            if (!seen.insert(k).second) throw config_error(sub(k) + ": duplicate key");
            check_duplicates(kv.second, sub(k));
        }
    } else if (n.IsSequence()) {
        std::size_t i = 0;
        for (const auto& e : n) check_duplicates(e, path + "[" + std::to_string(i++) + "]");
    }
}
}  // namespace

config_node config_node::parse(const std::string& text, const std::string& origin) {
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
        throw config_error(origin + ":" + std::to_string(e.mark.line + 1) + ":" +
                           std::to_string(e.mark.column + 1) + ": YAML syntax error: " + e.msg);
    }
    if (root.IsNull()) root = YAML::Node(YAML::NodeType::Map);  // empty document
    if (!root.IsMap())
        throw config_error(origin + ": the configuration must be a mapping, got " +
                           kind_name(root));
    check_duplicates(root, "");
    return config_node(root, "", std::make_shared<shared_state>());
}

namespace {
std::string printable(const std::string& s) {
    std::string out;
    out.reserve(s.size());
    for (const char c : s) {
        const auto b = static_cast<unsigned char>(c);
        if ((b < 0x20 && c != '\n' && c != '\t') || b == 0x7F) {
            static const char* hex = "0123456789abcdef";
            out += "\\x";
            out += hex[b >> 4];
            out += hex[b & 15];
        } else {
            out += c;
        }
    }
    return out;
}
}  // namespace

config_error::config_error(const std::string& message)
    : std::invalid_argument(printable(message)) {}

config_node config_node::load_file(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw config_error(path + ": cannot read: " + std::strerror(errno));
    std::stringstream ss;
    ss << in.rdbuf();
    return parse(ss.str(), path);
}

std::string config_node::field(const std::string& key) const {
    if (key.empty()) return path_.empty() ? std::string("<root>") : path_;
    return path_.empty() ? key : path_ + "." + key;
}

void config_node::fail(const std::string& key, const std::string& message) const {
    throw config_error(field(key) + ": " + message);
}

bool config_node::is_map() const { return node_.IsMap(); }
bool config_node::is_sequence() const { return node_.IsSequence(); }
bool config_node::is_null() const { return node_.IsNull(); }

YAML::Node config_node::lookup(const std::string& key) const {
    if (!node_.IsMap()) fail("", std::string("expected a mapping, got ") + show(node_));
    for (const auto& kv : node_)
        if (kv.first.Scalar() == key) return kv.second;
    return YAML::Node(YAML::NodeType::Undefined);
}

bool config_node::has(const std::string& key) const {
    return node_.IsMap() && lookup(key).IsDefined();
}

void config_node::mark_read(const std::string& key) const { shared_->read.insert(field(key)); }

config_node config_node::sub(const std::string& key, YAML::Node n) const {
    return config_node(std::move(n), field(key), shared_);
}

namespace {

template <class T>
T convert_scalar(const YAML::Node& n, const std::string& where, const value_range& r) {
    auto bad_type = [&]() -> config_error {
        return config_error(where + ": " + show(n) + " is not " + type_word<T>());
    };
    if (!n.IsScalar()) throw bad_type();
    const std::string& s = n.Scalar();
    if constexpr (std::is_same_v<T, std::string>) {
        (void)r;
        return s;
    } else if constexpr (std::is_same_v<T, bool>) {
        (void)r;
        if (is_quoted(n)) throw bad_type();
        if (s == "true" || s == "True" || s == "TRUE") return true;
        if (s == "false" || s == "False" || s == "FALSE") return false;
        throw bad_type();
    } else if constexpr (std::is_floating_point_v<T>) {
        if (is_quoted(n) || s.empty()) throw bad_type();
        double v = 0;
        if (s == ".nan" || s == ".NaN" || s == ".NAN") {
            v = std::nan("");
        } else if (s == ".inf" || s == ".Inf" || s == ".INF" || s == "+.inf" || s == "+.Inf") {
            v = HUGE_VAL;
        } else if (s == "-.inf" || s == "-.Inf" || s == "-.INF") {
            v = -HUGE_VAL;
        } else {
            char* end = nullptr;
            errno = 0;
            v = std::strtod(s.c_str(), &end);
            if (end == s.c_str() || *end != '\0') throw bad_type();
        }
        if (!std::isfinite(v)) throw config_error(where + ": " + s + " is not a finite number");
        if (!r.contains(v)) throw config_error(where + ": " + s + " not in " + r.describe());
        if constexpr (std::is_same_v<T, float>) {
            if (std::fabs(v) > 3.0e38) throw config_error(where + ": " + s + " out of float range");
        }
        return static_cast<T>(v);
    } else {
        static_assert(std::is_integral_v<T>, "unsupported config type");
        if (is_quoted(n) || s.empty()) throw bad_type();
        std::size_t i = 0;
        bool neg = false;
        if (s[0] == '-' || s[0] == '+') {
            neg = s[0] == '-';
            i = 1;
        }
        if (i >= s.size()) throw bad_type();
        for (std::size_t j = i; j < s.size(); ++j)
            if (s[j] < '0' || s[j] > '9') throw bad_type();
        errno = 0;
        char* end = nullptr;
        if (neg) {
            long long v = std::strtoll(s.c_str(), &end, 10);
            if (errno == ERANGE || v < static_cast<long long>(std::numeric_limits<T>::min()))
                throw config_error(where + ": " + s + " out of range for " + type_word<T>());
            if (!r.contains(static_cast<double>(v)))
                throw config_error(where + ": " + s + " not in " + r.describe());
            return static_cast<T>(v);
        }
        unsigned long long v = std::strtoull(s.c_str() + i, &end, 10);
        if (errno == ERANGE || v > static_cast<unsigned long long>(std::numeric_limits<T>::max()))
            throw config_error(where + ": " + s + " out of range for " + type_word<T>());
        if (!r.contains(static_cast<double>(v)))
            throw config_error(where + ": " + s + " not in " + r.describe());
        return static_cast<T>(v);
    }
}

template <class T>
T convert(const YAML::Node& n, const std::string& where, const value_range& r) {
    if constexpr (is_vector<T>::value) {
        using E = typename is_vector<T>::elem;
        if (!n.IsSequence())
            throw config_error(where + ": " + show(n) + " is not a list of " + type_word<E>());
        T out;
        std::size_t i = 0;
        for (const auto& e : n)
            out.push_back(convert_scalar<E>(e, where + "[" + std::to_string(i++) + "]", r));
        return out;
    } else {
        return convert_scalar<T>(n, where, r);
    }
}

}  // namespace

template <class T>
T config_node::get(const std::string& key, const T& def, const value_range& r) const {
    YAML::Node n = lookup(key);
    mark_read(key);
    if (!n.IsDefined()) return def;
    return convert<T>(n, field(key), r);
}

template <class T>
std::optional<T> config_node::get_optional(const std::string& key, const value_range& r) const {
    YAML::Node n = lookup(key);
    mark_read(key);
    if (!n.IsDefined() || n.IsNull()) return std::nullopt;
    return convert<T>(n, field(key), r);
}

template <class T>
T config_node::require(const std::string& key, const value_range& r) const {
    YAML::Node n = lookup(key);
    mark_read(key);
    if (!n.IsDefined()) fail(key, "missing (required)");
    return convert<T>(n, field(key), r);
}

template <class T>
T config_node::as(const value_range& r) const {
    return convert<T>(node_, field(""), r);
}

#define OPPSCHED_CONFIG_INSTANTIATE(T)                                                             \
    template T config_node::get<T>(const std::string&, const T&, const value_range&) const;        \
    template T config_node::require<T>(const std::string&, const value_range&) const;              \
    template std::optional<T> config_node::get_optional<T>(const std::string&, const value_range&) \
        const;                                                                                     \
    template T config_node::as<T>(const value_range&) const;                                       \
    template std::vector<T> config_node::get<std::vector<T>>(                                      \
        const std::string&, const std::vector<T>&, const value_range&) const;                      \
    template std::vector<T> config_node::require<std::vector<T>>(const std::string&,               \
                                                                 const value_range&) const;        \
    template std::vector<T> config_node::as<std::vector<T>>(const value_range&) const;

OPPSCHED_CONFIG_INSTANTIATE(bool)
OPPSCHED_CONFIG_INSTANTIATE(int)
OPPSCHED_CONFIG_INSTANTIATE(unsigned)
OPPSCHED_CONFIG_INSTANTIATE(long)
OPPSCHED_CONFIG_INSTANTIATE(unsigned long)
OPPSCHED_CONFIG_INSTANTIATE(long long)
OPPSCHED_CONFIG_INSTANTIATE(unsigned long long)
OPPSCHED_CONFIG_INSTANTIATE(std::uint16_t)
OPPSCHED_CONFIG_INSTANTIATE(std::uint8_t)
OPPSCHED_CONFIG_INSTANTIATE(double)
OPPSCHED_CONFIG_INSTANTIATE(float)
OPPSCHED_CONFIG_INSTANTIATE(std::string)
#undef OPPSCHED_CONFIG_INSTANTIATE

std::string config_node::get_choice(const std::string& key, const std::string& def,
                                    const std::vector<std::string>& choices) const {
    const std::string v = get<std::string>(key, def);
    for (const auto& c : choices)
        if (c == v) return v;
    fail(key, "'" + v + "' not one of " + join(choices));
}

config_node config_node::child(const std::string& key) const {
    YAML::Node n = lookup(key);
    mark_read(key);
    if (!n.IsDefined()) fail(key, "missing (required)");
    return sub(key, n);
}

config_node config_node::child_or_empty(const std::string& key) const {
    YAML::Node n = lookup(key);
    mark_read(key);
    if (!n.IsDefined()) return sub(key, YAML::Node(YAML::NodeType::Map));
    if (!n.IsMap()) fail(key, std::string("expected a mapping, got ") + show(n));
    return sub(key, n);
}

std::optional<config_node> config_node::optional_child(const std::string& key) const {
    YAML::Node n = lookup(key);
    mark_read(key);
    if (!n.IsDefined()) return std::nullopt;
    return sub(key, n);
}

std::vector<config_node> config_node::items() const {
    if (!node_.IsSequence()) fail("", std::string("expected a list, got ") + show(node_));
    std::vector<config_node> out;
    std::size_t i = 0;
    for (const auto& e : node_) {
        out.push_back(config_node(e, path_ + "[" + std::to_string(i) + "]", shared_));
        ++i;
    }
    return out;
}

std::vector<std::string> config_node::keys() const {
    if (!node_.IsMap()) fail("", std::string("expected a mapping, got ") + show(node_));
    std::vector<std::string> out;
    for (const auto& kv : node_) out.push_back(kv.first.Scalar());
    return out;
}

void config_node::check_unknown_rec(const YAML::Node& n, const std::string& path) const {
    auto sub_path = [&](const std::string& k) { return path.empty() ? k : path + "." + k; };
    if (n.IsMap()) {
        std::vector<std::string> known;
        for (const auto& kv : n) {
            const std::string p = sub_path(kv.first.Scalar());
            if (shared_->read.count(p)) known.push_back(kv.first.Scalar());
        }
        for (const auto& kv : n) {
            const std::string p = sub_path(kv.first.Scalar());
            if (!shared_->read.count(p)) {
                // Suggest the keys this level does read (those present or defaulted).
                std::vector<std::string> here;
                const std::string prefix = path.empty() ? "" : path + ".";
                for (const auto& r : shared_->read) {
                    if (r.compare(0, prefix.size(), prefix) != 0) continue;
                    std::string rest = r.substr(prefix.size());
                    if (rest.empty() || rest.find('.') != std::string::npos ||
                        rest.find('[') != std::string::npos)
                        continue;
                    here.push_back(rest);
                }
                throw config_error(
                    p + ": unknown key" +
                    (here.empty() ? std::string() : " (known here: " + join(here) + ")"));
            }
            check_unknown_rec(kv.second, p);
        }
    } else if (n.IsSequence()) {
        std::size_t i = 0;
        for (const auto& e : n) check_unknown_rec(e, path + "[" + std::to_string(i++) + "]");
    }
}

void config_node::check_no_unknown_keys() const { check_unknown_rec(node_, path_); }

}  // namespace oppsched::daemon
