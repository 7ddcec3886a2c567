#pragma once
#include <gnuradio/oppsched/channel_emulator_cc.h>

#include <atomic>
#include <vector>

namespace gr {
namespace oppsched {

class channel_emulator_cc_impl final : public channel_emulator_cc {
  public:
    explicit channel_emulator_cc_impl(const channel_emulator_params& p);

    int work(int noutput_items, gr_vector_const_void_star& input_items,
             gr_vector_void_star& output_items) override;

    int num_users() const override { return d_users; }
    std::uint64_t samples() const override { return d_samples; }
    double noise_variance(int u) const override { return d_noise.at(static_cast<size_t>(u)); }
    channel_emulator_params params() const override { return d_params; }

  private:
    channel_emulator_params d_params;
    channel_emulator d_em;
    int d_users;
    std::vector<double> d_noise;
    std::vector<gr_complex*> d_out;
    std::atomic<std::uint64_t> d_samples{0};
};

}  // namespace oppsched
}  // namespace gr
