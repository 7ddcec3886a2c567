#include <gnuradio/oppsched/scrambler.h>

#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

scrambler::scrambler(std::uint8_t seed) : d_state(seed) {
    if (seed == 0 || seed > 127)
        throw std::invalid_argument("scrambler.seed: " + std::to_string(seed) + " not in [1,127]");
}

// The sequence has period 127 (m-sequence): generate one period from the current state,
// then apply it cyclically, and leave the state where next() would have left it.
void scrambler::apply(std::uint8_t* bits, std::size_t n) {
    std::uint8_t seq[127];
    for (auto& b : seq) b = next();
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; ++i) {
        bits[i] ^= seq[k];
        if (++k == 127) k = 0;
    }
    for (std::size_t i = 0; i < n % 127; ++i)  // state after n bits = state after n mod 127
        next();
}

void scrambler::apply_llr(float* llr, std::size_t n) {
    float sgn[127];
    for (auto& v : sgn) v = next() ? -1.0f : 1.0f;
    std::size_t k = 0;
    for (std::size_t i = 0; i < n; ++i) {
        llr[i] *= sgn[k];
        if (++k == 127) k = 0;
    }
    for (std::size_t i = 0; i < n % 127; ++i) next();
}

std::vector<std::uint8_t> scrambler::sequence(std::uint8_t seed, std::size_t n) {
    scrambler s(seed);
    std::vector<std::uint8_t> v(n);
    for (auto& b : v) b = s.next();
    return v;
}

}  // namespace oppsched
}  // namespace gr
