#include <gnuradio/oppsched/harq_buffer.h>

#include <algorithm>
#include <cassert>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

harq_buffer::harq_buffer(std::size_t capacity) {
    if (capacity < 2)
        throw std::invalid_argument("harq_buffer.capacity: " + std::to_string(capacity) +
                                    " must be >= 2");
    d_llr.assign(capacity, 0.0f);
}

bool harq_buffer::begin(bool ndi, std::size_t mother_bits, std::uint32_t layout) {
    if (mother_bits == 0 || mother_bits > d_llr.size())
        throw std::invalid_argument("harq_buffer.mother_bits: " + std::to_string(mother_bits) +
                                    " not in [1," + std::to_string(d_llr.size()) + "]");
    ++d_stats.receptions;
    bool keep = d_receptions > 0;
    if (keep && ndi != d_ndi) {
        keep = false;
        ++d_stats.new_data_clears;
    } else if (keep && (mother_bits != d_mother || layout != d_layout)) {
        keep = false;
        ++d_stats.size_mismatch_clears;
    } else if (!keep) {
        ++d_stats.new_data_clears;
    }
    if (!keep) {
        std::fill(d_llr.begin(),
                  d_llr.begin() + static_cast<std::ptrdiff_t>(std::max(d_mother, mother_bits)),
                  0.0f);
        d_receptions = 0;
    } else {
        ++d_stats.combined_receptions;
    }
    d_ndi = ndi;
    d_mother = mother_bits;
    d_layout = layout;
    ++d_receptions;
    return keep;
}

void harq_buffer::accumulate(const std::uint32_t* idx, const float* llr, std::size_t n) {
    float* acc = d_llr.data();
    for (std::size_t i = 0; i < n; ++i) {
        assert(idx[i] < d_mother);
        acc[idx[i]] += llr[i];
    }
}

void harq_buffer::clear() {
    std::fill(d_llr.begin(), d_llr.end(), 0.0f);
    d_receptions = 0;
    d_mother = 0;
}

std::vector<float> harq_buffer::soft_bits() const {
    return std::vector<float>(d_llr.begin(), d_llr.begin() + static_cast<std::ptrdiff_t>(d_mother));
}

std::size_t harq_buffer::covered_bits() const {
    return static_cast<std::size_t>(
        std::count_if(d_llr.begin(), d_llr.begin() + static_cast<std::ptrdiff_t>(d_mother),
                      [](float v) { return v != 0.0f; }));
}

}  // namespace oppsched
}  // namespace gr
