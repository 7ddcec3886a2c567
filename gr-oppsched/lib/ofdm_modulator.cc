// OFDM modulator; see ofdm_modulator.h.
#include <gnuradio/fft/fft.h>
#include <gnuradio/oppsched/ofdm_modulator.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace gr {
namespace oppsched {

ofdm_modulator::ofdm_modulator(const numerology& n)
    : d_seq(n), d_ifft(std::make_unique<gr::fft::fft_complex_rev>(n.params().fft_len)) {
    for (int k : n.data_subcarriers()) d_data_bins.push_back(n.fft_bin(k));
    for (int k : n.pilot_subcarriers()) d_pilot_bins.push_back(n.fft_bin(k));
}

ofdm_modulator::~ofdm_modulator() = default;
ofdm_modulator::ofdm_modulator(ofdm_modulator&&) noexcept = default;
ofdm_modulator& ofdm_modulator::operator=(ofdm_modulator&&) noexcept = default;

void ofdm_modulator::modulate(const gr_complex* header, size_t n_header, const gr_complex* payload,
                              size_t n_payload, gr_complex* out) {
    const numerology& num = d_seq.geometry();
    const size_t hdr_cap = static_cast<size_t>(num.header_resource_elements());
    const size_t pay_cap = static_cast<size_t>(num.payload_resource_elements());
    if (n_header > hdr_cap) {
        std::ostringstream s;
        s << "ofdm_modulator.header: " << n_header << " REs > header capacity " << hdr_cap;
        throw std::invalid_argument(s.str());
    }
    if (n_payload > pay_cap) {
        std::ostringstream s;
        s << "ofdm_modulator.payload: " << n_payload << " REs > payload capacity " << pay_cap;
        throw std::invalid_argument(s.str());
    }

    const auto& pre = d_seq.preamble();
    std::copy(pre.begin(), pre.end(), out);

    const int n_fft = num.params().fft_len;
    const int cp = num.params().cp_len;
    const size_t n_data = d_data_bins.size();
    const float scale = d_seq.tx_scale();
    gr_complex* fin = d_ifft->get_inbuf();
    const gr_complex* fout = d_ifft->get_outbuf();

    size_t re = 0;  // RE index over header + payload
    for (int s = 0; s < num.data_symbols(); ++s) {
        std::fill(fin, fin + n_fft, gr_complex(0.0f, 0.0f));
        for (size_t i = 0; i < n_data; ++i, ++re) {
            gr_complex v;
            if (re < hdr_cap)
                v = re < n_header ? header[re] : d_seq.padding(re);
            else
                v = (re - hdr_cap) < n_payload ? payload[re - hdr_cap] : d_seq.padding(re);
            fin[d_data_bins[i]] = scale * v;
        }
        for (size_t i = 0; i < d_pilot_bins.size(); ++i)
            fin[d_pilot_bins[i]] = scale * d_seq.pilot(s, static_cast<int>(i));
        d_ifft->execute();
        gr_complex* sym = out + num.symbol_offset(s);
        std::copy(fout + n_fft - cp, fout + n_fft, sym);
        std::copy(fout, fout + n_fft, sym + cp);
    }
    std::fill(out + num.symbol_offset(num.data_symbols()), out + num.slot_samples(),
              gr_complex(0.0f, 0.0f));
}

std::vector<gr_complex> ofdm_modulator::modulate(const std::vector<gr_complex>& header,
                                                 const std::vector<gr_complex>& payload) {
    std::vector<gr_complex> out(static_cast<size_t>(geometry().slot_samples()));
    modulate(header.data(), header.size(), payload.data(), payload.size(), out.data());
    return out;
}

}  // namespace oppsched
}  // namespace gr
