#pragma once
// Helpers shared by the FEC tests (test_fec*.cc, test_harq*.cc, test_header*.cc).
#include <gnuradio/gr_complex.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace fec_test {

//! unpack bytes MSB first (the bit order of 802.11a Annex G's tables as listed)
inline std::vector<std::uint8_t> bits_msb(const std::vector<std::uint8_t>& bytes) {
    std::vector<std::uint8_t> b;
    for (auto v : bytes)
        for (int i = 7; i >= 0; --i) b.push_back((v >> i) & 1u);
    return b;
}

inline std::vector<std::uint8_t> bits_from_string(const char* s) {
    std::vector<std::uint8_t> b;
    for (; *s; ++s)
        if (*s == '0' || *s == '1') b.push_back(static_cast<std::uint8_t>(*s - '0'));
    return b;
}

inline std::vector<std::uint8_t> random_bytes(std::size_t n, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> d(0, 255);
    std::vector<std::uint8_t> v(n);
    for (auto& x : v) x = static_cast<std::uint8_t>(d(rng));
    return v;
}

inline std::vector<std::uint8_t> random_bits(std::size_t n, std::mt19937_64& rng) {
    std::uniform_int_distribution<int> d(0, 1);
    std::vector<std::uint8_t> v(n);
    for (auto& x : v) x = static_cast<std::uint8_t>(d(rng));
    return v;
}

//! add complex white Gaussian noise of variance n0 (E|n|^2) in place
inline void add_awgn(std::vector<gr_complex>& x, float n0, std::mt19937_64& rng) {
    std::normal_distribution<float> g(0.0f, std::sqrt(n0 / 2.0f));
    for (auto& v : x) v += gr_complex(g(rng), g(rng));
}

inline float n0_of_snr_db(double snr_db) {
    return static_cast<float>(std::pow(10.0, -snr_db / 10.0));
}

}  // namespace fec_test
