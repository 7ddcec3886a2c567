#pragma once
// Fast, seeded, statistically sound Gaussian noise for the channel emulator.
//
// Uniform source: xoshiro256** (Blackman & Vigna, "Scrambled linear pseudorandom number
// generators", ACM TOMS 47(4), 2021), state seeded through splitmix64 (their recommended
// seeding). Normal deviates: the Ziggurat method of Marsaglia & Tsang ("The Ziggurat
// method for generating random variables", J. Stat. Softw. 5(8), 2000) with 128 layers,
// with Doornik's fix ("An improved Ziggurat method...", 2005): the layer index (low 7
// bits) and the 32-bit value (high bits) come from disjoint bits of one 64-bit draw, so
// they are independent (the original takes both from one 32-bit word). ~98.8% of draws
// take the fast path: one 64-bit draw, one compare, one multiply. No tables of noise
// samples are reused, so long runs and many users never repeat or correlate.
#include <gnuradio/oppsched/api.h>

#include <cstddef>
#include <cstdint>

namespace gr {
namespace oppsched {

//! splitmix64 step (Steele, Lea & Flood 2014): a seed mixer and a derivation of sub-seeds
OPPSCHED_API std::uint64_t splitmix64(std::uint64_t& state);

class OPPSCHED_API gaussian_generator final {
  public:
    explicit gaussian_generator(std::uint64_t seed);

    std::uint64_t next_u64() {
        const std::uint64_t result = rotl(d_s[1] * 5, 7) * 9;
        const std::uint64_t t = d_s[1] << 17;
        d_s[2] ^= d_s[0];
        d_s[3] ^= d_s[1];
        d_s[1] ^= d_s[2];
        d_s[0] ^= d_s[3];
        d_s[2] ^= t;
        d_s[3] = rotl(d_s[3], 45);
        return result;
    }
    //! uniform on (0, 1)
    double uniform() { return (static_cast<double>(next_u64() >> 11) + 0.5) * 0x1.0p-53; }
    //! one N(0, 1) deviate
    float normal();
    //! out[i] = stddev * N(0, 1), i < n
    void fill(float* out, size_t n, float stddev);

  private:
    static std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    float normal_slow(std::int32_t hz, std::uint32_t iz);
    std::uint64_t d_s[4];
};

}  // namespace oppsched
}  // namespace gr
