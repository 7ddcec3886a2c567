#include <gnuradio/logger.h>
#include <gnuradio/oppsched/numerology.h>

#include <cmath>
#include <stdexcept>

#include "oppsched/validation.h"

namespace gr {
namespace oppsched {

numerology::numerology(const numerology_params& p) : d_p(p), d_slot_samples(0) {
    if (!(p.sample_rate > 0) || !std::isfinite(p.sample_rate))
        ::oppsched::throw_invalid("numerology.sample_rate", p.sample_rate,
                                  "must be a positive number of samples/s");
    if (!(p.slot_duration > 0) || !std::isfinite(p.slot_duration))
        ::oppsched::throw_invalid("numerology.slot_duration", p.slot_duration,
                                  "must be a positive number of seconds");
    if (p.fft_len < 16 || (p.fft_len & (p.fft_len - 1)) != 0)
        ::oppsched::throw_invalid("numerology.fft_len", p.fft_len, "must be a power of two >= 16");
    if (p.cp_len < 0 || p.cp_len >= p.fft_len)
        ::oppsched::throw_invalid("numerology.cp_len", p.cp_len, "must be in [0, fft_len)");
    if (p.data_carriers < 1)
        ::oppsched::throw_invalid("numerology.data_carriers", p.data_carriers, "must be >= 1");
    if (p.pilot_carriers < 0)
        ::oppsched::throw_invalid("numerology.pilot_carriers", p.pilot_carriers, "must be >= 0");
    // DC stays empty and at least one guard carrier on each edge.
    if (p.data_carriers + p.pilot_carriers > p.fft_len - 3)
        ::oppsched::throw_invalid("numerology.data_carriers", p.data_carriers,
                                  "+ pilot_carriers leave no DC and guard carriers");
    // One STF symbol + long-training guard interval (>= cp_len) + two long symbols.
    if (p.preamble_symbols * (p.fft_len + p.cp_len) < 2 * (p.fft_len + p.cp_len) + p.fft_len)
        ::oppsched::throw_invalid(
            "numerology.preamble_symbols", p.preamble_symbols,
            "too short for STF + LTF guard (>= cp_len) + 2 long symbols (need >= 3)");
    if (p.header_symbols < 1)
        ::oppsched::throw_invalid("numerology.header_symbols", p.header_symbols, "must be >= 1");
    if (p.fec != fec_scheme::ldpc && p.fec != fec_scheme::conv)
        ::oppsched::throw_invalid("numerology.fec", static_cast<int>(p.fec),
                                  "is not one of ldpc (0), conv (1)");
    if (p.ldpc_max_n != 648 && p.ldpc_max_n != 1296 && p.ldpc_max_n != 1944)
        ::oppsched::throw_invalid("numerology.ldpc_max_n", p.ldpc_max_n,
                                  "is not one of 648, 1296, 1944 (802.11n codeword lengths)");
    const double n = std::round(p.slot_duration * p.sample_rate);
    if (n > 1e9)
        ::oppsched::throw_invalid("numerology.slot_duration", p.slot_duration,
                                  "gives more than 1e9 samples per slot");
    d_slot_samples = static_cast<int>(n);
    if (payload_symbols() < 1)
        ::oppsched::throw_invalid("numerology.slot_duration", p.slot_duration,
                                  "leaves no payload symbol at this sample rate");
    build_subcarriers();
}

void numerology::build_subcarriers() {
    const int n_occ = occupied_carriers();
    d_occupied.clear();
    // Floor(n/2) carriers below DC, the rest above: -n/2..-1, 1..ceil(n/2).
    const int below = n_occ / 2;
    for (int k = -below; k < 0; ++k) d_occupied.push_back(k);
    for (int k = 1; k <= n_occ - below; ++k) d_occupied.push_back(k);

    d_pilots.clear();
    const int n_pil = d_p.pilot_carriers;
    if (d_p.fft_len == 64 && d_p.data_carriers == 48 && n_pil == 4) {
        d_pilots = {-21, -7, 7, 21};  // 802.11a (IEEE 802.11-2016 §17.3.5.10)
    } else {
        // Spread evenly: pilot i at position floor((i + 1/2) n_occ / n_pil) of the list.
        for (int i = 0; i < n_pil; ++i)
            d_pilots.push_back(
                d_occupied[static_cast<size_t>(((2 * i + 1) * n_occ) / (2 * n_pil))]);
    }
    d_data.clear();
    for (int k : d_occupied) {
        bool pilot = false;
        for (int q : d_pilots) pilot = pilot || (q == k);
        if (!pilot) d_data.push_back(k);
    }
    // Invariants the modulator and the demodulator rely on.
    if (static_cast<int>(d_data.size()) != d_p.data_carriers ||
        static_cast<int>(d_pilots.size()) != n_pil)
        ::oppsched::throw_invalid("numerology.pilot_carriers", n_pil,
                                  "could not be placed among the occupied carriers");
}

double numerology::noise_variance_for_snr_db(double snr_db, double signal_power) const {
    // Es/N0 per occupied subcarrier = (fft_len/occupied) * P_sample / sigma^2.
    return signal_power * subcarrier_snr_gain() / std::pow(10.0, snr_db / 10.0);
}

const char* to_string(fec_scheme f) { return f == fec_scheme::conv ? "conv" : "ldpc"; }

fec_scheme fec_from_string(const std::string& name) {
    if (name == "ldpc") return fec_scheme::ldpc;
    if (name == "conv") return fec_scheme::conv;
    throw std::invalid_argument("numerology.fec: '" + name + "' is not one of ldpc, conv");
}

std::vector<std::string> fec_names() {
    return {to_string(fec_scheme::ldpc), to_string(fec_scheme::conv)};
}

numerology numerology::profile(const std::string& name, double sample_rate,
                               const std::string& fec) {
    numerology_params p;
    p.sample_rate = sample_rate;
    p.fec = fec_from_string(fec);
    if (name == "clamp") {  // the old name of "3ms" ("clamp" names the algorithm only)
        gr::logger("numerology").warn("profile: 'clamp' is deprecated, use '3ms'");
        return profile("3ms", sample_rate, fec);
    }
    if (name == "evdo") {
        p.slot_duration = 1.667e-3;  // Srinivasan & Baras: EV-DO downlink slot
    } else if (name == "3ms") {
        p.slot_duration = 3e-3;  // Andrew & Hanly, CLAMP: 3 ms slots
    } else {
        throw std::invalid_argument("numerology.profile: '" + name + "' is not one of evdo, 3ms");
    }
    return numerology(p);
}

std::vector<std::string> numerology::profile_names() { return {"evdo", "3ms"}; }

}  // namespace oppsched
}  // namespace gr
