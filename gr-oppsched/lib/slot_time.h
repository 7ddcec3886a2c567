#pragma once
// The slot clock of the PHY: slot n starts at t0 + n * S / fs, with S samples per slot and
// fs samples per second. Computed in integers wherever fs is an integer (every profile and
// rate the project uses) so that tx_time tags are exact and reproducible: a double
// n * T_slot would drift by ulps after a few hours and UHD would see the error.
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

namespace gr {
namespace oppsched {

class slot_clock final {
  public:
    slot_clock(std::uint64_t slot_samples, double fs) : d_S(slot_samples), d_fs(fs) {
        if (!(fs > 0) || !std::isfinite(fs))
            throw std::invalid_argument("sample_rate: " + std::to_string(fs) + " must be > 0");
        d_fs_int = (std::floor(fs) == fs && fs < 9.2e18) ? static_cast<std::uint64_t>(fs) : 0;
    }

    //! t0 as whole seconds + fraction in [0, 1)
    void set_t0(double t0_s) {
        if (!std::isfinite(t0_s) || t0_s < 0)
            throw std::invalid_argument("t0_s: " + std::to_string(t0_s) + " must be >= 0");
        const double full = std::floor(t0_s);
        d_full = static_cast<std::uint64_t>(full);
        d_frac = t0_s - full;
    }
    void set_t0_ns(std::int64_t t0_ns) {
        if (t0_ns < 0) throw std::invalid_argument("t0_ns: must be >= 0");
        d_full = static_cast<std::uint64_t>(t0_ns / 1'000'000'000);
        d_frac = static_cast<double>(t0_ns % 1'000'000'000) / 1e9;
    }

    //! UHD time of the first sample of slot n: (full seconds, fractional seconds)
    std::pair<std::uint64_t, double> tx_time(std::uint64_t n) const {
        const std::uint64_t samples = n * d_S;
        std::uint64_t full = d_full;
        double frac = d_frac;
        if (d_fs_int) {
            full += samples / d_fs_int;
            frac += static_cast<double>(samples % d_fs_int) / d_fs;
        } else {
            const long double t = static_cast<long double>(samples) / d_fs;
            const long double f = std::floor(t);
            full += static_cast<std::uint64_t>(f);
            frac += static_cast<double>(t - f);
        }
        if (frac >= 1.0) {
            full += 1;
            frac -= 1.0;
        }
        return {full, frac};
    }

    //! the same instant in integer nanoseconds (rounded to the nearest ns)
    std::int64_t air_time_ns(std::uint64_t n) const {
        const std::uint64_t samples = n * d_S;
        std::int64_t ns = static_cast<std::int64_t>(d_full) * 1'000'000'000 +
                          static_cast<std::int64_t>(std::llround(d_frac * 1e9));
        if (d_fs_int) {
            ns += static_cast<std::int64_t>(samples / d_fs_int) * 1'000'000'000;
            const std::uint64_t rem = samples % d_fs_int;  // < fs: rem * 1e9 fits for fs < 1.8e10
            ns += static_cast<std::int64_t>((rem * 1'000'000'000ull + d_fs_int / 2) / d_fs_int);
        } else {
            ns += static_cast<std::int64_t>(
                std::llround(static_cast<long double>(samples) / d_fs * 1e9L));
        }
        return ns;
    }

    //! slot duration in ns (rounded)
    std::int64_t slot_ns() const {
        return static_cast<std::int64_t>(std::llround(d_S / d_fs * 1e9));
    }

  private:
    std::uint64_t d_S;
    double d_fs;
    std::uint64_t d_fs_int = 0;
    std::uint64_t d_full = 0;
    double d_frac = 0.0;
};

}  // namespace oppsched
}  // namespace gr
