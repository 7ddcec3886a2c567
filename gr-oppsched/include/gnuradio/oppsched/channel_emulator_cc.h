#pragma once
// The multi-user channel emulator as a block: one TX stream in, one stream per user out.
#include <gnuradio/oppsched/api.h>
#include <gnuradio/oppsched/channel_emulator.h>
#include <gnuradio/sync_block.h>

#include <cstdint>

namespace gr {
namespace oppsched {

/*!
 * \brief Per-user fading channels (channel_emulator.h): output u = user u's view of the
 * input (fading, multipath taps, CFO, SNR trace, AWGN at the user's mean SNR).
 * \ingroup oppsched
 *
 * A thin wrapper: work() hands each chunk to channel_emulator::process(). Its output is
 * bit-identical however the scheduler chunks the stream, so a run is reproducible from the
 * seed alone. Stream tags are copied from the input to every output (slot and tx_time tags
 * of slot_tx stay visible downstream).
 *
 * In Python, `gnuradio.oppsched.emulator_params(...)` builds the parameters from per-user
 * lists or from a configuration file (YAML/JSON, the `users:` section of phy.yaml);
 * the GRC block uses it.
 */
class OPPSCHED_API channel_emulator_cc : virtual public gr::sync_block {
  public:
    typedef std::shared_ptr<channel_emulator_cc> sptr;

    /*!
     * \param params numerology (sample rate (Hz), FFT size, occupied carriers: the SNR
     *               convention), users (mean_snr_db (dB), fading model, doppler_hz (Hz),
     *               oscillators, taps (delay samples, power dB), cfo_hz (Hz), snr_trace),
     *               seed, update_interval (samples)
     * \throws std::invalid_argument naming the field ("channel_emulator.users[1].cfo_hz: ...")
     */
    static sptr make(const channel_emulator_params& params);

    virtual int num_users() const = 0;
    //! samples processed so far
    virtual std::uint64_t samples() const = 0;
    //! per-sample noise variance of user u
    virtual double noise_variance(int u) const = 0;
    //! the emulator's parameters
    virtual channel_emulator_params params() const = 0;
};

}  // namespace oppsched
}  // namespace gr
