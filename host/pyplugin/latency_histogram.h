#pragma once
// The durations of a plugin's calls, kept as a histogram so that a run reports their median,
// 99th percentile and maximum (scheduler.plugin_decision_p50_ns etc. in summary.json; the
// Speed targets of docs/extending.md are a median and a p99, which a total cannot give).
// Bins are 100 ns wide up to 100 us and 10 us wide up to 10 ms; longer calls share the last
// bin, and the maximum is kept exactly. A quantile is the upper edge of its bin: at most
// 100 ns (10 us above 100 us) above the true value, never below it. No allocation after
// construction; not thread-safe (one per policy, called on its thread).
#include <algorithm>
#include <array>
#include <cstdint>

namespace oppsched::pyplugin {

class latency_histogram {
  public:
    static constexpr std::uint64_t kFineNs = 100, kFineEndNs = 100'000;            // 1000 bins
    static constexpr std::uint64_t kCoarseNs = 10'000, kCoarseEndNs = 10'000'000;  // 990
    static constexpr std::size_t kFine = kFineEndNs / kFineNs;
    static constexpr std::size_t kBins = kFine + (kCoarseEndNs - kFineEndNs) / kCoarseNs + 1;

    void add(std::uint64_t ns) {
        ++bins_[bin_of(ns)];
        ++count_;
        max_ = std::max(max_, ns);
    }

    std::uint64_t count() const { return count_; }
    std::uint64_t max_ns() const { return max_; }

    // The q-quantile (0 < q <= 1) as the upper edge of the bin holding the ceil(q * count)-th
    // smallest call, capped at max_ns(); 0 with no calls.
    std::uint64_t quantile_ns(double q) const {
        if (count_ == 0) return 0;
        const double want = q * static_cast<double>(count_);
        auto rank = static_cast<std::uint64_t>(want);
        if (static_cast<double>(rank) < want) ++rank;
        rank = std::clamp<std::uint64_t>(rank, 1, count_);
        std::uint64_t seen = 0;
        for (std::size_t i = 0; i < kBins; ++i) {
            seen += bins_[i];
            if (seen >= rank) return std::min(upper_edge(i), max_);
        }
        return max_;
    }

  private:
    static std::size_t bin_of(std::uint64_t ns) {
        if (ns < kFineEndNs) return static_cast<std::size_t>(ns / kFineNs);
        if (ns < kCoarseEndNs)
            return kFine + static_cast<std::size_t>((ns - kFineEndNs) / kCoarseNs);
        return kBins - 1;
    }
    static std::uint64_t upper_edge(std::size_t i) {
        if (i < kFine) return (i + 1) * kFineNs;
        if (i < kBins - 1) return kFineEndNs + (i - kFine + 1) * kCoarseNs;
        return UINT64_MAX;  // the overflow bin: max_ caps it
    }

    std::array<std::uint32_t, kBins> bins_{};
    std::uint64_t count_ = 0, max_ = 0;
};

}  // namespace oppsched::pyplugin
