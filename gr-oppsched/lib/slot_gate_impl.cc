// slot_gate: one transmitter's slots of a slot_tx output (see
// include/gnuradio/oppsched/slot_gate.h).
#include "slot_gate_impl.h"

#include <gnuradio/io_signature.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gr {
namespace oppsched {

namespace {
const pmt::pmt_t k_uplink_user = pmt::mp("uplink_user");
}

slot_gate::sptr slot_gate::make(int user) {
    return gnuradio::make_block_sptr<slot_gate_impl>(user);
}

slot_gate_impl::slot_gate_impl(int user)
    : gr::block("slot_gate", gr::io_signature::make(1, 1, sizeof(gr_complex)),
                gr::io_signature::make(1, 1, sizeof(gr_complex))),
      d_user(user) {
    if (user < -1 || user > 65534)
        throw std::invalid_argument("slot_gate.user: " + std::to_string(user) +
                                    " not in [-1,65534] (-1: the AP's slots)");
    set_tag_propagation_policy(TPP_DONT);  // a passed slot's tags move to its output offsets
}

void slot_gate_impl::forecast(int noutput_items, gr_vector_int& ninput_items_required) {
    ninput_items_required[0] = noutput_items;
}

int slot_gate_impl::general_work(int noutput_items, gr_vector_int& ninput_items,
                                 gr_vector_const_void_star& input_items,
                                 gr_vector_void_star& output_items) {
    const auto* in = static_cast<const gr_complex*>(input_items[0]);
    auto* out = static_cast<gr_complex*>(output_items[0]);
    const std::uint64_t r0 = nitems_read(0);
    const int n = ninput_items[0];
    get_tags_in_range(d_tags, 0, r0, r0 + static_cast<std::uint64_t>(n));
    std::stable_sort(d_tags.begin(), d_tags.end(), tag_t::offset_compare);
    std::size_t t = 0;  // next tag
    int i = 0, produced = 0;
    while (i < n) {
        // The owner tags at position i decide the slot that starts there.
        for (std::size_t k = t; k < d_tags.size() && d_tags[k].offset == r0 + i; ++k) {
            if (!pmt::eqv(d_tags[k].key, k_uplink_user) || d_tags[k].offset == d_decided) continue;
            d_decided = d_tags[k].offset;  // decided once, though a full output may stop here
            const long owner =
                pmt::is_integer(d_tags[k].value) ? pmt::to_long(d_tags[k].value) : -2;
            d_pass = owner == d_user;
            ++(d_pass ? d_passed : d_dropped);
        }
        // the segment up to the next owner tag
        int end = n;
        for (std::size_t k = t; k < d_tags.size(); ++k)
            if (d_tags[k].offset > r0 + i && pmt::eqv(d_tags[k].key, k_uplink_user)) {
                end = static_cast<int>(d_tags[k].offset - r0);
                break;
            }
        if (d_pass) {
            const int room = noutput_items - produced;
            if (room == 0) break;
            end = std::min(end, i + room);
            std::memcpy(out + produced, in + i, sizeof(gr_complex) * (end - i));
            const std::uint64_t w0 = nitems_written(0) + static_cast<std::uint64_t>(produced);
            for (; t < d_tags.size() && d_tags[t].offset < r0 + end; ++t)
                if (d_tags[t].offset >= r0 + i)
                    add_item_tag(0, w0 + (d_tags[t].offset - r0 - i), d_tags[t].key,
                                 d_tags[t].value, d_tags[t].srcid);
            produced += end - i;
        } else {
            while (t < d_tags.size() && d_tags[t].offset < r0 + end) ++t;
        }
        i = end;
        while (t < d_tags.size() && d_tags[t].offset < r0 + i) ++t;
    }
    consume_each(i);
    return produced;
}

}  // namespace oppsched
}  // namespace gr
