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

// The ranges of single parameters are the registry's (param_fields, checked in validate());
// these are the constraints between parameters.
template <class P>
void validate_params(const P&, const aqm_params&) {}

void validate_params(const red_params& p, const aqm_params&) {
    if (!(p.max_th > p.min_th))
        throw_invalid("red.max_th", format_number(p.max_th),
                      "must be > min_th (" + format_number(p.min_th) + ")");
}

void validate_params(const reaqm_params& p, const aqm_params&) {
    // Wang & Song, REAQM, eq. 5: "alpha' is relative weight parameter larger than alpha".
    if (p.modified_update && !(p.alpha_prime > p.alpha))
        throw_invalid(
            "reaqm.alpha_prime", format_number(p.alpha_prime),
            "must be > alpha (" + format_number(p.alpha) + "), Wang & Song, REAQM, eq. 5");
}

void validate_params(const codel_params& p, const aqm_params&) {
    if (p.target >= p.interval)
        throw_invalid("codel.target", std::to_string(p.target) + " ns",
                      "must be < interval (" + std::to_string(p.interval) + " ns)");
}

// A field's value against its range; times print in ns, as they are held.
void check_field(const param_field& f, const aqm_params& c) {
    const param_value v = f.get(c);
    double x = 0.0;
    if (const auto* d = std::get_if<double>(&v)) {
        x = *d;
    } else if (const auto* i = std::get_if<std::uint64_t>(&v)) {
        x = static_cast<double>(*i);
    } else {
        return;  // booleans and choices: their type is their range
    }
    if (f.range.contains(x)) return;
    if (const auto* i = std::get_if<std::uint64_t>(&v))
        throw_invalid(f.label, std::to_string(*i), f.range.violation());
    if (f.type == param_type::seconds)
        throw_invalid(f.label, std::to_string(from_seconds(x)) + " ns", f.range.violation());
    throw_invalid(f.label, format_number(x), f.range.violation());
}

}  // namespace

std::string_view to_string(drop_reason r) { return kReasonNames.at(static_cast<std::size_t>(r)); }
std::string_view to_string(aqm_kind k) { return kKindNames.at(static_cast<std::size_t>(k)); }

std::string_view describe(aqm_kind k) {
    switch (k) {
        case aqm_kind::droptail:
            return "drop-tail: no AQM, the baseline of the papers";
        case aqm_kind::red:
            return "RED with the gentle modification (Floyd & Jacobson 1993; Floyd 2000), "
                   "thresholds in packets, ns-2's defaults";
        case aqm_kind::rem:
            return "REM (Athuraliya, Low, Li & Yin, IEEE Network 2001): a link price from the "
                   "backlog and rate mismatch, marking probability 1 - phi^-p";
        case aqm_kind::reaqm:
            return "REAQM (Wang & Song, REAQM, §3.1, eqs. 1-5): REM's price with a "
                   "queue-dependent weight; marks, and drops only on a full buffer";
        case aqm_kind::avq:
            return "AVQ (Kunniyur & Srikant, IEEE/ACM ToN 2004): a virtual queue served at a "
                   "virtual capacity below the link's";
        case aqm_kind::codel:
            return "CoDel (RFC 8289): head drop at dequeue while the sojourn time stays above "
                   "target for an interval";
        case aqm_kind::pie:
            return "PIE (RFC 8033): a drop probability driven by the queueing delay's distance "
                   "to its target";
        case aqm_kind::spmaf:
            return "SPM-AF (Wu, Gong & Williamson, §6.1): FIFO with ACK filtering and priority "
                   "eviction";
        case aqm_kind::las:
            return "LAS (Wu, Gong & Williamson, §6.2; Rai et al. 2003/2004): serves the flow "
                   "with the least attained service";
        case aqm_kind::tlas:
            return "T-LAS (Wu, Gong & Williamson, §6.2): LAS for a flow's first "
                   "threshold_packets packets, then FIFO";
    }
    return "";
}

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

// What a field's range, unit and help are.
struct spec {
    param_range range = param_range::any();
    const char* unit = "";
    const char* help = "";
};

// A parameter of the algorithm P, stored in its member.
template <class P, class T>
param_field member(const char* kind, const char* name, T P::*m, const spec& sp) {
    param_field f{
        name,   std::string(kind) + "." + name, type_of_member<T>(), {}, {}, {}, sp.range, sp.unit,
        sp.help};
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
    f.get = [m](const aqm_params& c) -> param_value {
        const T& v = std::get<P>(c.params).*m;
        if constexpr (std::is_same_v<T, bool>) {
            return v;
        } else if constexpr (std::is_same_v<T, price_update>) {
            return std::string(to_string(v));
        } else if constexpr (std::is_floating_point_v<T>) {
            return static_cast<double>(v);
        } else {
            return static_cast<std::uint64_t>(v);
        }
    };
    return f;
}

// A time of the algorithm P, given in seconds as name_s.
template <class P>
param_field seconds(const char* kind, const char* name, time_ns P::*m, const spec& sp) {
    param_field f{std::string(name) + "_s",
                  std::string(kind) + "." + name,
                  param_type::seconds,
                  {},
                  {},
                  {},
                  sp.range,
                  "s",
                  sp.help};
    f.set = [m](aqm_params& c, const param_value& v) {
        std::get<P>(c.params).*m = from_seconds(std::get<double>(v));
    };
    f.get = [m](const aqm_params& c) -> param_value {
        return to_seconds(std::get<P>(c.params).*m);
    };
    return f;
}

// The service-rate estimator's, shared by every kind.
template <class T>
param_field rate(const char* name, const char* label, T rate_params::*m, const spec& sp) {
    param_field f{name, label, type_of_member<T>(), {}, {}, {}, sp.range, sp.unit, sp.help};
    f.set = [m](aqm_params& c, const param_value& v) {
        if constexpr (std::is_floating_point_v<T>) {
            c.rate.*m = std::get<double>(v);
        } else {
            c.rate.*m = static_cast<T>(std::get<std::uint64_t>(v));
        }
    };
    f.get = [m](const aqm_params& c) -> param_value {
        if constexpr (std::is_floating_point_v<T>) {
            return static_cast<double>(c.rate.*m);
        } else {
            return static_cast<std::uint64_t>(c.rate.*m);
        }
    };
    return f;
}

const param_range kPositive = param_range::positive();
const param_range kNonNegative = param_range::non_negative();
const param_range kUnitOpenClosed = param_range::open_closed(0.0, 1.0);
const param_range kUnitClosed = param_range::closed(0.0, 1.0);
const param_range kAboveOne = param_range::above(1.0);
const param_range kMaxFlows = param_range::closed(1.0, 1'000'000.0);

std::vector<param_field> kind_fields(aqm_kind k) {
    switch (k) {
        case aqm_kind::droptail:
        case aqm_kind::spmaf:
            return {};
        case aqm_kind::red:
            return {
                member("red", "min_th", &red_params::min_th,
                       {kNonNegative, "packets", "min_th: early drops start above this EWMA"}),
                member("red", "max_th", &red_params::max_th,
                       {kNonNegative, "packets", "max_th, > min_th (Floyd: 3 min_th)"}),
                member("red", "w_q", &red_params::w_q,
                       {kUnitOpenClosed, "", "EWMA weight of the average queue"}),
                member("red", "max_p", &red_params::max_p,
                       {kUnitOpenClosed, "", "drop probability at max_th"}),
                member("red", "gentle", &red_params::gentle,
                       {{}, "", "p_b rises from max_p at max_th to 1 at 2 max_th (Floyd 2000)"}),
                member("red", "mean_packet_size", &red_params::mean_packet_size,
                       {kPositive, "bytes", "a small packet, for the idle-time decay (ns-2)"})};
        case aqm_kind::rem:
            return {member("rem", "gamma", &rem_params::gamma,
                           {kPositive, "", "gamma: step size of the price update"}),
                    member("rem", "alpha", &rem_params::alpha,
                           {kNonNegative, "", "alpha: weight of the backlog mismatch"}),
                    member("rem", "phi", &rem_params::phi,
                           {kAboveOne, "", "phi: marking probability 1 - phi^-p"}),
                    member("rem", "target", &rem_params::target,
                           {kNonNegative, "packets", "b*: target backlog"}),
                    seconds("rem", "update_interval", &rem_params::update_interval,
                            {kPositive, "", "T: the price update period"}),
                    member("rem", "input_weight", &rem_params::input_weight,
                           {kUnitOpenClosed, "", "EWMA weight of the input rate x (1: none)"}),
                    member("rem", "mean_packet_size", &rem_params::mean_packet_size,
                           {kPositive, "bytes", "bytes of the packet unit of b, x and c"})};
        case aqm_kind::reaqm:
            return {
                member("reaqm", "alpha", &reaqm_params::alpha,
                       {kNonNegative, "", "alpha of f(q) = alpha q / c_T + 1 (eq. 3)"}),
                member("reaqm", "alpha_prime", &reaqm_params::alpha_prime,
                       {param_range::any(), "", "alpha' of eq. 5, > alpha with modified_update"}),
                member("reaqm", "gamma", &reaqm_params::gamma,
                       {kPositive, "", "gamma: step size of the price update"}),
                member("reaqm", "phi", &reaqm_params::phi,
                       {kAboveOne, "", "phi: marking probability 1 - phi^-p (eq. 1)"}),
                member("reaqm", "y0_ratio", &reaqm_params::y0_ratio,
                       {kNonNegative, "", "y0 = y0_ratio c (eq. 5)"}),
                member("reaqm", "modified_update", &reaqm_params::modified_update,
                       {{}, "", "use eq. 5 when y > c (the paper's experiments do)"}),
                member("reaqm", "update", &reaqm_params::update,
                       {{}, "", "when the price updates: every interval, or per arrival (§3.1)"}),
                seconds("reaqm", "update_interval", &reaqm_params::update_interval,
                        {kPositive, "", "T: the price update period"}),
                member("reaqm", "mean_packet_size", &reaqm_params::mean_packet_size,
                       {kPositive, "bytes", "bytes of the packet unit of q, y and c"})};
        case aqm_kind::avq:
            return {member("avq", "gamma", &avq_params::gamma,
                           {kUnitOpenClosed, "", "gamma: desired utilisation"}),
                    member("avq", "alpha", &avq_params::alpha,
                           {kPositive, "", "alpha: damping of the virtual capacity"}),
                    member("avq", "virtual_buffer_bytes", &avq_params::virtual_buffer_bytes,
                           {kNonNegative, "bytes", "B of the virtual queue; 0: the byte limit"}),
                    member("avq", "mean_packet_size", &avq_params::mean_packet_size,
                           {kPositive, "bytes", "bytes per packet of a packet limit"})};
        case aqm_kind::codel:
            return {seconds("codel", "target", &codel_params::target,
                            {kPositive, "", "TARGET sojourn time, < interval (RFC 8289)"}),
                    seconds("codel", "interval", &codel_params::interval,
                            {kPositive, "", "INTERVAL (RFC 8289)"}),
                    member("codel", "mtu", &codel_params::mtu,
                           {kPositive, "bytes", "MAXPACKET (RFC 8289: the interface MTU)"})};
        case aqm_kind::pie:
            return {seconds("pie", "target", &pie_params::target,
                            {kPositive, "", "QDELAY_REF (RFC 8033)"}),
                    seconds("pie", "tupdate", &pie_params::tupdate,
                            {kPositive, "", "T_UPDATE (RFC 8033)"}),
                    member("pie", "alpha", &pie_params::alpha,
                           {kNonNegative, "1/s", "alpha of the drop-probability update"}),
                    member("pie", "beta", &pie_params::beta,
                           {kNonNegative, "1/s", "beta of the drop-probability update"}),
                    seconds("pie", "max_burst", &pie_params::max_burst,
                            {kNonNegative, "", "MAX_BURST (RFC 8033)"}),
                    member("pie", "mark_ecn_threshold", &pie_params::mark_ecn_threshold,
                           {kUnitClosed, "", "mark ECT only while drop_prob <= this (§5.1)"}),
                    member("pie", "mean_packet_size", &pie_params::mean_packet_size,
                           {kPositive, "bytes", "MEAN_PKTSIZE of the 2-packet safeguard"}),
                    member("pie", "use_departure_rate", &pie_params::use_departure_rate,
                           {{}, "", "qdelay = bytes / rate (§5.2), else timestamps (Linux)"}),
                    member("pie", "derandomize", &pie_params::derandomize,
                           {{}, "", "accumulated-probability de-randomisation (§5.4)"}),
                    member("pie", "cap_drop_adjustment", &pie_params::cap_drop_adjustment,
                           {{}, "", "step <= 0.02 once drop_prob >= 0.1 (§5.5, as Linux)"})};
        case aqm_kind::las:
            return {seconds("las", "flow_idle_timeout", &las_params::flow_idle_timeout,
                            {kPositive, "", "forget a flow idle this long with nothing queued"}),
                    member("las", "max_flows", &las_params::max_flows,
                           {kMaxFlows, "flows", "flow records held"})};
        case aqm_kind::tlas:
            return {member("tlas", "threshold_packets", &tlas_params::threshold_packets,
                           {param_range::at_least(1.0), "packets",
                            "LAS for a flow's first this many packets, then FIFO"}),
                    seconds("tlas", "flow_idle_timeout", &tlas_params::flow_idle_timeout,
                            {kPositive, "", "forget a flow idle this long with nothing queued"}),
                    member("tlas", "max_flows", &tlas_params::max_flows,
                           {kMaxFlows, "flows", "flow records held"})};
    }
    return {};
}

}  // namespace

const std::vector<param_field>& param_fields(aqm_kind kind) {
    static const std::array<std::vector<param_field>, kAqmKindCount> all = [] {
        std::array<std::vector<param_field>, kAqmKindCount> a;
        for (std::size_t i = 0; i < kAqmKindCount; ++i) {
            a[i] = kind_fields(static_cast<aqm_kind>(i));
            a[i].push_back(rate(
                "capacity_bps", "rate.capacity_bps", &rate_params::capacity_bps,
                {kNonNegative, "bit/s", "link capacity of the rate-based AQMs; 0: measure it"}));
            a[i].push_back(rate("rate_sample_bytes", "rate.sample_bytes",
                                &rate_params::sample_bytes,
                                {kPositive, "bytes", "bytes per sample of the measured rate"}));
            a[i].push_back(rate("rate_ema_weight", "rate.ema_weight", &rate_params::ema_weight,
                                {kUnitOpenClosed, "", "EMA weight of the measured rate"}));
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
    const auto& fields = param_fields(c.kind());
    // The estimator's (common to every kind, listed last) first, then the kind's own.
    for (auto it = fields.end() - 3; it != fields.end(); ++it) check_field(*it, c);
    for (auto it = fields.begin(); it != fields.end() - 3; ++it) check_field(*it, c);
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
