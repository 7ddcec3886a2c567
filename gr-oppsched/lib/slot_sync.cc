// Slot synchronisation; see slot_sync.h.
#include <gnuradio/oppsched/slot_sync.h>
#include <volk/volk.h>

#include <algorithm>
#include <cmath>

#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kRecomputeEvery = 1024;
// A symbol is silent when its power is below sigma^2 (1 + kSilenceMargin) (+ the optional
// truncation_fraction of the signal power).
constexpr double kSilenceMargin = 1.0;
// Largest accepted |fine CFO| (spacings), i.e. disagreement of the coarse and fine CFO
// estimates of one detection (see verify()).
constexpr double kMaxFineCfo = 0.25;

// out[i] = in[i] * exp(-j 2 pi eps i / N) (phase origin at i = 0), eps in subcarrier
// spacings; double-precision phasor, re-anchored every 256 samples.
void derotate(const gr_complex* in, gr_complex* out, size_t n, double eps, int n_fft) {
    const double w = -2.0 * kPi * eps / n_fft;
    size_t i = 0;
    while (i < n) {
        const size_t len = std::min<size_t>(256, n - i);
        lv_32fc_t phase =
            lv_cmake(static_cast<float>(std::cos(w * i)), static_cast<float>(std::sin(w * i)));
        const lv_32fc_t inc =
            lv_cmake(static_cast<float>(std::cos(w)), static_cast<float>(std::sin(w)));
        volk_32fc_s32fc_x2_rotator_32fc(out + i, in + i, inc, &phase, static_cast<unsigned>(len));
        i += len;
    }
}

}  // namespace

void slot_sync_params::validate(const numerology& n) const {
    if (!(detection_threshold > 0.0f && detection_threshold < 1.0f))
        ::oppsched::throw_invalid("slot_sync.detection_threshold", detection_threshold,
                                  "not in (0, 1)");
    if (!(ltf_threshold > 0.0f && ltf_threshold <= 4.0f))
        ::oppsched::throw_invalid("slot_sync.ltf_threshold", ltf_threshold, "not in (0, 4]");
    if (ltf_search < 1 || ltf_search > n.symbol_len())
        ::oppsched::throw_invalid("slot_sync.ltf_search", ltf_search, "not in [1, symbol_len]");
    if (!(first_path_fraction > 0.0f && first_path_fraction <= 1.0f))
        ::oppsched::throw_invalid("slot_sync.first_path_fraction", first_path_fraction,
                                  "not in (0, 1]");
    if (timing_backoff < 0 || timing_backoff >= n.params().cp_len)
        ::oppsched::throw_invalid("slot_sync.timing_backoff", timing_backoff, "not in [0, cp_len)");
    if (!(truncation_fraction >= 0.0f && truncation_fraction < 1.0f))
        ::oppsched::throw_invalid("slot_sync.truncation_fraction", truncation_fraction,
                                  "not in [0, 1)");
    if (truncation_min_symbols < 1)
        ::oppsched::throw_invalid("slot_sync.truncation_min_symbols", truncation_min_symbols,
                                  "not >= 1");
    if (!std::isfinite(truncation_min_snr_db))
        ::oppsched::throw_invalid("slot_sync.truncation_min_snr_db", truncation_min_snr_db,
                                  "not finite");
}

slot_sync::slot_sync(const numerology& n, const slot_sync_params& p)
    : d_p(p),
      d_seq(n),
      d_L(n.params().fft_len / 2),
      d_W(n.params().cp_len + n.params().fft_len / 2) {
    d_p.validate(n);
}

void slot_sync::reset() {
    d_buf.clear();
    d_base = 0;
    d_scan = 0;
    d_sums_valid = false;
    d_state = state::search;
}

float slot_sync::metric_at(std::uint64_t d) {
    bool exact = !(d_sums_valid && d == d_sum_pos + 1 && d_since_recompute < kRecomputeEvery);
    if (!exact) {
        const std::uint64_t o = d - 1;
        const std::complex<double> a_old(*at(o)), b_old(*at(o + d_L));
        const std::complex<double> a_new(*at(o + d_W)), b_new(*at(o + d_W + d_L));
        const double e1_old = d_E1, e2_old = d_E2;
        d_P += std::conj(a_new) * b_new - std::conj(a_old) * b_old;
        d_E1 += std::norm(a_new) - std::norm(a_old);
        d_E2 += std::norm(b_new) - std::norm(b_old);
        ++d_since_recompute;
        // When a window's energy collapses by 60 dB in one step (the end of a burst), the
        // sliding sums hold only rounding residue of the old energy: recompute exactly.
        exact = d_E1 < 1e-6 * e1_old || d_E2 < 1e-6 * e2_old;
    }
    if (exact) {
        d_P = 0.0;
        d_E1 = d_E2 = 0.0;
        for (int m = 0; m < d_W; ++m) {
            const std::complex<double> a(*at(d + m)), b(*at(d + m + d_L));
            d_P += std::conj(a) * b;
            d_E1 += std::norm(a);
            d_E2 += std::norm(b);
        }
        d_since_recompute = 0;
    }
    d_sums_valid = true;
    d_sum_pos = d;
    const double den = d_E1 * d_E2;
    if (!(den > 1e-300)) return 0.0f;
    return static_cast<float>(std::min(1.0, std::norm(d_P) / den));
}

size_t slot_sync::push(const gr_complex* in, size_t n, std::vector<slot_detection>& found) {
    const size_t before = found.size();
    d_buf.reserve(d_buf.size() + n);
    for (size_t i = 0; i < n; ++i) {
        gr_complex v = in[i];
        if (!std::isfinite(v.real()) || !std::isfinite(v.imag())) {
            v = gr_complex(0.0f, 0.0f);
            ++d_stats.nonfinite;
        }
        d_buf.push_back(v);
    }
    d_stats.samples += n;

    const numerology& num = geometry();
    const std::uint64_t span = static_cast<std::uint64_t>(d_W + d_L);
    for (;;) {
        const std::uint64_t end = d_base + d_buf.size();
        if (d_state != state::verify) {
            while (d_scan + span <= end) {
                const float m = metric_at(d_scan);
                if (d_state == state::search) {
                    if (m >= d_p.detection_threshold) {
                        ++d_stats.triggers;
                        d_state = state::peak;
                        d_peak_end = d_scan + span;
                        d_trigger_pos = d_scan;
                        d_best_m = m;
                        d_best_pos = d_scan;
                    }
                } else if (m > d_best_m) {
                    d_best_m = m;
                    d_best_pos = d_scan;
                }
                ++d_scan;
                if (d_state == state::peak && d_scan > d_peak_end) {
                    // Still rising at the end of the window (the trigger came from noise
                    // just before a preamble): look one more window ahead, once.
                    if (d_best_pos + 4 > d_peak_end && d_peak_end - d_trigger_pos < 2 * span) {
                        d_peak_end += span;
                        continue;
                    }
                    d_state = state::verify;
                    break;
                }
            }
            if (d_state != state::verify) break;  // need more samples
        }
        // verify: wait until the whole slot (and the LTF search window) is buffered
        // (the LTF alias check in verify() reads up to ltf_offset + 4 fft_len + cp past it)
        const std::uint64_t need =
            d_best_pos +
            static_cast<std::uint64_t>(
                d_p.ltf_search +
                std::max(num.slot_samples() + 2 * num.params().cp_len + num.params().fft_len,
                         num.ltf_offset(0) + 4 * num.params().fft_len + num.params().cp_len));
        if (end < need) break;
        verify(found);
        d_state = state::search;
    }
    trim();
    return found.size() - before;
}

std::vector<slot_detection> slot_sync::push(const std::vector<gr_complex>& in) {
    std::vector<slot_detection> found;
    push(in.data(), in.size(), found);
    return found;
}

void slot_sync::advance_scan_to(std::uint64_t next) {
    if (next > d_scan) {
        d_scan = next;
        d_sums_valid = false;
    }
}

bool slot_sync::reject_ltf() {
    // The S&C threshold is only a pre-filter (docs/phy.md, "Slot synchronisation"): with a low
    // threshold a noise maximum can win the peak search while the real STF peak lies later
    // in the same window. Resume right after the rejected peak instead of after the window,
    // so that peak is searched (and verified) on its own; each rejection advances the scan
    // by >= 1 sample, so this terminates.
    ++d_stats.rejected_ltf;
    const std::uint64_t next = d_best_pos + 1;
    if (next < d_scan) {
        d_scan = next;
        d_sums_valid = false;
    }
    return false;
}

bool slot_sync::match_ltf(ltf_match& m) {
    const numerology& num = geometry();
    const int n_fft = num.params().fft_len;
    const int cp = num.params().cp_len;
    const int S = d_p.ltf_search;
    const std::int64_t base = static_cast<std::int64_t>(d_base);
    const std::int64_t coarse = static_cast<std::int64_t>(d_best_pos);
    // Coarse CFO (S&C eq. 39): angle(P) = 2 pi eps L / N. P summed afresh at the peak
    // rather than taken from the sliding sums, whose rounding depends on how long they have
    // slid: the estimate is then a function of the slot's own samples alone, the same for a
    // receiver that starts mid-stream (an offline decode of a recording with gaps).
    std::complex<double> P(0.0, 0.0);
    for (int k = 0; k < d_W; ++k)
        P += std::conj(std::complex<double>(*at(d_best_pos + k))) *
             std::complex<double>(*at(d_best_pos + k + d_L));
    m.eps_c = std::arg(P) * n_fft / (2.0 * kPi * d_L);

    // Coarse-corrected segment around the expected LTF.
    const std::int64_t e = coarse + num.ltf_offset(0);
    m.seg_start = std::max(base, e - S - cp);
    const std::int64_t d_lo = std::max(e - S, m.seg_start + cp);
    const std::int64_t d_hi = e + S;
    // C is also evaluated over the 2 fft_len positions after d_hi (alias check below).
    const std::int64_t ext = 2 * n_fft;
    const std::int64_t seg_end = d_hi + ext + 2 * n_fft + cp;  // exclusive
    const size_t seg_len = static_cast<size_t>(seg_end - m.seg_start);
    d_seg.resize(seg_len);
    derotate(at(static_cast<std::uint64_t>(m.seg_start)), d_seg.data(), seg_len, m.eps_c, n_fft);

    // LTF cross-correlation over [d_lo, d_hi].
    const auto& ref = d_seq.ltf_pair();
    double e_ref = 0.0;
    for (const auto& v : ref) e_ref += std::norm(v);
    const size_t n_pos = static_cast<size_t>(d_hi - d_lo + 1);
    const size_t n_all = n_pos + static_cast<size_t>(ext);
    d_c.assign(n_all, 0.0f);
    const size_t n_ref = ref.size();
    size_t j0 = static_cast<size_t>(d_lo - m.seg_start);
    double e_r = 0.0;
    for (size_t k = 0; k < n_ref; ++k) e_r += std::norm(d_seg[j0 + k]);
    size_t pk = 0;
    for (size_t i = 0; i < n_all; ++i) {
        const size_t j = j0 + i;
        if (i > 0) e_r += std::norm(d_seg[j + n_ref - 1]) - std::norm(d_seg[j - 1]);
        lv_32fc_t c;
        volk_32fc_x2_conjugate_dot_prod_32fc(&c, d_seg.data() + j, ref.data(),
                                             static_cast<unsigned>(n_ref));
        const double den = std::max(e_r, 0.0) * e_ref;
        d_c[i] = den > 1e-300 ? static_cast<float>(std::min(1.0, std::norm(c) / den)) : 0.0f;
        if (i < n_pos && d_c[i] > d_c[pk]) pk = i;
    }
    float win = 0.0f;
    const size_t half = static_cast<size_t>(cp / 2);
    for (size_t i = (pk >= half ? pk - half : 0); i <= std::min(n_pos - 1, pk + half); ++i)
        win += d_c[i];
    // Alias check. The preamble is self-similar at lags that are multiples of 32 (the
    // STF's period, the GI = last half of the long symbol, the two long symbols): the
    // window 64 samples before the true LTF matches 96 of its 128 reference samples
    // (GI + first long symbol, C ~ 0.56 s/(1+s)) and the one 128 before matches the GI
    // and part of the STF (C ~ 0.2 at 10 dB), enough to pass ltf_threshold at high SNR.
    // A coarse position from a noise trigger 64..140 samples before a slot (frequent
    // with the low pre-filter threshold) would then report the slot early. So the peak
    // must also beat every C up to 2 fft_len later (beyond cp of the peak, the same
    // LTF's own spread); if it does not, the real LTF is later and the scan resumes
    // (reject_ltf) to find it through its own STF. Cost: 2 fft_len more correlations.
    float later = 0.0f;
    for (size_t i = pk + static_cast<size_t>(cp) + 1; i < n_all; ++i)
        later = std::max(later, d_c[i]);
    if (!(win >= d_p.ltf_threshold) || later > d_c[pk]) return false;
    // Fine timing: the first path, the first C within half a CP before the peak that
    // reaches first_path_fraction of it.
    size_t first = pk;
    for (size_t i = (pk >= half ? pk - half : 0); i <= pk; ++i) {
        if (d_c[i] >= d_p.first_path_fraction * d_c[pk]) {
            first = i;
            break;
        }
    }
    m.t0 = d_lo + static_cast<std::int64_t>(first) - d_p.timing_backoff;
    m.ltf_metric = d_c[pk];
    return true;
}

double slot_sync::fine_cfo(const ltf_match& m) const {
    // From the two long symbols (lag N): angle = 2 pi eps_f.
    const int n_fft = geometry().params().fft_len;
    const size_t k0 = static_cast<size_t>(m.t0 - m.seg_start);
    std::complex<double> a(0.0, 0.0);
    for (int i = 0; i < n_fft; ++i)
        a += std::conj(std::complex<double>(d_seg[k0 + i])) *
             std::complex<double>(d_seg[k0 + n_fft + i]);
    return std::arg(a) / (2.0 * kPi);
}

bool slot_sync::extract(const ltf_match& m, double eps, slot_detection& det) const {
    const numerology& num = geometry();
    const std::int64_t base = static_cast<std::int64_t>(d_base);
    std::int64_t start = m.t0 - num.ltf_offset(0);
    if (start < base) {
        // The stream began inside the timing backoff (a slot at the very first sample):
        // use what is there. Any earlier means the slot's beginning was never received.
        if (start + d_p.timing_backoff < base) return false;
        start = base;
    }
    det.start = static_cast<std::uint64_t>(start);
    det.cfo = eps;
    det.cfo_hz = eps * num.subcarrier_spacing();
    det.sc_metric = d_best_m;
    det.ltf_metric = m.ltf_metric;
    const size_t ns = static_cast<size_t>(num.slot_samples());
    det.samples.resize(ns);
    derotate(at(static_cast<std::uint64_t>(start)), det.samples.data(), ns, eps,
             num.params().fft_len);
    return true;
}

bool slot_sync::measure_ltf(const slot_detection& det, ltf_levels& lv) const {
    const numerology& num = geometry();
    const int n_fft = num.params().fft_len;
    const gr_complex* r1 = det.samples.data() + num.ltf_offset(0);
    const gr_complex* r2 = det.samples.data() + num.ltf_offset(1);
    double dsum = 0.0, ssum = 0.0, e1 = 0.0, e2 = 0.0;
    for (int m = 0; m < n_fft; ++m) {
        dsum += std::norm(r1[m] - r2[m]);
        ssum += std::norm(r1[m] + r2[m]);
        e1 += std::norm(r1[m]);
        e2 += std::norm(r2[m]);
    }
    // The two long symbols carry the same signal and independent noise: energies within
    // a factor 2 (their ratio fluctuates by ~1/sqrt(fft_len) from the noise). A burst cut
    // (or begun) inside the LTF fails this at any SNR.
    if (!(e2 >= 0.5 * e1 && e1 >= 0.5 * e2)) return false;
    lv.sigma2 = dsum / (2.0 * n_fft);
    lv.p_sig = std::max(0.0, ssum / (4.0 * n_fft) - 0.5 * lv.sigma2);
    lv.snr = lv.sigma2 > 0.0 ? lv.p_sig / lv.sigma2 : 1e12;
    return true;
}

bool slot_sync::cut_short(const slot_detection& det, const ltf_levels& lv,
                          std::int64_t& first_silent) const {
    // A burst cut short is followed by SILENCE: symbols whose power is at the noise floor
    // (the margin covers the spread of two 64-sample power estimates, ~0.18 relative: 5.6
    // standard deviations). Only a silent run that reaches the end of the slot and is at
    // least truncation_min_symbols long drops the slot. A deep fade in the middle of the
    // slot (60 Hz Jakes: a -30 dB fade lasts ~200 us) is delivered and the header / payload
    // CRCs decide; but the search then resumes at the first silent symbol, so a new burst
    // that starts inside this slot's span (a cut slot followed by the next one) is still found.
    first_silent = -1;
    if (!(lv.snr >= std::pow(10.0, d_p.truncation_min_snr_db / 10.0))) return false;
    const numerology& num = geometry();
    const int n_fft = num.params().fft_len;
    const int cp = num.params().cp_len;
    const double floor = lv.sigma2 * (1.0 + kSilenceMargin) + d_p.truncation_fraction * lv.p_sig;
    int trailing = 0;
    for (int s = 0; s < num.data_symbols(); ++s) {
        const gr_complex* x = det.samples.data() + num.symbol_offset(s) + cp;
        double ps = 0.0;
        for (int m = 0; m < n_fft; ++m) ps += std::norm(x[m]);
        if (ps / n_fft < floor) {
            if (first_silent < 0) first_silent = num.symbol_offset(s);
            ++trailing;
        } else {
            trailing = 0;
        }
    }
    return trailing >= std::min(d_p.truncation_min_symbols, num.data_symbols());
}

bool slot_sync::verify(std::vector<slot_detection>& found) {
    const numerology& num = geometry();
    ltf_match m;
    if (!match_ltf(m)) return reject_ltf();
    // Coarse and fine CFO must agree. For a true detection |eps_f| is the coarse
    // estimate's error: S&C's eq. 39 over W = 48 pairs has a standard deviation of
    // ~0.07 spacing at 0 dB Es/N0 and ~0.09 at -2 dB, so kMaxFineCfo = 0.25 is > 2.7
    // sigma there. A coarse position from a noise trigger carries a random eps_c; if its
    // LTF search nevertheless lands on a self-similar part of a preamble (an alias, see
    // match_ltf), the lag-fft_len correlation there still measures the true CFO and
    // |eps_f| is uniform-like over [0, 0.5]: most such aliases are rejected here.
    const double eps_f = fine_cfo(m);
    if (std::abs(eps_f) > kMaxFineCfo) return reject_ltf();

    slot_detection det;
    ltf_levels lv;
    if (!extract(m, m.eps_c + eps_f, det) || !measure_ltf(det, lv)) {
        ++d_stats.rejected_truncated;
        return false;
    }
    det.snr_db = static_cast<float>(10.0 * std::log10(std::max(lv.snr, 1e-6)));
    std::int64_t first_silent = -1;
    if (cut_short(det, lv, first_silent)) {
        ++d_stats.rejected_truncated;
        // The burst (with a complete LTF) is real but cut short: nothing new can start
        // before its second long symbol, and searching its LTF again from a later coarse
        // position would only find its aliases (see match_ltf).
        advance_scan_to(det.start + static_cast<std::uint64_t>(num.ltf_offset(1)));
        return false;
    }

    // Resume just before the next possible slot start.
    std::uint64_t resume =
        det.start + static_cast<std::uint64_t>(num.slot_samples() - (d_W + d_L) / 2);
    if (first_silent >= 0)
        resume = std::min(resume, det.start + static_cast<std::uint64_t>(first_silent));
    advance_scan_to(resume);
    ++d_stats.detections;
    found.push_back(std::move(det));
    return true;
}

void slot_sync::trim() {
    const numerology& num = geometry();
    std::int64_t keep = static_cast<std::int64_t>(d_scan) - 1;
    if (d_state != state::search) {
        const std::int64_t from =
            static_cast<std::int64_t>(d_best_pos) - d_p.ltf_search - 2 * num.params().cp_len;
        keep = std::min(keep, from);
    }
    const std::int64_t drop = keep - static_cast<std::int64_t>(d_base);
    if (drop <= 0) return;
    const size_t nd = std::min(static_cast<size_t>(drop), d_buf.size());
    if (nd < 4096 && nd * 2 < d_buf.size()) return;  // amortise the erase
    d_buf.erase(d_buf.begin(), d_buf.begin() + static_cast<std::ptrdiff_t>(nd));
    d_base += nd;
}

}  // namespace oppsched
}  // namespace gr
