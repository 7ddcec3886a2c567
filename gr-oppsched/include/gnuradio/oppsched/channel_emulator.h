#pragma once
// Multi-user sample-level channel emulator: one TX stream in, one stream per user out.
// Pure class: no gr::block, no I/O (the CSV helper below is a separate free function).
//
// Per user u and output sample n (stream index n, time t = n / sample_rate):
//   y_u[n] = e^{j 2 pi f_cfo n / fs} * sum_l h_u,l[n] x[n - d_l]  +  w_u[n]
// - taps l: delay d_l samples and relative power p_l (normalised so sum p_l = 1), each
//   independently faded; an empty tap list is one tap of delay 0 (flat fading).
// - fading h_u,l(t) = sqrt(p_l) a_u(t) g_u,l(t), with E|g|^2 = 1:
//     jakes:            Andrew & Hanly, CLAMP, §V-B: G oscillators (20), Doppler f_d
//                       (0.6 or 60 Hz in the paper), evaluated by the host library's
//                       oppsched::channel::jakes_channel (host/common/include/oppsched/fading.h),
//                       the model the MAC's slot-level abstraction uses, with per-user
//                       random oscillator phases. Deviation from the print, on purpose:
//                       the angle offset defaults to -0.5 (Dent et al. 1993) instead of the
//                       printed +0.5, whose last two Doppler lines coincide in |w|; their
//                       cross term never averages out, so one user's long-run mean power
//                       would depend on its seed by up to +-0.46 dB (1 +- (2/G) cos(pi/G))
//                       and its time autocorrelation would miss J0. jakes_angle_offset =
//                       +0.5 reproduces the print (and the MAC abstraction) exactly.
//                       Users share the G Doppler frequencies, so over one long run two
//                       users' complex gains keep a correlation (1/G) sum cos(dtheta_n)
//                       (std 1/sqrt(2G) = 0.16 over user pairs); their SNRs (|h|^2)
//                       correlate far less (~ its square). sum_of_sinusoids has none;
//     sum_of_sinusoids: Srinivasan & Baras, §III-A, eq. 4: K random-phase,
//                       random-frequency sinusoids with complex Gaussian amplitudes
//                       (oppsched::channel::sum_of_sinusoids_channel). Exactly Rayleigh at
//                       every t over the ensemble, but one realisation's long-run mean
//                       power is sum_j |h_j|^2 / K (std 1/sqrt(K), ~1 dB for K = 20): the
//                       mean SNR is met over users/seeds, not per user;
//     none:             g = 1.
//   g is evaluated on a grid every update_interval samples (default: one OFDM symbol,
//   80 samples = 12.5 kHz at 1 Msps, 200x the fastest Doppler of the papers) and linearly
//   interpolated per sample; no trigonometry per sample.
// - a_u(t): 1, or, when an SNR trace is given, sqrt(10^((trace_dB(t) - mean_snr_db)/10)):
//   the instantaneous SNR per occupied subcarrier follows the recorded trace (linear
//   interpolation in dB between trace points, looped or held at the end). Combine with
//   fading = none to replay a trace as recorded.
// - w_u: complex AWGN, variance sigma_u^2 = tx_power (fft_len/occupied) / 10^(mean_snr_db/10)
//   per sample: with the modulator's unit sample power (tx_power = 1) the mean Es/N0 per
//   occupied subcarrier is exactly mean_snr_db (numerology.h, SNR convention), the same
//   quantity the SNR estimator and the CQI report.
// - CFO: exact phase e^{j 2 pi f n / fs}, anchored in double every 64 samples.
//
// Determinism: everything depends on (seed, user, tap) and the absolute sample index only:
// the output is bit-identical however the input is split into process() calls. Seeds:
// sub-seeds from splitmix64 of (seed, user, tap, role).
// Costs per user and sample: taps * (1 complex interpolation step + 1 complex multiply)
// + VOLK adds (tap accumulation, noise) + 2 Ziggurat normals; the fading model runs once
// per grid point. (The complex multiply is a plain vectorised loop, not VOLK's: VOLK's
// AVX2+FMA kernel rounds unlike its scalar tail, which would break the chunking
// invariance above.)
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/gaussian_noise.h>
#include <gnuradio/oppsched/numerology.h>

#include <complex>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gr {
namespace oppsched {

//! One point of a recorded per-user SNR trace.
struct snr_trace_point {
    double time_s = 0.0;  //!< seconds from the start of the replay
    double snr_db = 0.0;  //!< instantaneous Es/N0 per occupied subcarrier (dB)
};

/*!
 * \brief Parse a CSV trace "time,snr_db" (one point a line; an optional header line and
 * '#' comment lines are skipped). Times must be finite and strictly increasing.
 * \throws std::invalid_argument "snr_trace line 3: ..." on malformed input.
 */
OPPSCHED_API std::vector<snr_trace_point> parse_snr_trace_csv(const std::string& text);
//! Read and parse a CSV trace file. \throws std::invalid_argument if unreadable/malformed
OPPSCHED_API std::vector<snr_trace_point> load_snr_trace_csv(const std::string& path);

enum class fading_model { none, jakes, sum_of_sinusoids };

struct emulator_tap {
    int delay_samples = 0;  //!< >= 0, samples
    double power_db = 0.0;  //!< relative power (dB); taps are normalised to sum 1
};

struct emulator_user_params {
    double mean_snr_db = 20.0;  //!< mean Es/N0 per occupied subcarrier (dB)
    fading_model fading = fading_model::jakes;
    double doppler_hz = 60.0;  //!< maximum Doppler f_d (Hz), >= 0
    int oscillators = 20;      //!< G (jakes) or K (sum_of_sinusoids)
    //! jakes only: w_n = 2 pi f_d cos(pi/(2G) (n + offset)), n = 1..G. -0.5 (default) is
    //! Dent, Bottomley & Croft's form; +0.5 is Andrew & Hanly, CLAMP as printed (and the host
    //! library's default), which repeats one Doppler line (|w_G| = |w_(G-1)|) -- see below.
    double jakes_angle_offset = -0.5;
    std::vector<emulator_tap> taps;          //!< empty: flat (one tap, delay 0)
    double cfo_hz = 0.0;                     //!< carrier frequency offset (Hz), |cfo| < fs/2
    std::vector<snr_trace_point> snr_trace;  //!< empty: no trace
    bool loop_trace = true;  //!< past the last point: loop (true) or hold the last value
    bool add_noise = true;   //!< false: noiseless (tests, link-curve references)
};

struct channel_emulator_params {
    //! sample rate, fft_len, occupied carriers (SNR convention), symbol_len
    numerology_params numerology;
    std::vector<emulator_user_params> users;
    std::uint64_t seed = 1;
    //! samples between fading-coefficient updates; 0 = symbol_len (one per OFDM symbol)
    int update_interval = 0;
    //! mean per-sample power of the TX stream's OFDM symbols that corresponds to unit
    //! energy per occupied subcarrier (1 for ofdm_modulator's output)
    double tx_power = 1.0;
    //! throws std::invalid_argument naming the field ("channel_emulator.users[1].cfo_hz: ...")
    void validate() const;
};

class OPPSCHED_API channel_emulator final {
  public:
    explicit channel_emulator(const channel_emulator_params& p);
    ~channel_emulator();
    channel_emulator(channel_emulator&&) noexcept;
    channel_emulator& operator=(channel_emulator&&) noexcept;

    int num_users() const { return static_cast<int>(d_users.size()); }

    /*!
     * \brief Pass \p n TX samples through every user's channel.
     * \param in  n TX samples (the stream continues from the previous call)
     * \param out num_users() pointers to n output samples each
     */
    void process(const gr_complex* in, gr_complex* const* out, size_t n);
    //! Convenience: returns num_users() vectors of in.size() samples.
    std::vector<std::vector<gr_complex>> process(const std::vector<gr_complex>& in);

    //! samples processed so far (the stream index of the next input sample)
    std::uint64_t samples_processed() const { return d_n; }
    //! per-sample noise variance sigma^2 of user u
    double noise_variance(int u) const;
    //! complex gain h_u,l of tap l at stream sample n (as applied: interpolated,
    //! including the tap amplitude and the trace factor, excluding the CFO)
    std::complex<double> tap_gain(int u, int l, std::uint64_t n);
    //! sum_l |h_u,l[n]|^2: the instantaneous SNR is mean_snr * this
    double power_gain(int u, std::uint64_t n);
    //! instantaneous Es/N0 per occupied subcarrier k (occupied order) at sample n:
    //! |sum_l h_u,l e^{-j 2 pi k d_l / N}|^2 / N0 -- ground truth for link curves
    std::vector<float> subcarrier_snr(int u, std::uint64_t n);
    const channel_emulator_params& params() const { return d_p; }

  private:
    struct tap_state;
    struct user_state;
    std::complex<double> grid_value(user_state& us, size_t l, std::uint64_t k);
    double trace_factor(const user_state& us, double t) const;

    channel_emulator_params d_p;
    numerology d_num;
    int d_update;
    int d_max_delay = 0;
    std::uint64_t d_n = 0;
    std::vector<std::unique_ptr<user_state>> d_users;
    std::vector<gr_complex> d_hist;  // last d_max_delay input samples
    std::vector<gr_complex> d_xe, d_h, d_acc, d_tmp, d_rot;
    std::vector<float> d_noise;
};

}  // namespace oppsched
}  // namespace gr
