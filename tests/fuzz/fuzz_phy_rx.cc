// Fuzz target: the receiver's front end on raw baseband samples (gr-oppsched slot_sync.h,
// ofdm_demodulator.h): the slot synchroniser over a sample stream in any chunking, every
// slot it finds demodulated twice (whole, and header first then complete_payload), the
// header decoded (header_codec) and, when it decodes, header-aided channel estimation.
// The first byte steers: bit 0 synthesise or raw; bit 1 chunk sizes from the input (else one
// push); bit 2 (raw) samples as float32 pairs (NaN, inf, huge) or int8 pairs / 32.
//  synthesise: a slot built by the project's own transmitter (header_codec, tb_encoder,
//  ofdm_modulator) from fuzzer-chosen header fields and TB, behind leading silence, with a
//  gain, a carrier frequency offset, seeded Gaussian-like noise, a second slot right after
//  it on request, and fuzzer-chosen samples overwritten (NaN and inf included).
//  raw: the samples are the input.
// Invariants: nothing throws; slot_sync: every detection has slot_samples() samples, starts
// strictly increase, stats().detections is the number returned, stats().samples the
// number pushed, stats().nonfinite the number of non-finite values pushed, buffered()
// stays O(slot); ofdm_demodulator: the result's sizes are the numerology's, an invalid slot
// has zero REs with noise variance max_noise_var, a valid one finite REs and noise variances
// in [0, max_noise_var]; header first + complete_payload is bit for bit the whole
// demodulation (header and payload REs, noise variances, gains, phases: ofdm_demodulator.h)
// with two demodulators in step; refine_with_header keeps
// those properties; a synthesised slot at a high SNR without overwritten samples is found
// exactly once and its header decodes to the fields sent.
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_util.h"

using namespace gr::oppsched;
using oppsched::fuzz::input_reader;

namespace {

// Made once (FFTW plans are slow to make); the receiver's state is reset per input.
struct tx_rx {
    numerology num{numerology_params{}};
    header_codec hdr{num};
    tb_encoder enc{num};
    ofdm_modulator mod{num};
    ofdm_demodulator whole{num}, split{num};
};

tx_rx& world() {
    static tx_rx w;
    return w;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

void check_result(const ofdm_demod_result& r, const numerology& n, bool payload) {
    FUZZ_CHECK(r.header.size() == static_cast<std::size_t>(n.header_resource_elements()) &&
                   r.header_nvar.size() == r.header.size(),
               "header REs and noise variances: header_resource_elements() each");
    if (payload)
        FUZZ_CHECK(r.payload.size() == static_cast<std::size_t>(n.payload_resource_elements()) &&
                       r.payload_nvar.size() == r.payload.size(),
                   "payload REs and noise variances: payload_resource_elements() each");
    const auto check = [&](const std::vector<gr_complex>& re, const std::vector<float>& nv) {
        for (std::size_t i = 0; i < re.size(); ++i) {
            if (!r.valid) {
                FUZZ_CHECK(
                    re[i] == gr_complex(0.0f, 0.0f) && nv[i] == ofdm_demodulator::max_noise_var,
                    "an invalid slot: zero REs, noise variance max_noise_var");
            } else {
                FUZZ_CHECK(std::isfinite(re[i].real()) && std::isfinite(re[i].imag()),
                           "a valid slot's REs are finite");
                FUZZ_CHECK(nv[i] >= 0.0f && nv[i] <= ofdm_demodulator::max_noise_var,
                           "a valid slot's noise variances are in [0, max_noise_var]");
            }
        }
    };
    check(r.header, r.header_nvar);
    if (payload) check(r.payload, r.payload_nvar);
}

// Uniform in [-1, 1) from a 32-bit LCG: deterministic noise (the sum of 4 ~ Gaussian).
struct lcg {
    std::uint32_t s;
    float next() {
        s = s * 1664525u + 1013904223u;
        return static_cast<float>(s >> 8) / 8388608.0f - 1.0f;
    }
    float gauss() { return (next() + next() + next() + next()) * 0.866f; }
};

float raw_float(input_reader& in) {
    const std::uint32_t u = in.u32();
    float x;
    std::memcpy(&x, &u, sizeof x);
    return x;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    input_reader in(data, size);
    const std::uint8_t control = in.u8();
    tx_rx& w = world();
    const numerology& n = w.num;
    const std::size_t S = static_cast<std::size_t>(n.slot_samples());

    std::vector<gr_complex> stream;
    bool expect_clean = false;
    header_fields sent{};
    if (control & 1u) {
        // The transmitter's slot.
        sent.user = static_cast<std::uint16_t>(in.u16() % 65535);
        const std::uint8_t f = in.u8();
        sent.mcs = f & 7u;
        sent.rv = (f >> 3) & 3u;
        sent.ndi = (f >> 5) & 1u;
        sent.uplink = (f >> 6) & 1u;
        sent.harq_process = in.u8() & 15u;
        sent.slot = in.u32();
        const std::size_t max_tb = mcs_set::tb_bytes(sent.mcs, n);
        sent.tb_bytes = static_cast<std::uint16_t>(in.u16() % (max_tb + 1));  // 0: no payload
        std::vector<std::uint8_t> tb = in.bytes(sent.tb_bytes);
        tb.resize(sent.tb_bytes, 0);
        const auto h_re = w.hdr.encode(sent);
        std::vector<gr_complex> p_re;
        if (sent.tb_bytes > 0)
            p_re = w.enc.encode(tb, sent.mcs, sent.rv, scrambler::seed_for_slot(sent.slot));
        std::vector<gr_complex> slot(S);
        w.mod.modulate(h_re.data(), h_re.size(), p_re.data(), p_re.size(), slot.data());
        const std::size_t lead = in.u16() % 4096;
        const float gain = std::pow(10.0f, (static_cast<int>(in.u8()) - 128) / 40.0f);
        const float cfo =
            static_cast<float>(static_cast<std::int8_t>(in.u8())) / 64.0f;  // spacings
        const std::uint8_t snr_byte = in.u8();
        const float snr_db = static_cast<float>(snr_byte) / 4.0f - 10.0f;  // -10..53.75 dB
        const bool twice = (f & 0x80u) != 0;
        stream.assign(lead, gr_complex(0.0f, 0.0f));
        stream.insert(stream.end(), slot.begin(), slot.end());
        if (twice) stream.insert(stream.end(), slot.begin(), slot.end());
        stream.resize(stream.size() + S, gr_complex(0.0f, 0.0f));  // let the last slot out
        lcg noise{in.u32()};
        const float sigma = gain * std::pow(10.0f, -snr_db / 20.0f) / std::sqrt(2.0f);
        const double w0 = 2.0 * M_PI * cfo / n.params().fft_len;
        for (std::size_t i = 0; i < stream.size(); ++i) {
            const double ph = w0 * static_cast<double>(i);
            stream[i] =
                stream[i] * gain *
                    gr_complex(static_cast<float>(std::cos(ph)), static_cast<float>(std::sin(ph))) +
                gr_complex(sigma * noise.gauss(), sigma * noise.gauss());
        }
        const int overwrites = in.u8() & 0x0f;
        for (int i = 0; i < overwrites; ++i) {
            const std::size_t at = in.u16() % stream.size();
            stream[at] = gr_complex(raw_float(in), raw_float(in));
        }
        expect_clean = overwrites == 0 && !twice && lead >= 64 && snr_db >= 25.0f &&
                       std::fabs(cfo) <= 0.5f && gain >= 0.5f && gain <= 2.0f;
    } else {
        const bool as_float = (control & 4u) != 0;
        const std::size_t max_samples = 4 * S;
        while (!in.empty() && stream.size() < max_samples) {
            if (as_float) {
                const float a = raw_float(in), b = raw_float(in);
                stream.emplace_back(a, b);
            } else {
                const float a = static_cast<float>(static_cast<std::int8_t>(in.u8())) / 32.0f;
                const float b = static_cast<float>(static_cast<std::int8_t>(in.u8())) / 32.0f;
                stream.emplace_back(a, b);
            }
        }
    }
    std::uint64_t nonfinite = 0;
    for (const auto& x : stream)
        nonfinite += !std::isfinite(x.real()) || !std::isfinite(x.imag()) ? 1 : 0;

    slot_sync sync(n);  // a fresh one: reset() keeps the metric's running state
    const slot_sync_stats st0 = sync.stats();
    std::vector<slot_detection> found;
    std::size_t pos = 0;
    while (pos < stream.size()) {
        std::size_t chunk = stream.size() - pos;
        if (control & 2u) chunk = std::min<std::size_t>(chunk, 1 + in.u16() % (2 * S));
        const std::size_t before = found.size();
        const std::size_t got = sync.push(stream.data() + pos, chunk, found);
        FUZZ_CHECK(got == found.size() - before, "push returns what it appended");
        pos += chunk;
        FUZZ_CHECK(sync.buffered() <= 4 * S + 1024, "the synchroniser buffers O(slot)");
    }
    const auto& st = sync.stats();
    FUZZ_CHECK(st.samples - st0.samples == stream.size(), "every sample pushed is counted");
    FUZZ_CHECK(st.detections - st0.detections == found.size(), "every slot delivered is counted");
    FUZZ_CHECK(st.nonfinite - st0.nonfinite == nonfinite,
               "every non-finite value pushed is counted");
    for (std::size_t i = 0; i < found.size(); ++i) {
        FUZZ_CHECK(found[i].samples.size() == S, "a detection holds one slot's samples");
        if (i > 0) FUZZ_CHECK(found[i].start > found[i - 1].start, "starts strictly increase");
        FUZZ_CHECK(found[i].start < stream.size(), "a slot starts inside the stream");
    }

    // Two demodulators in step: whole slots, and header first + complete_payload.
    ofdm_demodulator &whole = w.whole, &split = w.split;
    whole.estimator().set_state({});  // no noise average: every input starts alike
    split.estimator().set_state({});
    ofdm_demod_result a, b;
    int headers_ok = 0;
    bool sent_header_seen = false;
    for (const auto& det : found) {
        whole.demodulate(det.samples.data(), det.samples.size(), a, true);
        check_result(a, n, true);
        split.demodulate(det.samples.data(), det.samples.size(), b, false);
        check_result(b, n, false);
        FUZZ_CHECK(a.valid == b.valid, "a header-only demodulation agrees on validity");
        // The header alone is tracked over the header symbols only; complete_payload redoes
        // the tracking over every symbol, so only then do the two agree.
        split.complete_payload(det.samples.data(), det.samples.size(), b);
        if (a.valid) {
            check_result(b, n, true);
            FUZZ_CHECK(same_bits(a.header, b.header) && same_bits(a.header_nvar, b.header_nvar) &&
                           same_bits(a.payload, b.payload) &&
                           same_bits(a.payload_nvar, b.payload_nvar) && same_bits(a.gain, b.gain) &&
                           same_bits(a.phase, b.phase),
                       "complete_payload is bit for bit the whole demodulation");
        }
        const auto h = w.hdr.decode(a.header, a.header_nvar);
        if (!h.ok()) continue;
        ++headers_ok;
        if (h.value() == sent) sent_header_seen = true;
        const auto h_re = w.hdr.encode(h.value());
        whole.refine_with_header(h_re.data(), h_re.size(), a);
        check_result(a, n, true);
        split.refine_with_header(h_re.data(), h_re.size(), b);
    }
    if (expect_clean) {
        FUZZ_CHECK(found.size() == 1, "a clean slot is found exactly once");
        FUZZ_CHECK(headers_ok == 1 && sent_header_seen, "a clean slot's header decodes as sent");
    }
    return 0;
}
