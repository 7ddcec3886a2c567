#pragma once
#include <gnuradio/oppsched/slot_receiver.h>
#include <gnuradio/oppsched/slot_rx.h>

#include <cstdint>
#include <mutex>
#include <vector>

namespace gr {
namespace oppsched {

class slot_rx_impl final : public slot_rx {
  public:
    slot_rx_impl(const numerology& num, int user_id, const slot_sync_params& sp,
                 const ofdm_demodulator_params& dp, int missed_slots, bool uplink,
                 bool own_slots_only);

    int work(int noutput_items, gr_vector_const_void_star& input_items,
             gr_vector_void_star& output_items) override;

    int user_id() const override { return d_rx.user_id(); }
    int slot_samples() const override { return d_rx.geometry().slot_samples(); }
    std::uint64_t slots_detected() const override { return stats().detected; }
    std::uint64_t slots_missed() const override { return stats().missed; }
    std::uint64_t headers_ok() const override { return stats().headers_ok; }
    std::uint64_t header_errors() const override { return stats().header_errors; }
    std::uint64_t addressed() const override { return stats().addressed; }
    std::uint64_t tb_ok() const override { return stats().tb_ok; }
    std::uint64_t tb_failed() const override { return stats().tb_failed; }
    double bler() const override {
        const auto s = stats();
        const double a = static_cast<double>(s.tb_ok + s.tb_failed);
        return a > 0 ? static_cast<double>(s.tb_failed) / a : 0.0;
    }
    std::uint64_t invalid() const override { return stats().invalid; }
    std::uint64_t truncated() const override { return stats().truncated; }
    std::uint64_t nonfinite() const override { return stats().nonfinite; }
    std::uint64_t decode_errors() const override { return stats().decode_errors; }
    std::uint64_t unnumbered() const override { return stats().unnumbered; }
    std::uint64_t other_direction() const override { return stats().other_direction; }
    std::uint64_t not_own() const override { return stats().not_own; }
    double last_snr_db() const override { return stats().last_snr_db; }
    double last_effective_snr_db() const override { return stats().last_effective_snr_db; }
    int last_cqi() const override { return stats().last_cqi; }

  private:
    //! A copy of the receiver's counters as of the last work() (read from other threads).
    slot_receiver_stats stats() const;
    void publish(std::vector<slot_msg::rx_report>& reports);

    slot_receiver d_rx;
    std::vector<slot_detection> d_found;
    std::vector<slot_msg::rx_report> d_reports;
    mutable std::mutex d_stats_mutex;
    slot_receiver_stats d_stats;  // guarded by d_stats_mutex
};

}  // namespace oppsched
}  // namespace gr
