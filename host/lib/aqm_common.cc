// The AQM factory, configuration validation (the one place it happens), names, and the
// service-rate estimator shared by the rate-based disciplines.
#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <string>
#include <type_traits>

#include "aqm_internal.h"
#include "oppsched/validation.h"

namespace oppsched::aqm {

// aqm_params::kind() is the variant index: the alternatives must follow aqm_kind's order.
static_assert(std::variant_size_v<algorithm_params> == kAqmKindCount);
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(aqm_kind::tlas),
                                                        algorithm_params>,
                             tlas_params>);
static_assert(std::is_same_v<std::variant_alternative_t<static_cast<std::size_t>(aqm_kind::spmaf),
                                                        algorithm_params>,
                             spm_af_params>);

namespace {

constexpr std::array<std::string_view, kAqmKindCount> kKindNames = {
    "droptail", "red", "rem", "reaqm", "avq", "codel", "pie", "spmaf", "las", "tlas"};
constexpr std::array<std::string_view, kDropReasonCount> kReasonNames = {
    "overflow",    "early_drop", "aqm_drop", "superseded_ack", "evicted_low_priority",
    "evicted_las", "flushed"};

// Each check is written so that NaN fails it.
void positive(const char* field, double v) {
    if (!(v > 0.0) || !std::isfinite(v)) throw_invalid(field, format_number(v), "must be > 0");
}
void non_negative(const char* field, double v) {
    if (!(v >= 0.0) || !std::isfinite(v)) throw_invalid(field, format_number(v), "must be >= 0");
}
void in_open_closed_unit(const char* field, double v) {
    if (!(v > 0.0 && v <= 1.0)) throw_invalid(field, format_number(v), "not in (0,1]");
}
void in_closed_unit(const char* field, double v) {
    if (!(v >= 0.0 && v <= 1.0)) throw_invalid(field, format_number(v), "not in [0,1]");
}
void positive_time(const char* field, time_ns v) {
    if (v <= 0) throw_invalid(field, std::to_string(v) + " ns", "must be > 0");
}

void validate_params(const drop_tail_params&, const aqm_params&) {}

void validate_params(const red_params& p, const aqm_params&) {
    non_negative("red.min_th", p.min_th);
    if (!(p.max_th > p.min_th) || !std::isfinite(p.max_th))
        throw_invalid("red.max_th", format_number(p.max_th),
                      "must be > min_th (" + format_number(p.min_th) + ")");
    in_open_closed_unit("red.w_q", p.w_q);
    in_open_closed_unit("red.max_p", p.max_p);
    positive("red.mean_packet_size", p.mean_packet_size);
}

void validate_params(const rem_params& p, const aqm_params&) {
    positive("rem.gamma", p.gamma);
    non_negative("rem.alpha", p.alpha);
    if (!(p.phi > 1.0) || !std::isfinite(p.phi))
        throw_invalid("rem.phi", format_number(p.phi), "must be > 1");
    non_negative("rem.target", p.target);
    positive_time("rem.update_interval", p.update_interval);
    in_open_closed_unit("rem.input_weight", p.input_weight);
    positive("rem.mean_packet_size", p.mean_packet_size);
}

void validate_params(const reaqm_params& p, const aqm_params&) {
    non_negative("reaqm.alpha", p.alpha);
    // Wang & Song, REAQM, eq. 5: "alpha' is relative weight parameter larger than alpha".
    if (p.modified_update && (!(p.alpha_prime > p.alpha) || !std::isfinite(p.alpha_prime)))
        throw_invalid(
            "reaqm.alpha_prime", format_number(p.alpha_prime),
            "must be > alpha (" + format_number(p.alpha) + "), Wang & Song, REAQM, eq. 5");
    positive("reaqm.gamma", p.gamma);
    if (!(p.phi > 1.0) || !std::isfinite(p.phi))
        throw_invalid("reaqm.phi", format_number(p.phi), "must be > 1");
    non_negative("reaqm.y0_ratio", p.y0_ratio);
    positive_time("reaqm.update_interval", p.update_interval);
    positive("reaqm.mean_packet_size", p.mean_packet_size);
}

void validate_params(const avq_params& p, const aqm_params&) {
    in_open_closed_unit("avq.gamma", p.gamma);
    positive("avq.alpha", p.alpha);
    positive("avq.mean_packet_size", p.mean_packet_size);
}

void validate_params(const codel_params& p, const aqm_params&) {
    positive_time("codel.target", p.target);
    positive_time("codel.interval", p.interval);
    if (p.target >= p.interval)
        throw_invalid("codel.target", std::to_string(p.target) + " ns",
                      "must be < interval (" + std::to_string(p.interval) + " ns)");
    if (p.mtu == 0) throw_invalid("codel.mtu", "0", "must be > 0");
}

void validate_params(const pie_params& p, const aqm_params&) {
    positive_time("pie.target", p.target);
    positive_time("pie.tupdate", p.tupdate);
    non_negative("pie.alpha", p.alpha);
    non_negative("pie.beta", p.beta);
    if (p.max_burst < 0)
        throw_invalid("pie.max_burst", std::to_string(p.max_burst) + " ns", "must be >= 0");
    in_closed_unit("pie.mark_ecn_threshold", p.mark_ecn_threshold);
    positive("pie.mean_packet_size", p.mean_packet_size);
}

void validate_params(const spm_af_params&, const aqm_params&) {}

void validate_params(const las_params& p, const aqm_params&) {
    positive_time("las.flow_idle_timeout", p.flow_idle_timeout);
    if (p.max_flows < 1 || p.max_flows > 1'000'000)
        throw_invalid("las.max_flows", std::to_string(p.max_flows), "not in [1, 1000000]");
}

void validate_params(const tlas_params& p, const aqm_params&) {
    if (p.threshold_packets == 0) throw_invalid("tlas.threshold_packets", "0", "must be >= 1");
    positive_time("tlas.flow_idle_timeout", p.flow_idle_timeout);
    if (p.max_flows < 1 || p.max_flows > 1'000'000)
        throw_invalid("tlas.max_flows", std::to_string(p.max_flows), "not in [1, 1000000]");
}

}  // namespace

std::string_view to_string(drop_reason r) { return kReasonNames.at(static_cast<std::size_t>(r)); }
std::string_view to_string(aqm_kind k) { return kKindNames.at(static_cast<std::size_t>(k)); }

std::string_view to_string(price_update u) {
    return u == price_update::per_arrival ? "per_arrival" : "interval";
}
std::optional<price_update> price_update_from_string(std::string_view name) {
    for (price_update u : {price_update::interval, price_update::per_arrival})
        if (name == to_string(u)) return u;
    return std::nullopt;
}

std::optional<aqm_kind> aqm_kind_from_string(std::string_view name) {
    std::string s;
    for (char c : name) {
        if (c == '-' || c == '_') continue;
        s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    }
    for (std::size_t i = 0; i < kKindNames.size(); ++i)
        if (s == kKindNames[i]) return static_cast<aqm_kind>(i);
    return std::nullopt;
}

namespace {

template <class T>
constexpr param_type type_of_member() {
    if constexpr (std::is_same_v<T, bool>) return param_type::boolean;
    if constexpr (std::is_same_v<T, price_update>) return param_type::choice;
    if constexpr (std::is_floating_point_v<T>) return param_type::number;
    return param_type::integer;
}

// A parameter of the algorithm P, stored in its member.
template <class P, class T>
param_field member(const char* kind, const char* name, T P::*m) {
    param_field f{name, std::string(kind) + "." + name, type_of_member<T>(), {}, {}};
    if constexpr (std::is_same_v<T, price_update>)
        f.choices = {std::string(to_string(price_update::interval)),
                     std::string(to_string(price_update::per_arrival))};
    f.set = [m, label = f.label](aqm_params& c, const param_value& v) {
        T& out = std::get<P>(c.params).*m;
        if constexpr (std::is_same_v<T, bool>) {
            out = std::get<bool>(v);
        } else if constexpr (std::is_same_v<T, price_update>) {
            const auto u = price_update_from_string(std::get<std::string>(v));
            if (!u) throw_invalid(label, "'" + std::get<std::string>(v) + "'", "is not a mode");
            out = *u;
        } else if constexpr (std::is_floating_point_v<T>) {
            out = std::get<double>(v);
        } else {
            out = static_cast<T>(std::get<std::uint64_t>(v));
        }
    };
    return f;
}

// A time of the algorithm P, given in seconds as name_s.
template <class P>
param_field seconds(const char* kind, const char* name, time_ns P::*m) {
    param_field f{
        std::string(name) + "_s", std::string(kind) + "." + name, param_type::seconds, {}, {}};
    f.set = [m](aqm_params& c, const param_value& v) {
        std::get<P>(c.params).*m = from_seconds(std::get<double>(v));
    };
    return f;
}

// The service-rate estimator's, shared by every kind.
template <class T>
param_field rate(const char* name, T rate_params::*m) {
    param_field f{name, name, type_of_member<T>(), {}, {}};
    f.set = [m](aqm_params& c, const param_value& v) {
        if constexpr (std::is_floating_point_v<T>) {
            c.rate.*m = std::get<double>(v);
        } else {
            c.rate.*m = static_cast<T>(std::get<std::uint64_t>(v));
        }
    };
    return f;
}

std::vector<param_field> kind_fields(aqm_kind k) {
    switch (k) {
        case aqm_kind::droptail:
        case aqm_kind::spmaf:
            return {};
        case aqm_kind::red:
            return {member("red", "min_th", &red_params::min_th),
                    member("red", "max_th", &red_params::max_th),
                    member("red", "w_q", &red_params::w_q),
                    member("red", "max_p", &red_params::max_p),
                    member("red", "gentle", &red_params::gentle),
                    member("red", "mean_packet_size", &red_params::mean_packet_size)};
        case aqm_kind::rem:
            return {member("rem", "gamma", &rem_params::gamma),
                    member("rem", "alpha", &rem_params::alpha),
                    member("rem", "phi", &rem_params::phi),
                    member("rem", "target", &rem_params::target),
                    seconds("rem", "update_interval", &rem_params::update_interval),
                    member("rem", "input_weight", &rem_params::input_weight),
                    member("rem", "mean_packet_size", &rem_params::mean_packet_size)};
        case aqm_kind::reaqm:
            return {member("reaqm", "alpha", &reaqm_params::alpha),
                    member("reaqm", "alpha_prime", &reaqm_params::alpha_prime),
                    member("reaqm", "gamma", &reaqm_params::gamma),
                    member("reaqm", "phi", &reaqm_params::phi),
                    member("reaqm", "y0_ratio", &reaqm_params::y0_ratio),
                    member("reaqm", "modified_update", &reaqm_params::modified_update),
                    member("reaqm", "update", &reaqm_params::update),
                    seconds("reaqm", "update_interval", &reaqm_params::update_interval),
                    member("reaqm", "mean_packet_size", &reaqm_params::mean_packet_size)};
        case aqm_kind::avq:
            return {member("avq", "gamma", &avq_params::gamma),
                    member("avq", "alpha", &avq_params::alpha),
                    member("avq", "virtual_buffer_bytes", &avq_params::virtual_buffer_bytes),
                    member("avq", "mean_packet_size", &avq_params::mean_packet_size)};
        case aqm_kind::codel:
            return {seconds("codel", "target", &codel_params::target),
                    seconds("codel", "interval", &codel_params::interval),
                    member("codel", "mtu", &codel_params::mtu)};
        case aqm_kind::pie:
            return {seconds("pie", "target", &pie_params::target),
                    seconds("pie", "tupdate", &pie_params::tupdate),
                    member("pie", "alpha", &pie_params::alpha),
                    member("pie", "beta", &pie_params::beta),
                    seconds("pie", "max_burst", &pie_params::max_burst),
                    member("pie", "mark_ecn_threshold", &pie_params::mark_ecn_threshold),
                    member("pie", "mean_packet_size", &pie_params::mean_packet_size),
                    member("pie", "use_departure_rate", &pie_params::use_departure_rate),
                    member("pie", "derandomize", &pie_params::derandomize),
                    member("pie", "cap_drop_adjustment", &pie_params::cap_drop_adjustment)};
        case aqm_kind::las:
            return {seconds("las", "flow_idle_timeout", &las_params::flow_idle_timeout),
                    member("las", "max_flows", &las_params::max_flows)};
        case aqm_kind::tlas:
            return {member("tlas", "threshold_packets", &tlas_params::threshold_packets),
                    seconds("tlas", "flow_idle_timeout", &tlas_params::flow_idle_timeout),
                    member("tlas", "max_flows", &tlas_params::max_flows)};
    }
    return {};
}

}  // namespace

const std::vector<param_field>& param_fields(aqm_kind kind) {
    static const std::array<std::vector<param_field>, kAqmKindCount> all = [] {
        std::array<std::vector<param_field>, kAqmKindCount> a;
        for (std::size_t i = 0; i < kAqmKindCount; ++i) {
            a[i] = kind_fields(static_cast<aqm_kind>(i));
            a[i].push_back(rate("capacity_bps", &rate_params::capacity_bps));
            a[i].push_back(rate("rate_sample_bytes", &rate_params::sample_bytes));
            a[i].push_back(rate("rate_ema_weight", &rate_params::ema_weight));
        }
        return a;
    }();
    return all.at(static_cast<std::size_t>(kind));
}

std::uint64_t aqm_stats::dropped_total() const {
    std::uint64_t n = 0;
    for (auto d : dropped) n += d;
    return n;
}

aqm_params default_config(aqm_kind kind) {
    aqm_params c;
    switch (kind) {
        case aqm_kind::droptail:
            c.params = drop_tail_params{};
            break;
        case aqm_kind::red:
            c.params = red_params{};
            break;
        case aqm_kind::rem:
            c.params = rem_params{};
            break;
        case aqm_kind::reaqm:
            c.params = reaqm_params{};
            break;
        case aqm_kind::avq:
            c.params = avq_params{};
            break;
        case aqm_kind::codel:
            c.params = codel_params{};
            break;
        case aqm_kind::pie:
            c.params = pie_params{};
            break;
        case aqm_kind::spmaf:
            c.params = spm_af_params{};
            break;
        case aqm_kind::las:
            c.params = las_params{};
            break;
        case aqm_kind::tlas:
            c.params = tlas_params{};
            break;
    }
    return c;
}

void validate(const aqm_params& c) {
    if (c.limits.bytes == 0 && c.limits.packets == 0)
        throw_invalid("aqm.limits", "0 bytes and 0 packets", "leave the queue unbounded; set one");
    if (!(c.rate.capacity_bps >= 0.0) || !std::isfinite(c.rate.capacity_bps))
        throw_invalid("rate.capacity_bps", format_number(c.rate.capacity_bps),
                      "must be >= 0 (0 = measure)");
    if (c.rate.sample_bytes == 0) throw_invalid("rate.sample_bytes", "0", "must be > 0");
    in_open_closed_unit("rate.ema_weight", c.rate.ema_weight);
    std::visit([&c](const auto& p) { validate_params(p, c); }, c.params);
}

std::unique_ptr<queue_discipline> make_aqm(const aqm_params& c) {
    validate(c);
    using namespace detail;
    return std::visit(
        [&c](const auto& p) -> std::unique_ptr<queue_discipline> {
            using P = std::decay_t<decltype(p)>;
            if constexpr (std::is_same_v<P, drop_tail_params>) {
                return make_droptail(c);
            } else if constexpr (std::is_same_v<P, red_params>) {
                return make_red(c, p);
            } else if constexpr (std::is_same_v<P, rem_params>) {
                return make_rem(c, p);
            } else if constexpr (std::is_same_v<P, reaqm_params>) {
                return make_reaqm(c, p);
            } else if constexpr (std::is_same_v<P, avq_params>) {
                return make_avq(c, p);
            } else if constexpr (std::is_same_v<P, codel_params>) {
                return make_codel(c, p);
            } else if constexpr (std::is_same_v<P, pie_params>) {
                return make_pie(c, p);
            } else if constexpr (std::is_same_v<P, spm_af_params>) {
                return make_spmaf(c, p);
            } else if constexpr (std::is_same_v<P, las_params>) {
                return make_las(c, p);
            } else {
                static_assert(std::is_same_v<P, tlas_params>, "every algorithm_params alternative");
                return make_tlas(c, p);
            }
        },
        c.params);
}

// ---------------------------------------------------------------------------------------

service_rate_estimator::service_rate_estimator(const rate_params& c)
    : measuring_(c.capacity_bps <= 0.0),
      sample_bytes_(c.sample_bytes),
      weight_(c.ema_weight),
      rate_bps_(c.capacity_bps > 0.0 ? c.capacity_bps : 0.0) {}

void service_rate_estimator::add(std::uint64_t bytes, time_ns time) {
    acc_bytes_ += bytes;
    acc_time_ += time;
    if (acc_bytes_ >= sample_bytes_ && acc_time_ > 0) {
        const double sample = static_cast<double>(acc_bytes_) * 8.0 / to_seconds(acc_time_);
        rate_bps_ = rate_bps_ > 0.0 ? (1.0 - weight_) * rate_bps_ + weight_ * sample : sample;
        acc_bytes_ = 0;
        acc_time_ = 0;
    }
}

void service_rate_estimator::on_dequeue(std::size_t size, bool queue_now_empty, time_ns now) {
    if (!measuring_ || reported_) return;
    if (pending_bytes_ > 0 && now > last_dequeue_) {
        add(pending_bytes_, now - last_dequeue_);  // the earlier batch was sent by now
        pending_bytes_ = 0;
    }
    if (pending_bytes_ == 0) last_dequeue_ = now;
    // The batch's sending time ends at the next dequeue of this busy period; an empty queue
    // ends the busy period with that time unknown, so the batch never counts.
    pending_bytes_ = queue_now_empty ? 0 : pending_bytes_ + size;
}

void service_rate_estimator::on_service(std::size_t bytes, time_ns busy) {
    if (!measuring_) return;
    if (!reported_) {  // the first report: dequeue-time accounting ends here
        reported_ = true;
        pending_bytes_ = 0;
        acc_bytes_ = 0;
        acc_time_ = 0;
    }
    if (busy > 0 || bytes > 0) add(bytes, std::max<time_ns>(busy, 0));
}

bool marks_ecn(aqm_kind k) {
    switch (k) {
        case aqm_kind::red:
        case aqm_kind::rem:
        case aqm_kind::reaqm:
        case aqm_kind::avq:
        case aqm_kind::codel:
        case aqm_kind::pie:
            return true;
        case aqm_kind::droptail:
        case aqm_kind::spmaf:
        case aqm_kind::las:
        case aqm_kind::tlas:
            return false;
    }
    return false;
}

}  // namespace oppsched::aqm
