#pragma once
#include <gnuradio/oppsched/harq_buffer.h>
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/numerology.h>
#include <gnuradio/oppsched/ofdm_demodulator.h>
#include <gnuradio/oppsched/slot_rx.h>
#include <gnuradio/oppsched/slot_sync.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "slot_messages.h"

namespace gr {
namespace oppsched {

class slot_rx_impl final : public slot_rx {
  public:
    static constexpr int harq_processes = 16;  // the header's 4-bit field

    slot_rx_impl(const numerology& num, int user_id, const slot_sync_params& sp,
                 const ofdm_demodulator_params& dp, int missed_slots);

    int work(int noutput_items, gr_vector_const_void_star& input_items,
             gr_vector_void_star& output_items) override;

    int user_id() const override { return d_user; }
    int slot_samples() const override { return d_S; }
    std::uint64_t slots_detected() const override { return d_detected; }
    std::uint64_t slots_missed() const override { return d_missed; }
    std::uint64_t headers_ok() const override { return d_headers_ok; }
    std::uint64_t header_errors() const override { return d_header_errors; }
    std::uint64_t addressed() const override { return d_addressed; }
    std::uint64_t tb_ok() const override { return d_tb_ok; }
    std::uint64_t tb_failed() const override { return d_tb_failed; }
    double bler() const override {
        const double a = static_cast<double>(d_tb_ok + d_tb_failed);
        return a > 0 ? static_cast<double>(d_tb_failed) / a : 0.0;
    }
    std::uint64_t invalid() const override { return d_invalid; }
    std::uint64_t truncated() const override { return d_truncated; }
    std::uint64_t nonfinite() const override { return d_nonfinite; }
    std::uint64_t decode_errors() const override { return d_decode_errors; }
    std::uint64_t unnumbered() const override { return d_unnumbered; }
    double last_snr_db() const override { return d_last_snr; }
    double last_effective_snr_db() const override { return d_last_esnr; }
    int last_cqi() const override { return d_last_cqi; }

  private:
    void process(const slot_detection& det);
    void report(const slot_msg::rx_report& r);
    void report_missed_until(std::uint64_t slot);  // missed reports for [next, slot)
    void check_missed(std::uint64_t stream_pos);
    std::uint64_t unwrap(std::uint32_t s) const;
    harq_buffer& harq(int pid);

    numerology d_num;
    int d_user;
    int d_S;
    int d_missed_limit;
    slot_sync d_sync;
    ofdm_demodulator d_demod;
    header_codec d_hdr;
    tb_decoder d_dec;
    std::array<std::unique_ptr<harq_buffer>, harq_processes> d_harq;
    std::vector<slot_detection> d_found;
    ofdm_demod_result d_res;
    std::vector<gr_complex> d_hdr_re;  // the decoded header re-encoded (header-aided chest)

    // slot numbering: the last slot seen (header or extrapolated) and where it started
    bool d_locked = false;
    std::uint64_t d_anchor_slot = 0, d_anchor_start = 0;
    std::uint64_t d_next_report = 0;  // first slot number not reported yet
    int d_missed_run = 0;             // consecutive missed reports since the last detection
    bool d_have_header = false;
    std::uint64_t d_last_header_slot = 0;

    std::atomic<std::uint64_t> d_detected{0}, d_missed{0}, d_headers_ok{0}, d_header_errors{0},
        d_addressed{0}, d_tb_ok{0}, d_tb_failed{0}, d_invalid{0}, d_truncated{0}, d_nonfinite{0},
        d_decode_errors{0}, d_unnumbered{0};
    std::atomic<double> d_last_snr{-30.0}, d_last_esnr{-30.0};
    std::atomic<int> d_last_cqi{0};
};

}  // namespace oppsched
}  // namespace gr
