#pragma once
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/slot_tx.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <vector>

#include "block_util.h"
#include "slot_messages.h"
#include "slot_time.h"

namespace gr {
namespace oppsched {

class slot_tx_impl final : public slot_tx {
  public:
    slot_tx_impl(const numerology& num, int lead_slots, double t0_s, bool continuous, bool realtime,
                 int max_pending);

    int work(int noutput_items, gr_vector_const_void_star& input_items,
             gr_vector_void_star& output_items) override;
    bool start() override;

    int slot_samples() const override { return d_num.slot_samples(); }
    double slot_duration() const override { return d_num.realised_slot_duration(); }
    std::uint64_t slots() const override { return d_slots; }
    std::uint64_t empty() const override { return d_empty; }
    std::uint64_t late() const override { return d_late; }
    std::uint64_t tb_sent() const override { return d_tb_sent; }
    std::uint64_t uplink_tb_sent() const override { return d_up_tb_sent; }
    std::uint64_t requests() const override { return d_requests; }
    std::uint64_t grants_received() const override { return d_grants; }
    std::uint64_t grants_late() const override { return d_grants_late; }
    std::uint64_t grants_duplicate() const override { return d_grants_dup; }
    std::uint64_t grants_malformed() const override { return d_grants_bad; }
    std::uint64_t grants_overflow() const override { return d_grants_overflow; }
    std::uint64_t overruns() const override { return d_overruns; }

  private:
    void handle_grant(const pmt::pmt_t& msg);
    void publish_request(std::uint64_t slot);
    // Fills d_slot_buf (and d_up_buf when `uplink_output`: the stations' side).
    void build_slot(std::uint64_t n, bool uplink_output);
    void wait_until_due(std::uint64_t n);

    numerology d_num;
    int d_lead;
    double d_t0_s;
    bool d_continuous, d_realtime;
    std::size_t d_max_pending;

    header_codec d_hdr;
    tb_encoder d_enc;
    ofdm_modulator d_mod;
    slot_clock d_clock;  // t0 + n T_slot, exact

    std::map<std::uint64_t, slot_msg::grant> d_pending;  // slot -> grant
    std::uint64_t d_next_slot = 0;                       // the slot to build next (= slots started)
    long d_uplink_user = -1;  // the slot being built: its station, -1 for a downlink slot
    bool d_started = false;   // at least one slot built (grants for <= d_next_slot-1 late)
    std::vector<gr_complex> d_slot_buf;
    std::vector<gr_complex> d_up_buf;  // output 1: uplink slots and the stations' sounding
    int d_slot_pos = 0;  // samples of the current slot already output; slot_samples = none open
    std::vector<gr_complex> d_hdr_re, d_pay_re;
    std::chrono::steady_clock::time_point d_rt_start;
    bool d_rt_started = false;
    bool d_initial_requests = false;

    log_limiter d_lim_bad, d_lim_late;
    std::atomic<std::uint64_t> d_slots{0}, d_empty{0}, d_late{0}, d_tb_sent{0}, d_up_tb_sent{0},
        d_requests{0}, d_grants{0}, d_grants_late{0}, d_grants_dup{0}, d_grants_bad{0},
        d_grants_overflow{0}, d_overruns{0};
};

}  // namespace oppsched
}  // namespace gr
