#include <gnuradio/oppsched/ldpc_rate_matcher.h>
#include <gnuradio/oppsched/mcs.h>
#include <gnuradio/oppsched/rate_matcher.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

namespace {
// 802.11-2016 §17.3.5.6 Figure 17-9 (2/3, 3/4) and the HT rate-5/6 pattern of 802.11n
// (802.11-2016 §19.3.11.6.2). Mask bit i = mother bit i of the period (A0=0, B0=1, A1=2, B1=3,
// ...).
constexpr puncture_pattern k_patterns[4] = {
    {1, 2, 0b11},          // 1/2: A0 B0
    {2, 3, 0b0111},        // 2/3: A0 B0 A1        (B1 stolen)
    {3, 4, 0b100111},      // 3/4: A0 B0 A1 B2     (B1 A2 stolen)
    {5, 6, 0b1001100111},  // 5/6: A0 B0 A1 B2 A3 B4 (B1 A2 B3 A4 stolen)
};

const std::array<mcs_info, mcs_set::size> k_table = {{
    {0, "BPSK 1/2", 1, code_rate::r1_2, 1, 2},
    {1, "QPSK 1/2", 2, code_rate::r1_2, 1, 2},
    {2, "QPSK 3/4", 2, code_rate::r3_4, 3, 4},
    {3, "16QAM 1/2", 4, code_rate::r1_2, 1, 2},
    {4, "16QAM 3/4", 4, code_rate::r3_4, 3, 4},
    {5, "64QAM 2/3", 6, code_rate::r2_3, 2, 3},
    {6, "64QAM 3/4", 6, code_rate::r3_4, 3, 4},
    {7, "64QAM 5/6", 6, code_rate::r5_6, 5, 6},
}};
}  // namespace

const puncture_pattern& pattern_of(code_rate r) {
    const auto i = static_cast<unsigned>(r);
    if (i >= 4) throw std::invalid_argument("code_rate: " + std::to_string(i) + " not in [0,3]");
    return k_patterns[i];
}

const mcs_info& mcs_set::get(int index) {
    if (index < 0 || index >= size)
        throw std::invalid_argument("mcs: " + std::to_string(index) + " not in [0,7]");
    return k_table[static_cast<std::size_t>(index)];
}

const std::array<mcs_info, mcs_set::size>& mcs_set::all() { return k_table; }

std::size_t mcs_set::coded_bits(int index, const numerology& n) {
    return static_cast<std::size_t>(n.payload_resource_elements()) *
           static_cast<std::size_t>(get(index).bits_per_symbol);
}

std::size_t mcs_set::mother_bits(std::size_t tb_bytes) {
    return 2 * (8 * (tb_bytes + 4) + tail_bits);
}

std::size_t mcs_set::tb_bytes_for_coded_bits(int index, std::size_t coded_bits, fec_scheme fec) {
    const auto& m = get(index);
    if (fec == fec_scheme::ldpc) {
        // K = 8 (bytes + 4) <= floor(C R): no tail, the code rate is exact per codeword
        const std::size_t cap = coded_bits * static_cast<std::size_t>(m.rate_num) /
                                static_cast<std::size_t>(m.rate_den);
        return cap >= 8 + crc_bits ? (cap - crc_bits) / 8 : 0;
    }
    auto fits = [&](std::size_t bytes) {
        return rate_matcher::max_kept_bits(mother_bits(bytes), m.rate) <= coded_bits;
    };
    // Estimate from the rate, then correct by at most a few steps: kept bits grow by
    // about 16/R per byte, monotonically.
    const double info =
        static_cast<double>(coded_bits) * m.code_rate_value() - tail_bits - crc_bits;
    std::size_t b = info > 8 ? static_cast<std::size_t>(info / 8) : 1;
    while (b > 0 && !fits(b)) --b;
    if (b == 0) return 0;
    while (fits(b + 1)) ++b;
    return b;
}

std::size_t mcs_set::tb_bytes(int index, const numerology& n) {
    return tb_bytes_for_coded_bits(index, coded_bits(index, n), n.params().fec);
}

std::size_t mcs_set::soft_bits(std::size_t tb_bytes, int index, const numerology& n) {
    const auto& m = get(index);
    if (n.params().fec == fec_scheme::conv) return mother_bits(tb_bytes);
    return ldpc_segmentation(8 * (tb_bytes + 4), m.rate, coded_bits(index, n),
                             n.params().ldpc_max_n)
        .total_bits();
}

std::size_t mcs_set::max_mother_bits(const numerology& n) {
    std::size_t m = 0;
    for (const auto& e : k_table) {
        const std::size_t b = tb_bytes(e.index, n);
        if (n.params().fec == fec_scheme::conv) {
            if (b > 0) m = std::max(m, soft_bits(b, e.index, n));
        } else {
            // a smaller TB may take a longer, unpunctured codeword: scan every size
            // (O(tb_bytes) cheap constructions, once per decoder)
            for (std::size_t t = 1; t <= b; ++t) m = std::max(m, soft_bits(t, e.index, n));
        }
    }
    return m;
}

int mcs_set::lowest_mcs_for_bytes(std::size_t bytes, const numerology& n) {
    for (const auto& e : k_table)
        if (tb_bytes(e.index, n) >= bytes) return e.index;
    return -1;
}

}  // namespace oppsched
}  // namespace gr
