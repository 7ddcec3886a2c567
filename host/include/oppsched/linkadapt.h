#pragma once
// Link adaptation: CQI -> MCS tables as data, and outer-loop link adaptation (OLLA).
//
// CQI here is the reported (effective) SNR in dB; if the PHY reports a CQI index, map it to
// its SNR first. An MCS table lists, per MCS, the lowest SNR at which the MCS meets the target
// BLER and the information rate it carries. cqi_to_mcs() picks the highest MCS whose
// threshold the (offset-corrected) SNR meets, or kNoMcs below the lowest threshold (the user
// requests zero rate, Srinivasan & Baras, §III: "If the channel quality ... is below the minimum
// required to support transmission, it requests zero rate").
//
// Tables shipped:
//  - evdo(): Srinivasan & Baras, Table I, SNR -12.5..9.5 dB -> 38.4..2457.6 kb/s, exactly as
//  printed
//    (1.667 ms slots: 8..512 bytes per slot, i.e. 1..64 link segments of 8 bytes).
//  - ofdm_provisional(): the project's 802.11a-like PHY (64-FFT, CP 16, 48 data subcarriers),
//    BPSK 1/2 .. 64QAM 5/6. The SNR thresholds are a PROVISIONAL GUESS, to be replaced by the
//    measured link curves (from_csv): IEEE 802.11a-1999 §17.3.10.1 / Table 91 minimum
//    sensitivities for 10% PER on 1000-byte PSDUs (-82, -79, -77, -74, -70, -66, -65 dBm for
//    6, 12, 18, 24, 36, 48, 54 Mb/s; 802.11n gives -64 dBm for 20 MHz MCS 7, 64QAM 5/6)
//    against the 20 MHz thermal floor (-101 dBm) plus the 10 dB noise figure these figures
//    are usually derived with, less the usual 5 dB implementation margin:
//    SNR = sensitivity + 91 - 5 dB -> 4, 7, 9, 12, 16, 20, 21, 22 dB. Only a starting point:
//    our PHY's own losses (channel estimation, CFO) are unknown until measured.
//
// The CLAMP rate rule (Andrew & Hanly, CLAMP, eq. 18) lives in the channel module, not here.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::linkadapt {

constexpr int kNoMcs = -1;

struct mcs_entry {
    std::string name;                   // e.g. "QPSK 3/4", "EV-DO 1228.8 kb/s"
    double min_snr_db = 0.0;            // lowest SNR meeting the target BLER
    double rate_bps = 0.0;              // information rate when it has the whole slot
    std::uint32_t bits_per_symbol = 0;  // modulation bits per subcarrier; 0 if not OFDM
    double code_rate = 0.0;             // 0 if not OFDM
};

// OFDM numerology the provisional table's rates are computed for.
struct ofdm_numerology {
    double sample_rate_hz = 1e6;  // the loopback PHY's default; 20e6 gives 802.11a rates
    std::uint32_t fft_size = 64;
    std::uint32_t cp_len = 16;
    std::uint32_t data_subcarriers = 48;
    double symbol_rate() const { return sample_rate_hz / (fft_size + cp_len); }
};

class mcs_table final {
  public:
    // Validates: at least one entry, thresholds and rates finite and strictly increasing,
    // rates > 0, names non-empty and free of commas/newlines. Throws std::invalid_argument
    // naming the field, e.g. "linkadapt.table[3].min_snr_db: 1 not > previous 1.3".
    mcs_table(std::string name, std::vector<mcs_entry> entries);

    static mcs_table evdo();
    static mcs_table ofdm_provisional(const ofdm_numerology& num = {});
    // CSV text (the caller reads the file): a header naming the columns, then one row per
    // MCS in increasing order. Required columns: name,min_snr_db,rate_bps; optional:
    // bits_per_symbol,code_rate. '#' starts a comment line; blank lines are skipped.
    static expected<mcs_table> from_csv(std::string_view text, std::string name = "csv");
    std::string to_csv() const;  // round-trips through from_csv exactly

    // Highest MCS whose threshold snr_db meets, or kNoMcs. O(log M).
    int select(double snr_db) const;
    // Rate of select(snr_db), 0 for kNoMcs.
    double rate_at(double snr_db) const;
    // Whole bytes an MCS carries in a slot of slot_s seconds: floor(rate * slot / 8).
    std::uint32_t bytes_per_slot(int mcs, double slot_s) const;

    const std::string& name() const { return name_; }
    std::size_t size() const { return entries_.size(); }
    const mcs_entry& operator[](std::size_t i) const { return entries_.at(i); }
    const std::vector<mcs_entry>& entries() const { return entries_; }

  private:
    std::string name_;
    std::vector<mcs_entry> entries_;
};

// CQI -> MCS: the highest MCS whose threshold cqi_db + offset_db meets (offset from OLLA).
int cqi_to_mcs(const mcs_table& table, double cqi_db, double offset_db = 0.0);

// Outer-loop link adaptation: an offset (dB) added to the reported SNR before the table
// lookup, raised by delta_up on every ACK and lowered by delta_down on every NACK, clamped to
// [min_offset, max_offset]. Sampath, Kumar & Holtzman (VTC 1997) for the CDMA SIR target;
// Nakamura, Awad & Vadgama (WPMC 2002) and K. I. Pedersen, F. Frederiksen, T. E. Kolding,
// T. F. Lootsma, P. E. Mogensen, "Performance of High-Speed Downlink Packet Access in
// Coexistence With Dedicated Channels", IEEE Trans. Veh. Technol. 56(3), 2007, for HSDPA.
//
// Convergence: with delta_up / delta_down = BLER_t / (1 - BLER_t), after n transmissions
// with e errors the offset has moved by (n - e) delta_up - e delta_down, which stays bounded
// as long as the clamp is not hit; hence e/n -> delta_up / (delta_up + delta_down) = BLER_t,
// whatever the channel and the CQI bias: |e/n - BLER_t| <= |offset change| / (n (delta_up +
// delta_down)). The constructor asserts this ratio (deriving delta_up if not given) and
// 0 < BLER_t < 0.5 (above 1/2 the up step would exceed the down step).
// This is the CLAMP paper's adaptive backoff margin m (Andrew & Hanly, CLAMP, §V-B) in dB form.
struct olla_params {
    double target_bler = 0.1;    // BLER_t, in (0, 0.5)
    double delta_down_db = 0.5;  // step on NACK, > 0
    double delta_up_db = 0.0;    // step on ACK; 0 = derive from the ratio above
    double min_offset_db = -10.0;
    double max_offset_db = 10.0;
    double initial_offset_db = 0.0;  // in [min, max]
};

// Where the MCS used for the acknowledged TB sits in its table: at the top an ACK cannot
// justify a higher MCS, at the bottom a NACK cannot be answered by a lower one, so the
// offset is frozen in that direction (as srsRAN does) instead of winding up to the clamp.
enum class mcs_position : std::uint8_t { interior, lowest, highest, only };

class olla final {
  public:
    explicit olla(const olla_params& cfg);  // throws std::invalid_argument naming the field

    void update(bool ack, mcs_position pos = mcs_position::interior);
    double offset_db() const { return offset_; }
    double adjusted_db(double cqi_db) const { return cqi_db + offset_; }
    int select(const mcs_table& t, double cqi_db) const { return cqi_to_mcs(t, cqi_db, offset_); }
    static mcs_position position_of(const mcs_table& t, int mcs);

    double delta_up_db() const { return up_; }
    double delta_down_db() const { return down_; }
    double target_bler() const { return cfg_.target_bler; }
    const olla_params& config() const { return cfg_; }
    std::uint64_t acks() const { return acks_; }
    std::uint64_t nacks() const { return nacks_; }
    std::uint64_t clamped() const { return clamped_; }  // updates cut by the clamp

  private:
    olla_params cfg_;
    double up_;
    double down_;
    double offset_;
    std::uint64_t acks_ = 0;
    std::uint64_t nacks_ = 0;
    std::uint64_t clamped_ = 0;
};

}  // namespace oppsched::linkadapt
