#include <gnuradio/oppsched/numerology.h>

#include <cmath>
#include <sstream>
#include <stdexcept>

namespace gr {
namespace oppsched {

namespace {
template <class T>
[[noreturn]] void bad(const char* field, T value, const char* why)
{
    std::ostringstream s;
    s << "numerology." << field << ": " << value << " " << why;
    throw std::invalid_argument(s.str());
}
} // namespace

numerology::numerology(const numerology_params& p) : d_p(p), d_slot_samples(0)
{
    if (!(p.sample_rate > 0) || !std::isfinite(p.sample_rate))
        bad("sample_rate", p.sample_rate, "must be a positive number of samples/s");
    if (!(p.slot_duration > 0) || !std::isfinite(p.slot_duration))
        bad("slot_duration", p.slot_duration, "must be a positive number of seconds");
    if (p.fft_len < 16 || (p.fft_len & (p.fft_len - 1)) != 0)
        bad("fft_len", p.fft_len, "must be a power of two >= 16");
    if (p.cp_len < 0 || p.cp_len >= p.fft_len)
        bad("cp_len", p.cp_len, "must be in [0, fft_len)");
    if (p.data_carriers < 1) bad("data_carriers", p.data_carriers, "must be >= 1");
    if (p.pilot_carriers < 0) bad("pilot_carriers", p.pilot_carriers, "must be >= 0");
    // DC stays empty and at least one guard carrier on each edge.
    if (p.data_carriers + p.pilot_carriers > p.fft_len - 3)
        bad("data_carriers", p.data_carriers, "+ pilot_carriers leave no DC and guard carriers");
    if (p.preamble_symbols < 1) bad("preamble_symbols", p.preamble_symbols, "must be >= 1");
    if (p.header_symbols < 1) bad("header_symbols", p.header_symbols, "must be >= 1");
    const double n = std::round(p.slot_duration * p.sample_rate);
    if (n > 1e9) bad("slot_duration", p.slot_duration, "gives more than 1e9 samples per slot");
    d_slot_samples = static_cast<int>(n);
    if (payload_symbols() < 1)
        bad("slot_duration", p.slot_duration, "leaves no payload symbol at this sample rate");
}

numerology numerology::profile(const std::string& name, double sample_rate)
{
    numerology_params p;
    p.sample_rate = sample_rate;
    if (name == "evdo") {
        p.slot_duration = 1.667e-3; // seed 002: EV-DO downlink slot
    } else if (name == "clamp") {
        p.slot_duration = 3e-3; // seed 000: 3 ms slots
    } else {
        throw std::invalid_argument("numerology.profile: '" + name +
                                    "' is not one of evdo, clamp");
    }
    return numerology(p);
}

std::vector<std::string> numerology::profile_names() { return { "evdo", "clamp" }; }

} // namespace oppsched
} // namespace gr
