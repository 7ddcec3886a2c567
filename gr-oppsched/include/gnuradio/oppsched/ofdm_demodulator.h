#pragma once
// OFDM demodulator of one oppsched slot. Pure class: no gr::block, no I/O.
//
// Input: the slot_samples() samples of one slot as slot_sync delivers them (CFO already
// removed, the sample at index 0 being the slot start, a few samples early at most: the
// sync's timing backoff puts every FFT window slightly inside the CP, which the channel
// estimate absorbs as a linear phase).
//
// Steps (costs per slot: 2 + data_symbols() FFTs of fft_len, O(occupied) per symbol):
//  1. FFT of the two long-training symbols; z_i,k = Y_i,k conj(L_k) (L = +-1).
//  2. Channel estimate H^_k = (z_1,k + z_2,k)/2 (the two symbols averaged; no frequency
//     smoothing, so any channel within the CP is estimated without bias; error variance
//     N0/2). SNR, N0, effective SNR and CQI from snr_estimator (snr_estimator.h).
//  3. Per data-bearing symbol: FFT, common phase error from the pilots,
//     phi_s = angle(sum_p conj(H^_p P_p,s) Y_p,s) (ML for a common rotation, weighted by
//     the channel), which removes the residual CFO and phase noise accumulated since the
//     LTF.
//  4. Zero-forcing equalisation x^_k = Y_k e^{-j phi_s} / H^_k. In SISO OFDM the unbiased
//     per-subcarrier MMSE equaliser is exactly ZF (the MMSE gain |H|^2/(|H|^2+N0) is only
//     a bias that the soft demapper would have to undo), so ZF is what the demapper wants.
//  5. Post-equalisation noise variance per RE:
//        nvar_k = 1.5 N0 / |H^_k|^2 + 1.5 N0 / (2 sum_p |H^_p|^2),
//     i.e. the interface's N0/|H_k|^2 with the channel-estimation error (variance N0/2,
//     two LTF symbols averaged: factor 1 + 1/2) and the phase error of the 4-pilot CPE
//     estimate (second term; 0 without tracking) included, as both add to the error of
//     every equalised RE (exactly, for unit-energy REs on average).
//
// Output REs are in the interface order (phy_common.md): symbol by symbol, data
// subcarriers in increasing k; header REs (header_resource_elements()) and payload REs
// (payload_resource_elements()) separately.
#include <gnuradio/fft/fft.h>
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/preamble.h>
#include <gnuradio/oppsched/snr_estimator.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace gr {
namespace oppsched {

struct ofdm_demodulator_params {
    bool track_phase = true;   //!< pilot-based common phase correction per symbol
    snr_estimator_params snr;  //!< noise averaging, CQI table, effective-SNR method
    void validate() const { snr.validate(); }
};

struct ofdm_demod_result {
    //! false: the slot is too short or holds no usable signal (zeros, non-finite);
    //! the REs are then 0 with noise variance ofdm_demodulator::max_noise_var
    bool valid = false;
    std::vector<gr_complex> header;   //!< equalised header REs
    std::vector<float> header_nvar;   //!< their noise variances
    std::vector<gr_complex> payload;  //!< equalised payload REs (empty if not asked)
    std::vector<float> payload_nvar;
    snr_estimate snr;                 //!< SNR, N0, effective SNR, CQI of the slot
    std::vector<gr_complex> channel;  //!< H^_k per occupied subcarrier (occupied order)
    std::vector<float> phase;         //!< common phase correction per data symbol (rad)
};

class OPPSCHED_API ofdm_demodulator final {
  public:
    //! noise variance reported for REs that carry no information (|H^| ~ 0, invalid slot)
    static constexpr float max_noise_var = 1e9f;

    explicit ofdm_demodulator(const numerology& n, const ofdm_demodulator_params& p = {});
    ~ofdm_demodulator();
    ofdm_demodulator(ofdm_demodulator&&) noexcept;
    ofdm_demodulator& operator=(ofdm_demodulator&&) noexcept;

    /*!
     * \brief Demodulate one slot.
     * \param slot    samples from the slot start (CFO-corrected)
     * \param n       number of samples available; fewer than slot_samples() -> invalid
     * \param out     result; its vectors are resized (reuse it to avoid allocations)
     * \param payload false: header, channel and SNR only (a client that is not addressed)
     */
    void demodulate(const gr_complex* slot, size_t n, ofdm_demod_result& out, bool payload = true);
    ofdm_demod_result demodulate(const std::vector<gr_complex>& slot, bool payload = true);

    //! the SNR estimator (its noise average persists across slots; reset() it between
    //! SNR points of a sweep)
    snr_estimator& estimator() { return d_est; }
    const numerology& geometry() const { return d_seq.geometry(); }
    const ofdm_sequences& sequences() const { return d_seq; }

  private:
    void fft_at(const gr_complex* time, gr_complex* occ_out);  // occupied values, rx-scaled
    void equalise_symbol(int s, const gr_complex* slot, double n0, gr_complex* re, float* nvar,
                         float* phase);

    ofdm_demodulator_params d_p;
    ofdm_sequences d_seq;
    snr_estimator d_est;
    std::unique_ptr<gr::fft::fft_complex_fwd> d_fft;
    std::vector<int> d_occ_bins;
    std::vector<size_t> d_data_pos, d_pilot_pos;  // positions in occupied order
    std::vector<gr_complex> d_z1, d_z2, d_y, d_h;
    std::vector<float> d_inv_h2;      // 1/|H^_k|^2 (0 where unusable)
    std::vector<gr_complex> d_inv_h;  // 1/H^_k
    float d_pilot_energy = 0.0f;      // sum_p |H^_p|^2
};

}  // namespace oppsched
}  // namespace gr
