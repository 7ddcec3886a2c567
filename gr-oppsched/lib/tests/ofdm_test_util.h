#pragma once
// Helpers shared by the OFDM / sync / channel-estimation / emulator tests (seeded).
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/numerology.h>

#include <cmath>
#include <complex>
#include <cstdint>
#include <random>
#include <vector>

namespace ofdm_test {

constexpr double kPi = 3.14159265358979323846;

//! Unit-energy square QAM points (2: QPSK, 4: 16QAM, 6: 64QAM), uniformly random.
inline std::vector<gr_complex> random_qam(std::mt19937_64& rng, size_t n, int bits) {
    const int m = 1 << (bits / 2);  // levels per axis
    double e = 0.0;
    for (int i = 0; i < m; ++i) {
        const double v = 2 * i - (m - 1);
        e += v * v;
    }
    const float scale = static_cast<float>(1.0 / std::sqrt(2.0 * e / m));
    std::uniform_int_distribution<int> d(0, m - 1);
    std::vector<gr_complex> out(n);
    for (auto& v : out)
        v = scale * gr_complex(static_cast<float>(2 * d(rng) - (m - 1)),
                               static_cast<float>(2 * d(rng) - (m - 1)));
    return out;
}

//! Adds complex white Gaussian noise of variance sigma2 per sample.
inline void add_awgn(std::mt19937_64& rng, std::vector<gr_complex>& x, double sigma2) {
    std::normal_distribution<double> g(0.0, std::sqrt(sigma2 / 2.0));
    for (auto& v : x) v += gr_complex(static_cast<float>(g(rng)), static_cast<float>(g(rng)));
}

//! x[n] *= exp(j 2 pi eps (n + n0) / N): a CFO of eps subcarrier spacings.
inline void apply_cfo(std::vector<gr_complex>& x, double eps, int n_fft, double n0 = 0.0) {
    for (size_t n = 0; n < x.size(); ++n) {
        const double ph = 2.0 * kPi * eps * (static_cast<double>(n) + n0) / n_fft;
        x[n] *= gr_complex(static_cast<float>(std::cos(ph)), static_cast<float>(std::sin(ph)));
    }
}

//! Static multipath: y[n] = sum_l h[l] x[n - d[l]] (same length as x).
inline std::vector<gr_complex> convolve(const std::vector<gr_complex>& x,
                                        const std::vector<int>& delays,
                                        const std::vector<gr_complex>& gains) {
    std::vector<gr_complex> y(x.size(), gr_complex(0.0f, 0.0f));
    for (size_t l = 0; l < delays.size(); ++l)
        for (size_t n = static_cast<size_t>(delays[l]); n < x.size(); ++n)
            y[n] += gains[l] * x[n - static_cast<size_t>(delays[l])];
    return y;
}

inline double max_abs_error(const std::vector<gr_complex>& a, const std::vector<gr_complex>& b) {
    double m = 0.0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i)
        m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
    return m;
}

inline double mse(const std::vector<gr_complex>& a, const std::vector<gr_complex>& b) {
    double s = 0.0;
    for (size_t i = 0; i < a.size(); ++i) s += std::norm(a[i] - b[i]);
    return s / static_cast<double>(a.size());
}

//! true frequency response of a static tapped delay line (delays d, gains g) on the
//! occupied subcarriers of \p num
inline std::vector<std::complex<double>> response(const gr::oppsched::numerology& num,
                                                  const std::vector<int>& d,
                                                  const std::vector<gr_complex>& g) {
    std::vector<std::complex<double>> H;
    for (int k : num.occupied_subcarriers()) {
        std::complex<double> h = 0;
        for (size_t l = 0; l < d.size(); ++l)
            h += std::complex<double>(g[l]) *
                 std::polar(1.0, -2 * kPi * k * d[l] / num.params().fft_len);
        H.push_back(h);
    }
    return H;
}

}  // namespace ofdm_test
