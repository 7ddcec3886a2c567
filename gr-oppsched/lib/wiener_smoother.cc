// Wiener channel smoother; see wiener_smoother.h.
#include <gnuradio/oppsched/wiener_smoother.h>
#include <volk/volk.h>

#include <algorithm>
#include <cmath>
#include <complex>

#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

namespace {

constexpr double kPi = 3.14159265358979323846;
// eps = ls_var / S is capped here (S estimated as ~0 at very low SNR): the smoother then
// keeps only its strongest eigen-directions instead of zeroing the estimate.
constexpr double kMaxEps = 50.0;

// Cyclic Jacobi eigen-decomposition of a Hermitian n x n matrix a (row-major, destroyed):
// eigenvalues on return in lambda, eigenvectors in the COLUMNS of v. Each rotation first
// makes a_pq real with a diagonal phase, then applies the real Jacobi rotation with
// tan 2 theta = 2 |a_pq| / (a_qq - a_pp). O(n^3) per sweep; n = L (~21): < 1 ms, once.
void hermitian_jacobi(std::vector<std::complex<double>>& a, size_t n, std::vector<double>& lambda,
                      std::vector<std::complex<double>>& v) {
    v.assign(n * n, 0.0);
    for (size_t i = 0; i < n; ++i) v[i * n + i] = 1.0;
    auto A = [&](size_t r, size_t c) -> std::complex<double>& { return a[r * n + c]; };
    double total = 0.0;
    for (const auto& x : a) total += std::norm(x);
    for (int sweep = 0; sweep < 60; ++sweep) {
        double off = 0.0;
        for (size_t p = 0; p < n; ++p)
            for (size_t q = 0; q < n; ++q)
                if (p != q) off += std::norm(A(p, q));
        if (off <= 1e-26 * total) break;
        for (size_t p = 0; p + 1 < n; ++p) {
            for (size_t q = p + 1; q < n; ++q) {
                const std::complex<double> apq = A(p, q);
                const double mag = std::abs(apq);
                if (mag < 1e-300) continue;
                const std::complex<double> ph = apq / mag;  // e^{j phi}
                const double theta = 0.5 * std::atan2(2.0 * mag, A(q, q).real() - A(p, p).real());
                const double c = std::cos(theta), s = std::sin(theta);
                // J = [[c, s], [-s e^{-j phi}, c e^{-j phi}]] in the (p, q) plane.
                const std::complex<double> jqp = -s * std::conj(ph), jqq = c * std::conj(ph);
                for (size_t r = 0; r < n; ++r) {  // A <- A J, V <- V J (columns p, q)
                    const auto ap = A(r, p), aq = A(r, q);
                    A(r, p) = c * ap + jqp * aq;
                    A(r, q) = s * ap + jqq * aq;
                    const auto vp = v[r * n + p], vq = v[r * n + q];
                    v[r * n + p] = c * vp + jqp * vq;
                    v[r * n + q] = s * vp + jqq * vq;
                }
                for (size_t col = 0; col < n; ++col) {  // A <- J^H A (rows p, q)
                    const auto ap = A(p, col), aq = A(q, col);
                    A(p, col) = c * ap + std::conj(jqp) * aq;
                    A(q, col) = s * ap + std::conj(jqq) * aq;
                }
            }
        }
    }
    lambda.resize(n);
    for (size_t i = 0; i < n; ++i) lambda[i] = A(i, i).real();
}

}  // namespace

wiener_smoother::wiener_smoother(const numerology& n, int delay_margin, bool adaptive_window)
    : d_K(n.occupied_subcarriers().size()) {
    const int cp = n.params().cp_len;
    if (delay_margin < 0 || delay_margin > cp)
        ::oppsched::throw_invalid("wiener_smoother.delay_margin", delay_margin,
                                  "not in [0, cp_len]");
    if (adaptive_window)  // the short window first
        d_basis.push_back(build(n, -delay_margin, cp / 2));
    d_basis.push_back(build(n, -delay_margin, cp + delay_margin));
    d_coefs.resize(d_basis.size());
}

wiener_smoother::basis wiener_smoother::build(const numerology& n, int lo, int hi) {
    // R = F F^H / L over the delay window (uniform power delay profile, unit diagonal).
    // Its nonzero eigenpairs come from the L x L Gram matrix G = F^H F / L = V Lambda V^H:
    // u_i = F v_i / sqrt(L lambda_i) (then R u_i = lambda_i u_i, u_i orthonormal).
    const numerology& num = n;
    const int N = num.params().fft_len;
    const size_t L = static_cast<size_t>(hi - lo + 1);
    const auto& occ = num.occupied_subcarriers();
    const size_t K = occ.size();
    std::vector<std::complex<double>> F(K * L);
    for (size_t k = 0; k < K; ++k)
        for (size_t t = 0; t < L; ++t)
            F[k * L + t] = std::polar(1.0, -2.0 * kPi * occ[k] * (lo + static_cast<int>(t)) / N);
    std::vector<std::complex<double>> G(L * L, 0.0);
    for (size_t a = 0; a < L; ++a)
        for (size_t b = 0; b < L; ++b) {
            std::complex<double> acc = 0.0;
            for (size_t k = 0; k < K; ++k) acc += std::conj(F[k * L + a]) * F[k * L + b];
            G[a * L + b] = acc / static_cast<double>(L);
        }
    std::vector<double> lam;
    std::vector<std::complex<double>> V;
    hermitian_jacobi(G, L, lam, V);
    double lmax = 0.0;
    for (double l : lam) lmax = std::max(lmax, l);
    basis sm;
    for (size_t i = 0; i < L; ++i) {
        // numerically null directions (delay-window components living only in the
        // unoccupied bins) carry no channel energy: dropped
        if (!(lam[i] > 1e-9 * lmax)) continue;
        const double sc = 1.0 / std::sqrt(static_cast<double>(L) * lam[i]);
        for (size_t k = 0; k < K; ++k) {
            std::complex<double> u = 0.0;
            for (size_t t = 0; t < L; ++t) u += F[k * L + t] * V[t * L + i];
            sm.U.push_back(
                gr_complex(static_cast<float>(u.real() * sc), static_cast<float>(u.imag() * sc)));
        }
        sm.lambda.push_back(static_cast<float>(lam[i]));
    }
    // transposed copies for the per-subcarrier dot products (K x r)
    const size_t r = sm.lambda.size();
    sm.Ut.resize(K * r);
    sm.U2t.resize(K * r);
    for (size_t i = 0; i < r; ++i)
        for (size_t k = 0; k < K; ++k) {
            sm.Ut[k * r + i] = sm.U[i * K + k];
            sm.U2t[k * r + i] = std::norm(sm.U[i * K + k]);
        }
    return sm;
}

int wiener_smoother::smooth(gr_complex* h, float* mse, double ls_var, double signal_power) {
    const size_t K = d_K;
    // Window choice (adaptive): the short window's range lies inside the long one's, so
    // ||P_long h||^2 - ||P_short h||^2 is the energy of h in the extra d = rank difference
    // dimensions; with the channel inside the short window it is noise only, mean
    // d N0/2, standard deviation sqrt(d) N0/2 (N0/2 = ls_var, the LS error: N0/6 with
    // the header, step 6). Above d + 4 sqrt(d) (times N0/2) the long
    // window is used. A missed weak late path has energy below that threshold: its bias
    // is at most ~ (d + 4 sqrt d)/K N0/2 per subcarrier, comparable to the estimation
    // error it saves.
    // c_i = u_i^H h for every window (VOLK: sum h_k conj(u_k,i)); energy ||P h||^2.
    double e[2] = {0.0, 0.0};
    for (size_t w = 0; w < d_basis.size(); ++w) {
        const auto& sm = d_basis[w];
        auto& c = d_coefs[w];
        c.resize(sm.lambda.size());
        for (size_t i = 0; i < sm.lambda.size(); ++i) {
            volk_32fc_x2_conjugate_dot_prod_32fc(&c[i], h, sm.U.data() + i * K,
                                                 static_cast<unsigned>(K));
            e[w] += std::norm(c[i]);
        }
    }
    size_t pick = d_basis.size() - 1;
    if (d_basis.size() == 2) {
        const double d = static_cast<double>(d_basis[1].lambda.size()) -
                         static_cast<double>(d_basis[0].lambda.size());
        if (e[1] - e[0] < ls_var * (d + 4.0 * std::sqrt(std::max(d, 0.0)))) pick = 0;
    }
    const auto& sm = d_basis[pick];
    auto& c = d_coefs[pick];
    const double eps = std::min(kMaxEps, ls_var / std::max(signal_power, 1e-30));
    const size_t r = sm.lambda.size();
    // Wiener weights w_i = lambda_i / (lambda_i + eps); H^ = sum_i w_i c_i u_i;
    // m_k = (N0/2) sum_i w_i |u_k,i|^2.
    d_wv.resize(r);
    for (size_t i = 0; i < r; ++i) {
        d_wv[i] = static_cast<float>(sm.lambda[i] / (sm.lambda[i] + eps));
        c[i] *= d_wv[i];
    }
    const float half_n0 = static_cast<float>(ls_var);
    for (size_t k = 0; k < K; ++k) {
        volk_32fc_x2_dot_prod_32fc(&h[k], sm.Ut.data() + k * r, c.data(), static_cast<unsigned>(r));
        float m = 0.0f;
        volk_32f_x2_dot_prod_32f(&m, sm.U2t.data() + k * r, d_wv.data(), static_cast<unsigned>(r));
        mse[k] = half_n0 * m;
    }
    return d_basis.size() == 2 ? static_cast<int>(pick) : 1;
}

}  // namespace oppsched
}  // namespace gr
