#pragma once
// The OFDM numerology of one oppsched PHY configuration, shared by TX and RX so that both
// derive every length from the same place. Pure class: no gr::block, no I/O.
#include <gnuradio/oppsched/api.h>

#include <string>
#include <vector>

namespace gr {
namespace oppsched {

struct numerology_params {
    double sample_rate = 1e6;         //!< complex samples per second (Hz)
    double slot_duration = 1.667e-3;  //!< seconds per slot (EV-DO 1.667 ms, CLAMP paper 3 ms)
    int fft_len = 64;                 //!< FFT size
    int cp_len = 16;                  //!< cyclic prefix, samples
    int data_carriers = 48;           //!< data subcarriers per OFDM symbol
    int pilot_carriers = 4;           //!< pilot subcarriers per OFDM symbol
    int preamble_symbols = 2;         //!< OFDM-symbol durations taken by the preamble
    int header_symbols = 2;           //!< OFDM symbols carrying the control header
};

/*!
 * \brief Slot geometry derived from numerology_params.
 *
 * A slot is slot_samples() = round(slot_duration * sample_rate) samples: the preamble,
 * the header symbols, payload_symbols() payload symbols and guard_samples() of silence at
 * the end (absorbs timing offsets and burst ramp-down).
 */
class OPPSCHED_API numerology final
{
public:
    /*! \throws std::invalid_argument naming the field and value when inconsistent. */
    explicit numerology(const numerology_params& p);

    /*!
     * \brief The named profiles of the seeds: "evdo" (1.667 ms slots, seed 002) and
     * "clamp" (3 ms slots, seed 000), at the given sample rate (Hz).
     */
    static numerology profile(const std::string& name, double sample_rate = 1e6);
    static std::vector<std::string> profile_names();

    const numerology_params& params() const { return d_p; }
    int symbol_len() const { return d_p.fft_len + d_p.cp_len; }  //!< samples
    int slot_samples() const { return d_slot_samples; }
    int symbols_per_slot() const { return d_slot_samples / symbol_len(); }
    int guard_samples() const { return d_slot_samples - symbols_per_slot() * symbol_len(); }
    int payload_symbols() const
    {
        return symbols_per_slot() - d_p.preamble_symbols - d_p.header_symbols;
    }
    //! data subcarrier-symbols available to the payload in one slot
    int payload_resource_elements() const { return payload_symbols() * d_p.data_carriers; }
    double subcarrier_spacing() const { return d_p.sample_rate / d_p.fft_len; }  //!< Hz
    //! the slot duration actually realised at this sample rate (s)
    double realised_slot_duration() const { return d_slot_samples / d_p.sample_rate; }

private:
    numerology_params d_p;
    int d_slot_samples;
};

} // namespace oppsched
} // namespace gr
