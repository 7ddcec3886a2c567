// channel_emulator_cc: the block over channel_emulator (see channel_emulator_cc.h).
#include "channel_emulator_cc_impl.h"

#include <gnuradio/io_signature.h>

#include <stdexcept>

namespace gr {
namespace oppsched {

channel_emulator_cc::sptr channel_emulator_cc::make(const channel_emulator_params& params) {
    params.validate();  // before the io signature needs the user count
    return gnuradio::make_block_sptr<channel_emulator_cc_impl>(params);
}

channel_emulator_cc_impl::channel_emulator_cc_impl(const channel_emulator_params& p)
    : gr::sync_block("channel_emulator", gr::io_signature::make(1, 1, sizeof(gr_complex)),
                     gr::io_signature::make(static_cast<int>(p.users.size()),
                                            static_cast<int>(p.users.size()), sizeof(gr_complex))),
      d_params(p),
      d_em(p),
      d_users(d_em.num_users()) {
    for (int u = 0; u < d_users; ++u) d_noise.push_back(d_em.noise_variance(u));
    d_out.resize(static_cast<size_t>(d_users));
    set_tag_propagation_policy(TPP_ALL_TO_ALL);
}

int channel_emulator_cc_impl::work(int noutput_items, gr_vector_const_void_star& input_items,
                                   gr_vector_void_star& output_items) {
    const auto* in = static_cast<const gr_complex*>(input_items[0]);
    for (int u = 0; u < d_users; ++u) d_out[u] = static_cast<gr_complex*>(output_items[u]);
    d_em.process(in, d_out.data(), static_cast<size_t>(noutput_items));
    d_samples += static_cast<std::uint64_t>(noutput_items);
    return noutput_items;
}

}  // namespace oppsched
}  // namespace gr
