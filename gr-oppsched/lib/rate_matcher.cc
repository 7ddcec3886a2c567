#include <gnuradio/oppsched/rate_matcher.h>

#include <algorithm>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

namespace {
void check_rv(int rv) {
    if (rv < 0 || rv >= rate_matcher::num_rvs)
        throw std::invalid_argument("rv: " + std::to_string(rv) + " not in [0,3]");
}

// Kept flag of mother bit j under a pattern delayed by `shift` steps.
inline bool kept(const puncture_pattern& p, int shift, std::size_t j) {
    const std::size_t len = 2 * static_cast<std::size_t>(p.period);
    const std::size_t pos = (j + len - (2 * static_cast<std::size_t>(shift)) % len) % len;
    return (p.keep_mask >> pos) & 1u;
}
}  // namespace

int rate_matcher::pattern_shift(code_rate rate, int rv) {
    // See rate_matcher.h for why these shifts (complementary first retransmission).
    static constexpr int shifts[4][num_rvs] = {
        {0, 0, 0, 0},  // 1/2
        {0, 1, 1, 0},  // 2/3
        {0, 2, 1, 2},  // 3/4
        {0, 4, 1, 2},  // 5/6
    };
    check_rv(rv);
    pattern_of(rate);  // validates rate
    return shifts[static_cast<int>(rate)][rv];
}

std::size_t rate_matcher::kept_bits(std::size_t mother_bits, code_rate rate, int rv) {
    const auto& p = pattern_of(rate);
    const int s = pattern_shift(rate, rv);
    const std::size_t len = 2 * static_cast<std::size_t>(p.period);
    const std::size_t full = mother_bits / len;
    std::size_t n = full * static_cast<std::size_t>(p.kept);
    for (std::size_t j = full * len; j < mother_bits; ++j) n += kept(p, s, j);
    return n;
}

std::size_t rate_matcher::max_kept_bits(std::size_t mother_bits, code_rate rate) {
    std::size_t m = 0;
    for (int rv = 0; rv < num_rvs; ++rv) m = std::max(m, kept_bits(mother_bits, rate, rv));
    return m;
}

void rate_matcher::selection_into(std::size_t mother_bits, code_rate rate, int rv,
                                  std::size_t coded_bits, std::vector<std::uint32_t>& out) {
    check_rv(rv);
    if (mother_bits < 2 || mother_bits % 2 != 0 || mother_bits > 0xffffffffu)
        throw std::invalid_argument("rate_matcher.mother_bits: " + std::to_string(mother_bits) +
                                    " must be even, >= 2 and < 2^32");
    const auto& p = pattern_of(rate);
    const int s = pattern_shift(rate, rv);
    // The kept sequence S_r (mother indices in order), built once: walk the pattern with a
    // running position instead of a modulo per bit.
    const std::size_t len = 2 * static_cast<std::size_t>(p.period);
    std::size_t pos = (len - (2 * static_cast<std::size_t>(s)) % len) % len;
    out.resize(std::max(coded_bits, mother_bits));
    std::size_t n = 0;
    for (std::size_t j = 0; j < mother_bits; ++j) {
        if ((p.keep_mask >> pos) & 1u) out[n++] = static_cast<std::uint32_t>(j);
        if (++pos == len) pos = 0;
    }
    out.resize(n);
    const std::size_t S = out.size();
    if (S == 0)
        throw std::invalid_argument("rate_matcher.mother_bits: " + std::to_string(mother_bits) +
                                    " keeps no bit at this rate");
    if (coded_bits < S)
        throw std::invalid_argument("rate_matcher.coded_bits: " + std::to_string(coded_bits) +
                                    " < " + std::to_string(S) +
                                    " kept mother bits (TB too large for the slot)");
    // Circular read from k_r = floor(rv*S/4): rotate, then repeat cyclically.
    const std::size_t k0 = (static_cast<std::size_t>(rv) * S) / num_rvs;
    std::rotate(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(k0), out.end());
    out.resize(coded_bits);
    for (std::size_t i = S; i < coded_bits; ++i) out[i] = out[i - S];
}

std::vector<std::uint32_t> rate_matcher::selection(std::size_t mother_bits, code_rate rate, int rv,
                                                   std::size_t coded_bits) {
    std::vector<std::uint32_t> v;
    selection_into(mother_bits, rate, rv, coded_bits, v);
    return v;
}

}  // namespace oppsched
}  // namespace gr
