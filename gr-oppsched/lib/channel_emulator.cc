// Multi-user channel emulator; see channel_emulator.h.
#include <gnuradio/oppsched/channel_emulator.h>
#include <volk/volk.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "oppsched/fading.h"
#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr std::uint64_t kGridBlock = 64;  // grid points per cached block of coefficients
constexpr size_t kChunk = 2048;           // samples per internal processing piece
constexpr std::uint64_t kRotBlock = 64;   // CFO phase re-anchored every this many samples

std::uint64_t derive_seed(std::uint64_t seed, int user, int tap, int role) {
    std::uint64_t s = seed;
    s ^= 0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(user + 1);
    s ^= 0x8CB92BA72F3D8DD7ull * static_cast<std::uint64_t>(tap + 2);
    s ^= 0xABC98388FB8FAC03ull * static_cast<std::uint64_t>(role + 3);
    splitmix64(s);
    return splitmix64(s);
}

// out = a * b elementwise. Not volk_32fc_x2_multiply_32fc: its AVX2+FMA kernel rounds
// differently from its scalar tail, so the output would depend on where the scheduler
// splits the stream. Plain products-then-sums (no FMA contraction under -std=c++17) are
// bit-identical for any split and the compiler vectorises them.
void cmul(gr_complex* out, const gr_complex* a, const gr_complex* b, size_t n) {
    const float* x = reinterpret_cast<const float*>(a);
    const float* y = reinterpret_cast<const float*>(b);
    float* z = reinterpret_cast<float*>(out);
    for (size_t i = 0; i < n; ++i) {
        const float ar = x[2 * i], ai = x[2 * i + 1], br = y[2 * i], bi = y[2 * i + 1];
        z[2 * i] = ar * br - ai * bi;
        z[2 * i + 1] = ar * bi + ai * br;
    }
}

std::string trim_ws(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return {};
    const auto e = s.find_last_not_of(" \t\r\n");
    return s.substr(b, e - b + 1);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// SNR traces

std::vector<snr_trace_point> parse_snr_trace_csv(const std::string& text) {
    std::vector<snr_trace_point> pts;
    std::istringstream in(text);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        line = trim_ws(line);
        if (line.empty() || line[0] == '#') continue;
        const auto comma = line.find(',');
        auto fail = [&](const char* why) {
            std::ostringstream s;
            s << "snr_trace line " << lineno << ": '" << line << "' " << why;
            throw std::invalid_argument(s.str());
        };
        if (comma == std::string::npos) fail("is not 'time,snr_db'");
        const std::string a = trim_ws(line.substr(0, comma));
        const std::string b = trim_ws(line.substr(comma + 1));
        char* end_a = nullptr;
        char* end_b = nullptr;
        const double t = std::strtod(a.c_str(), &end_a);
        const double v = std::strtod(b.c_str(), &end_b);
        const bool num_a = !a.empty() && end_a && *end_a == '\0';
        const bool num_b = !b.empty() && end_b && *end_b == '\0';
        if (!num_a || !num_b) {
            if (pts.empty() && !num_a) continue;  // header line
            fail("has a field that is not a number");
        }
        if (!std::isfinite(t) || !std::isfinite(v)) fail("is not finite");
        if (!pts.empty() && !(t > pts.back().time_s)) fail("time does not increase");
        pts.push_back({t, v});
    }
    return pts;
}

std::vector<snr_trace_point> load_snr_trace_csv(const std::string& path) {
    std::ifstream f(path);
    if (!f) throw std::invalid_argument("snr_trace: cannot read '" + path + "'");
    std::ostringstream s;
    s << f.rdbuf();
    return parse_snr_trace_csv(s.str());
}

// ---------------------------------------------------------------------------------------
// Parameters

void channel_emulator_params::validate() const {
    const gr::oppsched::numerology num(this->numerology);  // validates the numerology
    const double fs = num.params().sample_rate;
    if (users.empty())
        ::oppsched::throw_invalid("channel_emulator.users", users.size(), "entries, need >= 1");
    if (update_interval < 0 || update_interval > 1000000)
        ::oppsched::throw_invalid("channel_emulator.update_interval", update_interval,
                                  "not in [0, 1e6]");
    if (!(tx_power > 0.0) || !std::isfinite(tx_power))
        ::oppsched::throw_invalid("channel_emulator.tx_power", tx_power, "not in (0, inf)");
    const int upd = update_interval > 0 ? update_interval : num.symbol_len();
    for (size_t u = 0; u < users.size(); ++u) {
        const auto& p = users[u];
        const std::string f = "channel_emulator.users[" + std::to_string(u) + "].";
        if (!std::isfinite(p.mean_snr_db) || p.mean_snr_db < -50.0 || p.mean_snr_db > 100.0)
            ::oppsched::throw_invalid(f + "mean_snr_db", p.mean_snr_db, "not in [-50, 100] dB");
        if (!std::isfinite(p.doppler_hz) || p.doppler_hz < 0.0)
            ::oppsched::throw_invalid(f + "doppler_hz", p.doppler_hz, "not in [0, inf) Hz");
        // Linear interpolation needs >= 10 grid points per Doppler period.
        if (p.fading != fading_model::none && p.doppler_hz * upd / fs > 0.1)
            ::oppsched::throw_invalid(
                f + "doppler_hz", p.doppler_hz,
                "too fast for the coefficient grid (need doppler * update_interval / fs <= 0.1)");
        if (!std::isfinite(p.jakes_angle_offset) || std::abs(p.jakes_angle_offset) > 1.0)
            ::oppsched::throw_invalid(f + "jakes_angle_offset", p.jakes_angle_offset,
                                      "not in [-1, 1]");
        if (p.oscillators < 1 || p.oscillators > 4096)
            ::oppsched::throw_invalid(f + "oscillators", p.oscillators, "not in [1, 4096]");
        if (!std::isfinite(p.cfo_hz) || std::abs(p.cfo_hz) >= fs / 2)
            ::oppsched::throw_invalid(f + "cfo_hz", p.cfo_hz, "not in (-fs/2, fs/2)");
        for (size_t l = 0; l < p.taps.size(); ++l) {
            const std::string ft = f + "taps[" + std::to_string(l) + "].";
            if (p.taps[l].delay_samples < 0 || p.taps[l].delay_samples > 100000)
                ::oppsched::throw_invalid(ft + "delay_samples", p.taps[l].delay_samples,
                                          "not in [0, 100000]");
            if (!std::isfinite(p.taps[l].power_db) || p.taps[l].power_db < -100.0 ||
                p.taps[l].power_db > 100.0)
                ::oppsched::throw_invalid(ft + "power_db", p.taps[l].power_db,
                                          "not in [-100, 100] dB");
        }
        for (size_t i = 0; i < p.snr_trace.size(); ++i) {
            const auto& q = p.snr_trace[i];
            const std::string fq = f + "snr_trace[" + std::to_string(i) + "]";
            if (!std::isfinite(q.time_s) || (i > 0 && !(q.time_s > p.snr_trace[i - 1].time_s)))
                ::oppsched::throw_invalid(fq + ".time_s", q.time_s, "not finite and increasing");
            if (!std::isfinite(q.snr_db) || q.snr_db < -100.0 || q.snr_db > 100.0)
                ::oppsched::throw_invalid(fq + ".snr_db", q.snr_db, "not in [-100, 100] dB");
        }
    }
}

// ---------------------------------------------------------------------------------------
// Emulator

struct channel_emulator::tap_state {
    int delay = 0;
    double amp = 1.0;
    std::unique_ptr<::oppsched::channel::fading_channel> fading;  // null: constant 1
    std::uint64_t cached_block = std::numeric_limits<std::uint64_t>::max();
    std::vector<std::complex<double>> cache;  // kGridBlock + 1 grid values
    std::vector<std::complex<double>> scratch;
};

struct channel_emulator::user_state {
    emulator_user_params p;
    std::vector<tap_state> taps;
    gaussian_generator noise;
    double sigma2 = 0.0;
    float noise_std = 0.0f;  // per real component
    double snr_lin = 1.0;
    double cfo_w = 0.0;               // rad/sample
    std::vector<gr_complex> rot_tab;  // e^{j w m}, m < kRotBlock
    explicit user_state(std::uint64_t noise_seed) : noise(noise_seed) {}
};

channel_emulator::channel_emulator(const channel_emulator_params& p)
    : d_p(p), d_num((p.validate(), p.numerology)) {
    d_update = p.update_interval > 0 ? p.update_interval : d_num.symbol_len();
    const double fs = d_num.params().sample_rate;
    for (size_t u = 0; u < p.users.size(); ++u) {
        const auto& up = p.users[u];
        auto us = std::make_unique<user_state>(derive_seed(p.seed, static_cast<int>(u), -1, 0));
        us->p = up;
        us->snr_lin = std::pow(10.0, up.mean_snr_db / 10.0);
        us->sigma2 = d_num.noise_variance_for_snr_db(up.mean_snr_db, p.tx_power);
        us->noise_std = static_cast<float>(std::sqrt(us->sigma2 / 2.0));
        us->cfo_w = 2.0 * kPi * up.cfo_hz / fs;
        us->rot_tab.resize(kRotBlock);
        for (std::uint64_t m = 0; m < kRotBlock; ++m) {
            const std::complex<double> v = std::polar(1.0, us->cfo_w * static_cast<double>(m));
            us->rot_tab[m] = gr_complex(static_cast<float>(v.real()), static_cast<float>(v.imag()));
        }
        std::vector<emulator_tap> taps = up.taps;
        if (taps.empty()) taps.push_back(emulator_tap{});
        double psum = 0.0;
        for (const auto& t : taps) psum += std::pow(10.0, t.power_db / 10.0);
        for (size_t l = 0; l < taps.size(); ++l) {
            tap_state ts;
            ts.delay = taps[l].delay_samples;
            ts.amp = std::sqrt(std::pow(10.0, taps[l].power_db / 10.0) / psum);
            const std::uint64_t s =
                derive_seed(p.seed, static_cast<int>(u), static_cast<int>(l), 1);
            if (up.fading == fading_model::jakes) {
                ::oppsched::channel::jakes_params jp;
                jp.doppler_hz = up.doppler_hz;
                jp.seed = s;
                jp.generators = up.oscillators;
                jp.angle_offset = up.jakes_angle_offset;
                ts.fading = ::oppsched::channel::make_fading(jp);
            } else if (up.fading == fading_model::sum_of_sinusoids) {
                ::oppsched::channel::sum_of_sinusoids_params sp;
                sp.doppler_hz = up.doppler_hz;
                sp.seed = s;
                sp.paths = up.oscillators;
                ts.fading = ::oppsched::channel::make_fading(sp);
            }
            ts.cache.resize(kGridBlock + 1);
            ts.scratch.resize(kGridBlock + 1);
            d_max_delay = std::max(d_max_delay, ts.delay);
            us->taps.push_back(std::move(ts));
        }
        d_users.push_back(std::move(us));
    }
    d_hist.assign(static_cast<size_t>(d_max_delay), gr_complex(0.0f, 0.0f));
    d_xe.resize(static_cast<size_t>(d_max_delay) + kChunk);
    d_h.resize(kChunk);
    d_acc.resize(kChunk);
    d_tmp.resize(kChunk);
    d_rot.resize(kChunk);
    d_noise.resize(2 * kChunk);
}

channel_emulator::~channel_emulator() = default;
channel_emulator::channel_emulator(channel_emulator&&) noexcept = default;
channel_emulator& channel_emulator::operator=(channel_emulator&&) noexcept = default;

double channel_emulator::noise_variance(int u) const {
    return d_users.at(static_cast<size_t>(u))->sigma2;
}

double channel_emulator::trace_factor(const user_state& us, double t) const {
    const auto& tr = us.p.snr_trace;
    if (tr.empty()) return 1.0;
    double db;
    if (tr.size() == 1 || t <= tr.front().time_s) {
        db = tr.front().snr_db;
    } else {
        const double t0 = tr.front().time_s, t1 = tr.back().time_s;
        double tt = t;
        if (tt >= t1) tt = us.p.loop_trace ? t0 + std::fmod(t - t0, t1 - t0) : t1;
        auto it = std::upper_bound(tr.begin(), tr.end(), tt,
                                   [](double v, const snr_trace_point& q) { return v < q.time_s; });
        if (it == tr.end()) {
            db = tr.back().snr_db;
        } else {
            const auto& b = *it;
            const auto& a = *(it - 1);
            db = a.snr_db + (b.snr_db - a.snr_db) * (tt - a.time_s) / (b.time_s - a.time_s);
        }
    }
    return std::sqrt(std::pow(10.0, (db - us.p.mean_snr_db) / 10.0));
}

std::complex<double> channel_emulator::grid_value(user_state& us, size_t l, std::uint64_t k) {
    tap_state& ts = us.taps[l];
    const std::uint64_t b = k / kGridBlock;
    if (ts.cached_block != b) {
        // Computed in fixed, absolutely aligned blocks: the values do not depend on how
        // process() was called (bit-identical output for any chunking).
        const double fs = d_num.params().sample_rate;
        const double dt = d_update / fs;
        const double t0 = static_cast<double>(b * kGridBlock) * dt;
        if (ts.fading)
            ts.fading->gains(t0, dt, kGridBlock + 1, ts.scratch.data());
        else
            std::fill(ts.scratch.begin(), ts.scratch.end(), std::complex<double>(1.0, 0.0));
        for (std::uint64_t i = 0; i <= kGridBlock; ++i)
            ts.cache[i] =
                ts.amp * ts.scratch[i] * trace_factor(us, t0 + static_cast<double>(i) * dt);
        ts.cached_block = b;
    }
    return ts.cache[k - b * kGridBlock];
}

std::complex<double> channel_emulator::tap_gain(int u, int l, std::uint64_t n) {
    user_state& us = *d_users.at(static_cast<size_t>(u));
    const size_t li = static_cast<size_t>(l);
    if (li >= us.taps.size())
        throw std::invalid_argument("channel_emulator.tap_gain: tap " + std::to_string(l) +
                                    " out of range");
    const std::uint64_t U = static_cast<std::uint64_t>(d_update);
    const std::uint64_t k = n / U;
    const std::complex<double> g0 = grid_value(us, li, k);
    const std::complex<double> g1 = grid_value(us, li, k + 1);
    // Same float arithmetic as process().
    const gr_complex h0(static_cast<float>(g0.real()), static_cast<float>(g0.imag()));
    const gr_complex h1(static_cast<float>(g1.real()), static_cast<float>(g1.imag()));
    const gr_complex dh = (h1 - h0) / static_cast<float>(U);
    const gr_complex h = h0 + dh * static_cast<float>(n % U);
    return {h.real(), h.imag()};
}

double channel_emulator::power_gain(int u, std::uint64_t n) {
    double p = 0.0;
    const int nt = static_cast<int>(d_users.at(static_cast<size_t>(u))->taps.size());
    for (int l = 0; l < nt; ++l) p += std::norm(tap_gain(u, l, n));
    return p;
}

std::vector<float> channel_emulator::subcarrier_snr(int u, std::uint64_t n) {
    user_state& us = *d_users.at(static_cast<size_t>(u));
    const auto& occ = d_num.occupied_subcarriers();
    const int N = d_num.params().fft_len;
    std::vector<float> out(occ.size());
    std::vector<std::complex<double>> h;
    for (size_t l = 0; l < us.taps.size(); ++l) h.push_back(tap_gain(u, static_cast<int>(l), n));
    for (size_t i = 0; i < occ.size(); ++i) {
        std::complex<double> H(0.0, 0.0);
        for (size_t l = 0; l < h.size(); ++l)
            H += h[l] * std::polar(1.0, -2.0 * kPi * occ[i] * us.taps[l].delay / N);
        out[i] = static_cast<float>(us.snr_lin * std::norm(H));
    }
    return out;
}

void channel_emulator::process(const gr_complex* in, gr_complex* const* out, size_t n) {
    const std::uint64_t U = static_cast<std::uint64_t>(d_update);
    const size_t md = static_cast<size_t>(d_max_delay);
    size_t done = 0;
    while (done < n) {
        const size_t len = std::min(kChunk, n - done);
        const std::uint64_t n0 = d_n;
        // Extended input: the last max_delay samples, then this piece.
        std::copy(d_hist.begin(), d_hist.end(), d_xe.begin());
        std::copy(in + done, in + done + len, d_xe.begin() + static_cast<std::ptrdiff_t>(md));

        for (size_t u = 0; u < d_users.size(); ++u) {
            user_state& us = *d_users[u];
            gr_complex* y = out[u] + done;
            const bool rotate = us.cfo_w != 0.0;
            gr_complex* acc = rotate ? d_acc.data() : y;
            for (size_t l = 0; l < us.taps.size(); ++l) {
                // Linearly interpolated coefficient per sample, grid interval by interval.
                size_t j = 0;
                while (j < len) {
                    const std::uint64_t a = n0 + j;
                    const std::uint64_t k = a / U;
                    const std::uint64_t m0 = a % U;
                    const size_t cnt =
                        static_cast<size_t>(std::min<std::uint64_t>(U - m0, len - j));
                    const std::complex<double> g0 = grid_value(us, l, k);
                    const std::complex<double> g1 = grid_value(us, l, k + 1);
                    const gr_complex h0(static_cast<float>(g0.real()),
                                        static_cast<float>(g0.imag()));
                    const gr_complex h1(static_cast<float>(g1.real()),
                                        static_cast<float>(g1.imag()));
                    const gr_complex dh = (h1 - h0) / static_cast<float>(U);
                    for (size_t i = 0; i < cnt; ++i)
                        d_h[j + i] = h0 + dh * static_cast<float>(m0 + i);
                    j += cnt;
                }
                const gr_complex* x = d_xe.data() + md - static_cast<size_t>(us.taps[l].delay);
                if (l == 0) {
                    cmul(acc, d_h.data(), x, len);
                } else {
                    cmul(d_tmp.data(), d_h.data(), x, len);
                    volk_32f_x2_add_32f(reinterpret_cast<float*>(acc),
                                        reinterpret_cast<const float*>(acc),
                                        reinterpret_cast<const float*>(d_tmp.data()),
                                        static_cast<unsigned>(2 * len));
                }
            }
            if (rotate) {
                // Exact phase at every kRotBlock-aligned sample, table inside the block.
                size_t j = 0;
                while (j < len) {
                    const std::uint64_t a = n0 + j;
                    const std::uint64_t m0 = a % kRotBlock;
                    const std::uint64_t base = a - m0;
                    const size_t cnt =
                        static_cast<size_t>(std::min<std::uint64_t>(kRotBlock - m0, len - j));
                    // reduce the phase modulo 2 pi in double before the polar()
                    const double ph = std::fmod(us.cfo_w * static_cast<double>(base), 2.0 * kPi);
                    const std::complex<double> pd = std::polar(1.0, ph);
                    const gr_complex p0(static_cast<float>(pd.real()),
                                        static_cast<float>(pd.imag()));
                    for (size_t i = 0; i < cnt; ++i) d_rot[j + i] = p0 * us.rot_tab[m0 + i];
                    j += cnt;
                }
                cmul(y, d_acc.data(), d_rot.data(), len);
            }
            if (us.p.add_noise) {
                us.noise.fill(d_noise.data(), 2 * len, us.noise_std);
                volk_32f_x2_add_32f(reinterpret_cast<float*>(y), reinterpret_cast<const float*>(y),
                                    d_noise.data(), static_cast<unsigned>(2 * len));
            }
        }
        // Keep the last max_delay input samples.
        if (md > 0)
            std::copy(d_xe.begin() + static_cast<std::ptrdiff_t>(len),
                      d_xe.begin() + static_cast<std::ptrdiff_t>(len + md), d_hist.begin());
        d_n += len;
        done += len;
    }
}

std::vector<std::vector<gr_complex>> channel_emulator::process(const std::vector<gr_complex>& in) {
    std::vector<std::vector<gr_complex>> out(d_users.size(), std::vector<gr_complex>(in.size()));
    std::vector<gr_complex*> ptrs;
    for (auto& v : out) ptrs.push_back(v.data());
    process(in.data(), ptrs.data(), in.size());
    return out;
}

}  // namespace oppsched
}  // namespace gr
