// Fuzz target: tb_decoder (gr-oppsched tb_codec.h), the payload decoder fed by the
// demodulator's equalised REs and noise variances: demapping, deinterleaving, descrambling,
// de-rate-matching into a HARQ buffer, LDPC or Viterbi decoding, CRC-32. Up to four
// transmissions are combined in one HARQ buffer, with the parameters a header carries.
// The first byte steers: bit 0 the numerology's FEC (LDPC or convolutional); bit 1 "clean":
// a TB encoded by tb_encoder, then changed at fuzzer-chosen REs (values, NaN/inf, noise
// variances), or raw REs and noise variances from the bytes; bit 2 (raw) float32 values
// or int8 / 16.
// Per transmission: MCS, RV, TB size, NDI and scrambler seed bytes (out of range values
// included: the decoder must reject them naming the field).
// Invariants: decode throws only std::invalid_argument, naming a field ("field: ..."), and
// only for parameters out of range; the result has exactly tb_bytes bytes; 1 <= receptions
// <= transmissions since the NDI last changed; clean: crc_ok means the decoded bytes are the
// TB sent (the decoder's CRC check is real), and an unchanged first transmission (RV 0,
// small noise variance) decodes.
#include <gnuradio/oppsched/tb_codec.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_util.h"

using namespace gr::oppsched;

namespace {

struct chain {
    numerology num;
    tb_encoder enc;
    tb_decoder dec;
    std::unique_ptr<harq_buffer> harq;
    explicit chain(fec_scheme f)
        : num([f] {
              numerology_params p;
              p.fec = f;
              return p;
          }()),
          enc(num),
          dec(num),
          harq(dec.make_harq_buffer()) {}
};

chain& get_chain(bool conv) {
    static chain ldpc(fec_scheme::ldpc), cc(fec_scheme::conv);
    return conv ? cc : ldpc;
}

bool names_a_field(const std::string& e) {
    const auto colon = e.find(": ");
    if (colon == std::string::npos || colon == 0) return false;
    for (std::size_t i = 0; i < colon; ++i) {
        const char c = e[i];
        if (!((c >= 'a' && c <= 'z') || c == '_' || c == '.' || (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

float value(oppsched::fuzz::input_reader& in, bool as_float) {
    return in.soft_value(as_float, 16.0f);  // float32 bits, or a signed byte / 16
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    oppsched::fuzz::input_reader in(data, size);
    const std::uint8_t control = in.u8();
    chain& c = get_chain(control & 1u);
    const bool clean = (control & 2u) != 0, as_float = (control & 4u) != 0;
    const std::size_t n_re = c.dec.resource_elements();
    c.harq->clear();
    int since_new = 0;
    bool have_ndi = false, last_ndi = false;
    std::vector<std::uint8_t> sent;
    for (int tx = 0; tx < 4 && !in.empty(); ++tx) {
        tb_rx_params p;
        const std::uint8_t mcs_byte = in.u8();
        p.mcs = (mcs_byte & 0x80u) ? static_cast<std::int8_t>(mcs_byte) : (mcs_byte & 7);
        const std::uint8_t rv_byte = in.u8();
        p.rv = (rv_byte & 0x80u) ? static_cast<std::int8_t>(rv_byte) : (rv_byte & 3);
        const std::uint16_t tb = in.u16();
        p.ndi = (rv_byte & 0x40u) != 0;
        const std::uint8_t seed_byte = in.u8();
        p.scrambler_seed = (seed_byte & 0x80u) ? seed_byte : (1 + seed_byte % 127);
        const bool mcs_ok = p.mcs >= 0 && p.mcs < mcs_set::size;
        const std::size_t max_tb = mcs_ok ? mcs_set::tb_bytes(p.mcs, c.num) : 0;
        // Mostly a valid size (any in range), sometimes the raw value.
        p.tb_bytes = (tb & 0x8000u) || max_tb == 0 ? (tb & 0x7fffu) : 1 + tb % max_tb;
        const bool valid = mcs_ok && p.rv >= 0 && p.rv <= 3 && p.tb_bytes >= 1 &&
                           p.tb_bytes <= max_tb && p.scrambler_seed >= 1 && p.scrambler_seed <= 127;

        std::vector<gr_complex> re(n_re);
        std::vector<float> nv(n_re, 1e-3f);
        bool changed = false;
        if (clean && valid) {
            if (sent.size() != p.tb_bytes || !have_ndi || p.ndi != last_ndi) {
                sent = in.bytes(p.tb_bytes);
                sent.resize(p.tb_bytes, 0x5a);
            }
            re = c.enc.encode(sent, p.mcs, p.rv, p.scrambler_seed);
            FUZZ_CHECK(re.size() == n_re, "the encoder fills every RE");
            const int changes = in.u8() & 0x1f;
            for (int i = 0; i < changes; ++i) {
                const std::size_t at = in.u16() % n_re;
                const std::uint8_t what = in.u8();
                changed = true;
                if (what & 1u) re[at] = gr_complex(value(in, true), value(in, true));
                if (what & 2u) nv[at] = value(in, true);
                if (what & 4u) re[at] = -re[at];
            }
        } else {
            for (std::size_t i = 0; i < n_re && !in.empty(); ++i) {
                re[i] = gr_complex(value(in, as_float), value(in, as_float));
                nv[i] = std::fabs(value(in, as_float)) + ((control & 8u) ? 0.0f : 1e-3f);
            }
            // Clean mode comes here only with parameters out of range, which decode()
            // refuses before it touches the HARQ buffer: the TB sent under this NDI stays
            // the one to check against. (Forgetting it made the next transmission of the
            // same NDI and size a different TB, which a receiver rightly combines with the
            // first and decodes as the first.)
        }
        tb_decode_result r;
        try {
            r = c.dec.decode(re, nv, p, *c.harq);
        } catch (const std::invalid_argument& e) {
            FUZZ_CHECK(!valid, e.what());
            FUZZ_CHECK(names_a_field(e.what()), e.what());
            continue;
        }
        FUZZ_CHECK(valid, "out-of-range parameters are rejected");
        const bool new_tb = !have_ndi || p.ndi != last_ndi;
        since_new = new_tb ? 1 : since_new + 1;
        have_ndi = true;
        last_ndi = p.ndi;
        FUZZ_CHECK(r.bytes.size() == p.tb_bytes, "the result holds exactly tb_bytes bytes");
        FUZZ_CHECK(r.stats.receptions >= 1 && r.stats.receptions <= since_new,
                   "receptions counted since the NDI changed");
        if (clean && !sent.empty()) {
            if (r.crc_ok) FUZZ_CHECK(r.bytes == sent, "crc_ok means the TB sent");
            if (!changed && p.rv == 0 && r.stats.receptions == 1)
                FUZZ_CHECK(r.crc_ok, "an unchanged first transmission decodes");
        }
    }
    return 0;
}
