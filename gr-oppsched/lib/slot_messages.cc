// PMT dictionaries of the per-slot messages; see slot_messages.h.
#include "slot_messages.h"

#include <cmath>
#include <limits>
#include <sstream>

namespace gr {
namespace oppsched {
namespace slot_msg {

namespace {

using ::oppsched::error_info;
using ::oppsched::expected;

const pmt::pmt_t k_slot = pmt::intern("slot");
const pmt::pmt_t k_air = pmt::intern("air_time_ns");
const pmt::pmt_t k_empty = pmt::intern("empty");
const pmt::pmt_t k_uplink = pmt::intern("uplink");
const pmt::pmt_t k_user = pmt::intern("user");
const pmt::pmt_t k_mcs = pmt::intern("mcs");
const pmt::pmt_t k_pid = pmt::intern("harq_pid");
const pmt::pmt_t k_ndi = pmt::intern("ndi");
const pmt::pmt_t k_rv = pmt::intern("rv");
const pmt::pmt_t k_tb = pmt::intern("tb");
const pmt::pmt_t k_slot_est = pmt::intern("slot_estimated");
const pmt::pmt_t k_detected = pmt::intern("detected");
const pmt::pmt_t k_header_ok = pmt::intern("header_ok");
const pmt::pmt_t k_tb_bytes = pmt::intern("tb_bytes");
const pmt::pmt_t k_addressed = pmt::intern("addressed");
const pmt::pmt_t k_crc_ok = pmt::intern("crc_ok");
const pmt::pmt_t k_snr = pmt::intern("snr_db");
const pmt::pmt_t k_esnr = pmt::intern("effective_snr_db");
const pmt::pmt_t k_cqi = pmt::intern("cqi");
const pmt::pmt_t k_combined = pmt::intern("combined");
const pmt::pmt_t k_cfo = pmt::intern("cfo_hz");
const pmt::pmt_t k_sample = pmt::intern("sample");
const pmt::pmt_t k_noise = pmt::intern("noise_before");
const pmt::pmt_t k_noise_count = pmt::intern("noise_count_before");

error_info err(const pmt::pmt_t& key, const std::string& what) {
    return error_info{pmt::symbol_to_string(key) + ": " + what};
}

// A PMT integer (long or uint64; a bool is accepted as 0/1 for flags), exactly: a uint64
// PMT and a long PMT each keep their own type, so no value goes through floating point (a
// long double cannot hold every uint64 on every target, and converting one out of range back
// to an integer is undefined).
struct pmt_int {
    bool negative = false;
    std::uint64_t magnitude = 0;  // |value|
    std::string text() const {
        return negative ? "-" + std::to_string(magnitude) : std::to_string(magnitude);
    }
};

bool int_of(const pmt::pmt_t& v, pmt_int& out) {
    if (pmt::is_uint64(v)) {
        out = {false, pmt::to_uint64(v)};
        return true;
    }
    if (pmt::is_integer(v)) {
        const long x = pmt::to_long(v);
        // |x| without negating LONG_MIN: -(x + 1) fits, then add the 1 back unsigned.
        out = x < 0 ? pmt_int{true, static_cast<std::uint64_t>(-(x + 1)) + 1u}
                    : pmt_int{false, static_cast<std::uint64_t>(x)};
        return true;
    }
    if (pmt::is_bool(v)) {
        out = {false, pmt::to_bool(v) ? 1u : 0u};
        return true;
    }
    return false;
}

// A PMT integer in [lo, hi] (lo <= 0 or small, hi >= 0: every field's range is), as T.
template <class T>
expected<T> get_int(const pmt::pmt_t& d, const pmt::pmt_t& key, std::int64_t lo, std::uint64_t hi,
                    bool required, T fallback = T{}) {
    const pmt::pmt_t v = pmt::dict_ref(d, key, pmt::PMT_NIL);
    if (pmt::eq(v, pmt::PMT_NIL)) {
        if (required) return err(key, "missing");
        return fallback;
    }
    pmt_int x;
    if (!int_of(v, x)) return err(key, "not an integer (" + pmt::write_string(v) + ")");
    // |lo| for a negative lo, as for the value above.
    const std::uint64_t lo_mag =
        lo < 0 ? static_cast<std::uint64_t>(-(lo + 1)) + 1u : static_cast<std::uint64_t>(lo);
    const bool in_range = x.negative ? (lo < 0 && x.magnitude <= lo_mag)
                                     : (x.magnitude <= hi && (lo < 0 || x.magnitude >= lo_mag));
    if (!in_range)
        return err(key,
                   x.text() + " not in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    if (!x.negative) return static_cast<T>(x.magnitude);
    // In range and negative: T is signed and x >= lo >= T's minimum.
    return static_cast<T>(-static_cast<std::int64_t>(x.magnitude - 1u) - 1);
}

expected<bool> get_bool(const pmt::pmt_t& d, const pmt::pmt_t& key, bool required,
                        bool fallback = false) {
    const pmt::pmt_t v = pmt::dict_ref(d, key, pmt::PMT_NIL);
    if (pmt::eq(v, pmt::PMT_NIL)) {
        if (required) return err(key, "missing");
        return fallback;
    }
    if (pmt::is_bool(v)) return pmt::to_bool(v);
    pmt_int x;
    if (int_of(v, x) && !x.negative && x.magnitude <= 1) return x.magnitude == 1;
    return err(key, "not a bool (" + pmt::write_string(v) + ")");
}

expected<double> get_real(const pmt::pmt_t& d, const pmt::pmt_t& key, bool required,
                          double fallback = 0.0) {
    const pmt::pmt_t v = pmt::dict_ref(d, key, pmt::PMT_NIL);
    if (pmt::eq(v, pmt::PMT_NIL)) {
        if (required) return err(key, "missing");
        return fallback;
    }
    // pmt::is_number() also holds for a uint64, which pmt::to_double() throws on: each type
    // is converted by its own accessor.
    double x = 0.0;
    if (pmt::is_real(v) || pmt::is_integer(v))
        x = pmt::to_double(v);
    else if (pmt::is_uint64(v))
        x = static_cast<double>(pmt::to_uint64(v));
    else
        return err(key, "not a number (" + pmt::write_string(v) + ")");
    if (!std::isfinite(x)) return err(key, "not finite");
    return x;
}

expected<std::vector<std::uint8_t>> get_bytes(const pmt::pmt_t& d, const pmt::pmt_t& key) {
    const pmt::pmt_t v = pmt::dict_ref(d, key, pmt::PMT_NIL);
    if (pmt::eq(v, pmt::PMT_NIL)) return std::vector<std::uint8_t>{};
    if (!pmt::is_u8vector(v)) return err(key, "not a u8vector");
    return pmt::u8vector_elements(v);
}

constexpr std::uint64_t u64_max = std::numeric_limits<std::uint64_t>::max();
constexpr std::int64_t i64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::uint64_t i64_max = std::numeric_limits<std::int64_t>::max();

}  // namespace

pmt::pmt_t to_pmt(const request& r) {
    pmt::pmt_t d = pmt::make_dict();
    d = pmt::dict_add(d, k_slot, pmt::from_uint64(r.slot));
    d = pmt::dict_add(d, k_air, pmt::from_long(static_cast<long>(r.air_time_ns)));
    return d;
}

pmt::pmt_t to_pmt(const grant& g) {
    pmt::pmt_t d = pmt::make_dict();
    d = pmt::dict_add(d, k_slot, pmt::from_uint64(g.slot));
    d = pmt::dict_add(d, k_empty, pmt::from_bool(g.empty));
    d = pmt::dict_add(d, k_uplink, pmt::from_bool(g.uplink));
    d = pmt::dict_add(d, k_user, pmt::from_long(g.user));
    d = pmt::dict_add(d, k_mcs, pmt::from_long(g.mcs));
    d = pmt::dict_add(d, k_pid, pmt::from_long(g.harq_pid));
    d = pmt::dict_add(d, k_ndi, pmt::from_bool(g.ndi));
    d = pmt::dict_add(d, k_rv, pmt::from_long(g.rv));
    d = pmt::dict_add(d, k_tb, pmt::init_u8vector(g.tb.size(), g.tb));
    return d;
}

pmt::pmt_t to_pmt(const rx_report& r) {
    pmt::pmt_t d = pmt::make_dict();
    d = pmt::dict_add(d, k_slot, pmt::from_uint64(r.slot));
    d = pmt::dict_add(d, k_slot_est, pmt::from_bool(r.slot_estimated));
    d = pmt::dict_add(d, k_detected, pmt::from_bool(r.detected));
    d = pmt::dict_add(d, k_header_ok, pmt::from_bool(r.header_ok));
    d = pmt::dict_add(d, k_user, pmt::from_long(r.user));
    d = pmt::dict_add(d, k_mcs, pmt::from_long(r.mcs));
    d = pmt::dict_add(d, k_pid, pmt::from_long(r.harq_pid));
    d = pmt::dict_add(d, k_ndi, pmt::from_bool(r.ndi));
    d = pmt::dict_add(d, k_rv, pmt::from_long(r.rv));
    d = pmt::dict_add(d, k_tb_bytes, pmt::from_long(r.tb_bytes));
    d = pmt::dict_add(d, k_addressed, pmt::from_bool(r.addressed));
    d = pmt::dict_add(d, k_crc_ok, pmt::from_bool(r.crc_ok));
    d = pmt::dict_add(d, k_snr, pmt::from_double(r.snr_db));
    d = pmt::dict_add(d, k_esnr, pmt::from_double(r.effective_snr_db));
    d = pmt::dict_add(d, k_cqi, pmt::from_long(r.cqi));
    d = pmt::dict_add(d, k_combined, pmt::from_long(r.combined));
    d = pmt::dict_add(d, k_cfo, pmt::from_double(r.cfo_hz));
    d = pmt::dict_add(d, k_sample, pmt::from_uint64(r.sample));
    d = pmt::dict_add(d, k_noise, pmt::from_double(r.noise_before));
    d = pmt::dict_add(d, k_noise_count, pmt::from_long(static_cast<long>(r.noise_count_before)));
    if (r.addressed && r.crc_ok) d = pmt::dict_add(d, k_tb, pmt::init_u8vector(r.tb.size(), r.tb));
    return d;
}

expected<request> request_from_pmt(const pmt::pmt_t& m) {
    if (!pmt::is_dict(m)) return error_info{"request: not a dict"};
    request r;
    auto s = get_int<std::uint64_t>(m, k_slot, 0, u64_max, true);
    if (!s) return error_info{s.error()};
    r.slot = s.value();
    auto a = get_int<std::int64_t>(m, k_air, i64_min, i64_max, false, 0);
    if (!a) return error_info{a.error()};
    r.air_time_ns = a.value();
    return r;
}

expected<grant> grant_from_pmt(const pmt::pmt_t& m) {
    if (!pmt::is_dict(m)) return error_info{"grant: not a dict"};
    grant g;
    auto s = get_int<std::uint64_t>(m, k_slot, 0, u64_max, true);
    if (!s) return error_info{s.error()};
    g.slot = s.value();
    auto tb = get_bytes(m, k_tb);
    if (!tb) return error_info{tb.error()};
    g.tb = std::move(tb).value();
    auto e = get_bool(m, k_empty, false, false);
    if (!e) return error_info{e.error()};
    g.empty = e.value() || g.tb.empty();
    auto up = get_bool(m, k_uplink, false, false);
    if (!up) return error_info{up.error()};
    if (g.empty) {
        g.tb.clear();
        return g;  // the control fields of an empty slot are not looked at
    }
    auto user = get_int<std::uint16_t>(m, k_user, 0, ::oppsched::wire::kUserNobody - 1, true);
    if (!user) return error_info{user.error()};
    auto mcs = get_int<std::uint8_t>(m, k_mcs, 0, 15, true);
    if (!mcs) return error_info{mcs.error()};
    auto pid = get_int<std::uint8_t>(m, k_pid, 0, 15, false, 0);
    if (!pid) return error_info{pid.error()};
    auto ndi = get_bool(m, k_ndi, false, false);
    if (!ndi) return error_info{ndi.error()};
    auto rv = get_int<std::uint8_t>(m, k_rv, 0, 3, false, 0);
    if (!rv) return error_info{rv.error()};
    g.uplink = up.value();
    g.user = user.value();
    g.mcs = mcs.value();
    g.harq_pid = pid.value();
    g.ndi = ndi.value();
    g.rv = rv.value();
    return g;
}

expected<rx_report> rx_from_pmt(const pmt::pmt_t& m) {
    if (!pmt::is_dict(m)) return error_info{"rx: not a dict"};
    rx_report r;
    auto s = get_int<std::uint64_t>(m, k_slot, 0, u64_max, true);
    if (!s) return error_info{s.error()};
    r.slot = s.value();
#define OPPSCHED_GET(var, expr)                     \
    do {                                            \
        auto res_ = (expr);                         \
        if (!res_) return error_info{res_.error()}; \
        var = res_.value();                         \
    } while (0)
    OPPSCHED_GET(r.slot_estimated, get_bool(m, k_slot_est, false, false));
    OPPSCHED_GET(r.detected, get_bool(m, k_detected, false, true));
    OPPSCHED_GET(r.header_ok, get_bool(m, k_header_ok, true));
    OPPSCHED_GET(
        r.user, get_int<std::uint16_t>(m, k_user, 0, 0xFFFF, false, ::oppsched::wire::kUserNobody));
    OPPSCHED_GET(r.mcs, get_int<std::uint8_t>(m, k_mcs, 0, 255, false, 0));
    OPPSCHED_GET(r.harq_pid, get_int<std::uint8_t>(m, k_pid, 0, 255, false, 0));
    OPPSCHED_GET(r.ndi, get_bool(m, k_ndi, false, false));
    OPPSCHED_GET(r.rv, get_int<std::uint8_t>(m, k_rv, 0, 255, false, 0));
    OPPSCHED_GET(r.tb_bytes, get_int<std::uint32_t>(m, k_tb_bytes, 0, 0xFFFF, false, 0));
    OPPSCHED_GET(r.addressed, get_bool(m, k_addressed, false, false));
    OPPSCHED_GET(r.crc_ok, get_bool(m, k_crc_ok, false, false));
    OPPSCHED_GET(r.snr_db, get_real(m, k_snr, true));
    OPPSCHED_GET(r.effective_snr_db, get_real(m, k_esnr, false, r.snr_db));
    OPPSCHED_GET(r.cqi, get_int<int>(m, k_cqi, 0, 255, true));
    OPPSCHED_GET(r.combined, get_int<int>(m, k_combined, 0, 255, false, 0));
    OPPSCHED_GET(r.cfo_hz, get_real(m, k_cfo, false, 0.0));
    OPPSCHED_GET(r.sample, get_int<std::uint64_t>(m, k_sample, 0, u64_max, false, 0));
    OPPSCHED_GET(r.tb, get_bytes(m, k_tb));
    OPPSCHED_GET(r.noise_before, get_real(m, k_noise, false, 0.0));
    OPPSCHED_GET(r.noise_count_before,
                 get_int<std::int64_t>(m, k_noise_count, 0, i64_max, false, 0));
#undef OPPSCHED_GET
    if (!r.tb.empty() && !(r.addressed && r.crc_ok))
        return error_info{"tb: present although not (addressed and crc_ok)"};
    return r;
}

expected<::oppsched::wire::rx_indication> to_rx_indication(const rx_report& r, bool effective) {
    ::oppsched::wire::rx_indication ind;
    ind.slot = r.slot;
    ind.user = r.user;
    ind.mcs = r.mcs;
    ind.harq_pid = r.harq_pid;
    ind.ndi = r.ndi ? 1 : 0;
    ind.rv = r.rv;
    ind.header_ok = r.header_ok;
    ind.addressed = r.addressed;
    ind.crc_ok = r.crc_ok;
    // double -> float is undefined for a finite value beyond the float range: check first.
    const char* snr_key = effective ? "effective_snr_db" : "snr_db";
    const double snr = effective ? r.effective_snr_db : r.snr_db;
    if (!std::isfinite(snr) || std::fabs(snr) > std::numeric_limits<float>::max()) {
        std::ostringstream s;
        s << snr_key << ": " << snr << " is not a finite f32";
        return error_info{s.str()};
    }
    ind.snr_db = static_cast<float>(snr);
    if (r.cqi < 0 || r.cqi > 255)
        return error_info{"cqi: " + std::to_string(r.cqi) + " not in [0, 255]"};
    if (r.combined < 0 || r.combined > 255)
        return error_info{"combined: " + std::to_string(r.combined) + " not in [0, 255]"};
    ind.cqi = static_cast<std::uint8_t>(r.cqi);
    ind.combined = static_cast<std::uint8_t>(r.combined);
    if (r.addressed && r.crc_ok) ind.tb = r.tb;
    return ind;
}

}  // namespace slot_msg
}  // namespace oppsched
}  // namespace gr
