#pragma once
#include <gnuradio/oppsched/slot_gate.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace gr {
namespace oppsched {

class slot_gate_impl final : public slot_gate {
  public:
    explicit slot_gate_impl(int user);

    void forecast(int noutput_items, gr_vector_int& ninput_items_required) override;
    int general_work(int noutput_items, gr_vector_int& ninput_items,
                     gr_vector_const_void_star& input_items,
                     gr_vector_void_star& output_items) override;

    int user() const override { return d_user; }
    std::uint64_t slots_passed() const override { return d_passed; }
    std::uint64_t slots_dropped() const override { return d_dropped; }

  private:
    int d_user;
    bool d_pass = false;  // the current slot is ours (false before the first tag)
    std::uint64_t d_decided = ~std::uint64_t{0};  // offset of the last owner tag applied
    std::vector<gr::tag_t> d_tags;
    std::atomic<std::uint64_t> d_passed{0}, d_dropped{0};
};

}  // namespace oppsched
}  // namespace gr
