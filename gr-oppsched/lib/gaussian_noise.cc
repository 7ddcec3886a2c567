// Ziggurat Gaussian generator over xoshiro256**; see gaussian_noise.h.
#include <gnuradio/oppsched/gaussian_noise.h>

#include <cmath>

namespace gr {
namespace oppsched {

namespace {

// Marsaglia & Tsang (2000), zigset() for RNOR with 128 layers.
struct zig_tables {
    std::uint32_t kn[128];
    float wn[128];
    float fn[128];
    zig_tables() {
        const double m1 = 2147483648.0;  // 2^31
        double dn = 3.442619855899, tn = dn;
        const double vn = 9.91256303526217e-3;
        const double q = vn / std::exp(-0.5 * dn * dn);
        kn[0] = static_cast<std::uint32_t>((dn / q) * m1);
        kn[1] = 0;
        wn[0] = static_cast<float>(q / m1);
        wn[127] = static_cast<float>(dn / m1);
        fn[0] = 1.0f;
        fn[127] = static_cast<float>(std::exp(-0.5 * dn * dn));
        for (int i = 126; i >= 1; --i) {
            dn = std::sqrt(-2.0 * std::log(vn / dn + std::exp(-0.5 * dn * dn)));
            kn[i + 1] = static_cast<std::uint32_t>((dn / tn) * m1);
            tn = dn;
            fn[i] = static_cast<float>(std::exp(-0.5 * dn * dn));
            wn[i] = static_cast<float>(dn / m1);
        }
    }
};

const zig_tables& tables() {
    static const zig_tables t;  // thread-safe initialisation (C++11)
    return t;
}

inline std::uint32_t iabs(std::int32_t v) {
    return v < 0 ? static_cast<std::uint32_t>(-static_cast<std::int64_t>(v))
                 : static_cast<std::uint32_t>(v);
}

}  // namespace

std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

gaussian_generator::gaussian_generator(std::uint64_t seed) {
    std::uint64_t sm = seed;
    for (auto& s : d_s) s = splitmix64(sm);
    (void)tables();
}

float gaussian_generator::normal() {
    const zig_tables& t = tables();
    const std::uint64_t u = next_u64();
    const std::int32_t hz = static_cast<std::int32_t>(static_cast<std::uint32_t>(u >> 32));
    const std::uint32_t iz = static_cast<std::uint32_t>(u) & 127u;
    if (iabs(hz) < t.kn[iz]) return static_cast<float>(hz) * t.wn[iz];
    return normal_slow(hz, iz);
}

float gaussian_generator::normal_slow(std::int32_t hz, std::uint32_t iz) {
    // Marsaglia & Tsang's nfix(): the tail (layer 0) by Marsaglia's 1964 method, the
    // wedges by rejection against exp(-x^2/2).
    const zig_tables& t = tables();
    constexpr double r = 3.442620;
    for (;;) {
        const double x = static_cast<double>(hz) * t.wn[iz];
        if (iz == 0) {
            double xt, y;
            do {
                xt = -std::log(uniform()) / r;
                y = -std::log(uniform());
            } while (y + y < xt * xt);
            return static_cast<float>(hz > 0 ? r + xt : -r - xt);
        }
        if (t.fn[iz] + uniform() * (t.fn[iz - 1] - t.fn[iz]) < std::exp(-0.5 * x * x))
            return static_cast<float>(x);
        const std::uint64_t u = next_u64();
        hz = static_cast<std::int32_t>(static_cast<std::uint32_t>(u >> 32));
        iz = static_cast<std::uint32_t>(u) & 127u;
        if (iabs(hz) < t.kn[iz]) return static_cast<float>(hz) * t.wn[iz];
    }
}

void gaussian_generator::fill(float* out, size_t n, float stddev) {
    // normal() inlined with the generator's state in registers: the same draws and the
    // same arithmetic, so the same deviates bit for bit (test_emulator.cc pins it). The
    // fast path (98.8% of draws) is one xoshiro256** step, a compare and a multiply;
    // the rare rest goes through normal_slow() with the state written back.
    const zig_tables& t = tables();
    std::uint64_t s0 = d_s[0], s1 = d_s[1], s2 = d_s[2], s3 = d_s[3];
    for (size_t i = 0; i < n; ++i) {
        const std::uint64_t u = rotl(s1 * 5, 7) * 9;
        const std::uint64_t sh = s1 << 17;
        s2 ^= s0;
        s3 ^= s1;
        s1 ^= s2;
        s0 ^= s3;
        s2 ^= sh;
        s3 = rotl(s3, 45);
        const std::int32_t hz = static_cast<std::int32_t>(static_cast<std::uint32_t>(u >> 32));
        const std::uint32_t iz = static_cast<std::uint32_t>(u) & 127u;
        if (iabs(hz) < t.kn[iz]) {
            out[i] = stddev * (static_cast<float>(hz) * t.wn[iz]);
        } else {
            d_s[0] = s0, d_s[1] = s1, d_s[2] = s2, d_s[3] = s3;
            out[i] = stddev * normal_slow(hz, iz);
            s0 = d_s[0], s1 = d_s[1], s2 = d_s[2], s3 = d_s[3];
        }
    }
    d_s[0] = s0, d_s[1] = s1, d_s[2] = s2, d_s[3] = s3;
}

}  // namespace oppsched
}  // namespace gr
