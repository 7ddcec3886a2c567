// Fuzz target: the PHY control header (gr-oppsched header_codec.h). The first input byte
// steers: bit 0 picks the numerology (4 header symbols, BPSK; 2, QPSK), bit 1 the path:
//  - unpack: 12 packed bytes, the CRC-16 recomputed over the mutated bytes when bit 2 is set
//    (so the reserved-bit and field checks are reached). An accepted header packs back to
//    the same 12 bytes.
//  - decode: the rest of the input as equalised REs and noise variances (float32 pairs,
//    NaN and inf included). Never throws ("never crashes on garbage"); an accepted header
//    passes validate().
// Errors name what failed.
#include <gnuradio/oppsched/header_codec.h>

#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/byte_order.h"

using namespace gr::oppsched;

namespace {
header_codec& codec(int which) {
    static const auto make = [](int header_symbols) {
        numerology_params p;
        p.header_symbols = header_symbols;
        return std::make_unique<header_codec>(numerology(p));
    };
    static const std::unique_ptr<header_codec> bpsk = make(4), qpsk = make(2);
    return which ? *qpsk : *bpsk;
}

void check_error(const std::string& e) { FUZZ_CHECK(e.rfind("header: ", 0) == 0, e.c_str()); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::uint8_t control = data[0];
    header_codec& c = codec(control & 1);
    if ((control & 2u) == 0) {
        std::array<std::uint8_t, header_codec::packed_bytes> b{};
        std::memcpy(b.data(), data + 1, std::min(size - 1, b.size()));
        if (control & 4u) oppsched::store_be16(&b[10], header_codec::crc16(b.data(), 10));
        const auto h = c.unpack(b.data());
        if (!h.ok()) {
            check_error(h.error());
            return 0;
        }
        FUZZ_CHECK(c.pack(h.value()) == b, "an accepted header packs back to its bytes");
        return 0;
    }
    // REs and noise variances from the bytes; the right count, or any count (an error).
    const std::size_t floats = (size - 1) / sizeof(float);
    std::size_t n_re = c.resource_elements();
    if (control & 4u) n_re = floats / 3;  // any count: must be rejected unless it is right
    std::vector<gr_complex> re(n_re);
    std::vector<float> nv(n_re);
    std::size_t k = 0;
    const auto next = [&]() {
        float x = 0.0f;
        if (k < floats) std::memcpy(&x, data + 1 + sizeof(float) * k, sizeof(float));
        ++k;
        return x;
    };
    for (std::size_t i = 0; i < n_re; ++i) {
        const float a = next(), b = next();
        re[i] = gr_complex(a, b);
        nv[i] = next();
    }
    const auto h = c.decode(re, nv);
    if (!h.ok()) {
        check_error(h.error());
        return 0;
    }
    FUZZ_CHECK(n_re == c.resource_elements(), "only the right number of REs decodes");
    c.validate(h.value());  // throws (and so fails) if decode let a bad field through
    return 0;
}
