// slot_rx: one client's receiver (see include/gnuradio/oppsched/slot_rx.h). The block is a
// thin wrapper over slot_receiver: it feeds the stream in and publishes the reports.
#include "slot_rx_impl.h"

#include <gnuradio/io_signature.h>

#include "block_util.h"
#include "slot_messages.h"

namespace gr {
namespace oppsched {

namespace {
const pmt::pmt_t k_reports_port = pmt::mp("rx");
const pmt::pmt_t k_symbols_port = pmt::mp("symbols");
const pmt::pmt_t k_slot = pmt::mp("slot");
const pmt::pmt_t k_mcs = pmt::mp("mcs");
}  // namespace

slot_rx::sptr slot_rx::make(const std::string& profile, double sample_rate, int user_id,
                            double detection_threshold, double ltf_threshold, int missed_slots,
                            double noise_ema, double slot_duration_s, const std::string& fec,
                            bool uplink, bool own_slots_only) {
    const numerology num = block_numerology(profile, sample_rate, slot_duration_s, fec);
    slot_sync_params sp;
    sp.detection_threshold = static_cast<float>(detection_threshold);
    sp.ltf_threshold = static_cast<float>(ltf_threshold);
    sp.validate(num);
    ofdm_demodulator_params dp;
    dp.snr.noise_ema = noise_ema;
    dp.validate();
    return gnuradio::make_block_sptr<slot_rx_impl>(num, user_id, sp, dp, missed_slots, uplink,
                                                   own_slots_only);
}

slot_rx_impl::slot_rx_impl(const numerology& num, int user_id, const slot_sync_params& sp,
                           const ofdm_demodulator_params& dp, int missed_slots, bool uplink,
                           bool own_slots_only)
    : gr::sync_block("slot_rx", gr::io_signature::make(1, 1, sizeof(gr_complex)),
                     gr::io_signature::make(0, 0, 0)),
      d_rx(num, user_id, sp, dp, missed_slots, uplink, own_slots_only) {
    message_port_register_out(k_reports_port);
    message_port_register_out(k_symbols_port);
}

slot_receiver_stats slot_rx_impl::stats() const {
    std::lock_guard<std::mutex> lock(d_stats_mutex);
    return d_stats;
}

void slot_rx_impl::publish(std::vector<slot_msg::rx_report>& reports) {
    for (const auto& r : reports) message_port_pub(k_reports_port, slot_msg::to_pmt(r));
    reports.clear();
}

int slot_rx_impl::work(int noutput_items, gr_vector_const_void_star& input_items,
                       gr_vector_void_star&) {
    const auto* in = static_cast<const gr_complex*>(input_items[0]);
    d_found.clear();
    d_rx.detect(in, static_cast<size_t>(noutput_items), d_found);
    const bool symbols_wanted = !pmt::is_null(message_subscribers(k_symbols_port));
    for (const auto& det : d_found) {
        const slot_reception& rec = d_rx.receive(det, d_reports);
        if (rec.payload_decoded && symbols_wanted) {
            const auto& payload = d_rx.payload();
            pmt::pmt_t meta = pmt::make_dict();
            meta = pmt::dict_add(meta, k_slot, pmt::from_uint64(rec.report.slot));
            meta = pmt::dict_add(meta, k_mcs, pmt::from_long(rec.report.mcs));
            message_port_pub(k_symbols_port,
                             pmt::cons(meta, pmt::init_c32vector(payload.size(), payload.data())));
        }
        publish(d_reports);
    }
    d_found.clear();
    d_rx.report_missed(d_reports);
    publish(d_reports);
    std::lock_guard<std::mutex> lock(d_stats_mutex);
    d_stats = d_rx.stats();
    return noutput_items;
}

}  // namespace oppsched
}  // namespace gr
