// Fuzz target: the PHY's channel decoders on soft bits (gr-oppsched ldpc.h, conv_code.h): the
// layered min-sum LDPC decoder of the 802.11n codes and the K=7 Viterbi decoder (acs16 and
// volk8 engines, zero tail and tail-biting), fed by the demapper with LLRs from the air.
// The first byte steers: bit 0 LDPC or Viterbi; bit 1 "clean" (LLRs of a real codeword, all
// signs right) or raw; bit 2 (raw) LLRs as float32 (NaN, inf, denormals) or int8 / 4.
//  LDPC: a byte picks the length (648, 1296, 1944) and the rate.
//  Viterbi: two bytes give k, a byte the termination, engine and (clean) constant magnitude.
// Then the info bits (clean: one per input bit) or the LLRs (raw), zeros once the input ends.
// Invariants: no throw for valid sizes; the output is exactly n (LDPC) or k (Viterbi) bytes
// (exact-size heap buffers) of 0/1; LDPC: iterations within [0, max_iterations], `converged`
// exactly when the output satisfies every parity check, the 8-lane (AVX2) and 4-lane (SSE2)
// layer loops give bit-identical output (ldpc.h) and, clean, the decoder returns the sent
// codeword; Viterbi clean: the output re-encodes to the sent codeword (acs16, the float
// reference, and volk8 with a constant magnitude: a maximum-likelihood decoder cannot miss
// a codeword whose every LLR has the right sign).
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/ldpc.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_util.h"

using namespace gr::oppsched;

namespace {

// An LLR from the air: float32 bits, or a signed byte / 4.
float raw_llr(oppsched::fuzz::input_reader& in, bool as_float) {
    return in.soft_value(as_float, 4.0f);
}

// A magnitude in [1, 4] (never an erasure, never so small the quantiser zeroes it).
float magnitude(oppsched::fuzz::input_reader& in) { return 1.0f + 3.0f * in.u8() / 255.0f; }

void all_bits(const std::vector<std::uint8_t>& b, const char* what) {
    for (auto x : b) FUZZ_CHECK(x <= 1, what);
}

void fuzz_ldpc(oppsched::fuzz::input_reader& in, bool clean, bool as_float) {
    static ldpc_decoder dec;  // scratch sized for the largest code
    const std::uint8_t pick = in.u8();
    const int n = ldpc_code::lengths[(pick & 3u) % 3];
    const auto rate = static_cast<code_rate>((pick >> 2) & 3u);
    const ldpc_code& code = ldpc_code::get(n, rate);
    std::vector<float> llr(static_cast<std::size_t>(n));
    std::vector<std::uint8_t> sent;
    if (clean) {
        std::vector<std::uint8_t> info(static_cast<std::size_t>(code.k()));
        std::uint8_t byte = 0;
        for (int i = 0; i < code.k(); ++i) {
            if (i % 8 == 0) byte = in.u8();
            info[static_cast<std::size_t>(i)] = (byte >> (7 - i % 8)) & 1u;
        }
        sent = code.encode(info);
        FUZZ_CHECK(code.check(sent.data()), "an encoded codeword passes its checks");
        for (int i = 0; i < n; ++i)
            llr[static_cast<std::size_t>(i)] =
                (sent[static_cast<std::size_t>(i)] ? -1.0f : 1.0f) * magnitude(in);
    } else {
        for (auto& x : llr) x = raw_llr(in, as_float);
    }
    std::vector<std::uint8_t> out(static_cast<std::size_t>(n), 0xAA);
    dec.use_wide_lanes(true);
    const auto st = dec.decode(code, llr.data(), out.data());
    all_bits(out, "LDPC output bits are 0/1");
    FUZZ_CHECK(st.iterations >= 0 && st.iterations <= dec.max_iterations(), "iterations in range");
    FUZZ_CHECK(st.converged == code.check(out.data()),
               "converged exactly when the output satisfies every check");
    if (ldpc_decoder::wide_lanes_available()) {
        std::vector<std::uint8_t> narrow(static_cast<std::size_t>(n), 0x55);
        dec.use_wide_lanes(false);
        const auto st2 = dec.decode(code, llr.data(), narrow.data());
        dec.use_wide_lanes(true);
        FUZZ_CHECK(
            narrow == out && st2.iterations == st.iterations && st2.converged == st.converged,
            "8-lane and 4-lane layer loops agree bit for bit");
    }
    if (clean) {
        FUZZ_CHECK(st.converged && out == sent, "a codeword with every sign right decodes");
    }
}

void fuzz_viterbi(oppsched::fuzz::input_reader& in, bool clean, bool as_float) {
    static viterbi_decoder_k7 acs16(0, viterbi_backend::acs16);
    static viterbi_decoder_k7 volk8(0, viterbi_backend::volk8);
    const std::size_t k = 1 + in.u16() % 2048;
    const std::uint8_t pick = in.u8();
    const termination t = (pick & 1u) ? termination::tail_biting : termination::zero_tail;
    if (t == termination::tail_biting && k < 6) return;  // documented: needs k >= 6
    const bool use_volk = (pick & 2u) != 0;
    const bool constant = (pick & 4u) != 0;
    const std::size_t n_llr = t == termination::tail_biting ? 2 * k : 2 * (k + 6);
    std::vector<float> llr(n_llr);
    std::vector<std::uint8_t> info(k), sent;
    if (clean) {
        std::uint8_t byte = 0;
        for (std::size_t i = 0; i < k; ++i) {
            if (i % 8 == 0) byte = in.u8();
            info[i] = (byte >> (7 - i % 8)) & 1u;
        }
        sent = t == termination::tail_biting ? conv_encoder_k7::encode_tail_biting(info)
                                             : conv_encoder_k7::encode_zero_tail(info);
        FUZZ_CHECK(sent.size() == n_llr, "codeword length");
        const float m0 = magnitude(in);
        for (std::size_t i = 0; i < n_llr; ++i)
            llr[i] = (sent[i] ? -1.0f : 1.0f) * (constant ? m0 : magnitude(in));
    } else {
        for (auto& x : llr) x = raw_llr(in, as_float);
    }
    viterbi_decoder_k7& dec = use_volk ? volk8 : acs16;
    // Exact-size heap buffers: a write past k leaves the allocation (ASan reports it).
    std::unique_ptr<std::uint8_t[]> bits(new std::uint8_t[k]);
    std::memset(bits.get(), 0xAA, k);
    dec.decode(llr.data(), k, t, bits.get());
    const std::vector<std::uint8_t> got(bits.get(), bits.get() + k);
    all_bits(got, "Viterbi output bits are 0/1");
    if (!clean) return;
    const auto reenc = [&](const std::vector<std::uint8_t>& b) {
        return t == termination::tail_biting ? conv_encoder_k7::encode_tail_biting(b)
                                             : conv_encoder_k7::encode_zero_tail(b);
    };
    if (!use_volk || constant)
        FUZZ_CHECK(reenc(got) == sent, "a codeword with every sign right decodes");
    std::vector<std::uint8_t> ref(k, 0xAA);
    viterbi_k7_reference(llr.data(), k, t, ref.data());
    all_bits(ref, "reference output bits are 0/1");
    FUZZ_CHECK(reenc(ref) == sent, "the float reference decodes a clean codeword");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    oppsched::fuzz::input_reader in(data, size);
    const std::uint8_t control = in.u8();
    const bool clean = (control & 2u) != 0, as_float = (control & 4u) != 0;
    if (control & 1u)
        fuzz_viterbi(in, clean, as_float);
    else
        fuzz_ldpc(in, clean, as_float);
    return 0;
}
