#pragma once
#include <gnuradio/oppsched/rx_indication_sink.h>

#ifdef OPPSCHED_HAVE_ZMQ
#include <atomic>
#include <memory>
#include <zmq.hpp>

#include "block_util.h"

namespace gr {
namespace oppsched {

class rx_indication_sink_impl final : public rx_indication_sink {
  public:
    rx_indication_sink_impl(const std::string& endpoint, int hwm, bool report_effective_snr,
                            int reconnect_ms, int connect_wait_ms);

    bool start() override;
    bool stop() override;

    std::uint64_t sent() const override { return d_sent; }
    std::uint64_t dropped() const override { return d_dropped; }
    std::uint64_t malformed() const override { return d_malformed; }

  private:
    void handle_rx(const pmt::pmt_t& msg);

    std::string d_ep;
    int d_hwm, d_reconnect_ms, d_connect_wait_ms;
    bool d_effective;
    zmq::context_t d_ctx{1};
    std::unique_ptr<zmq::socket_t> d_push;
    std::uint32_t d_seq = 0;
    log_limiter d_lim;
    std::atomic<std::uint64_t> d_sent{0}, d_dropped{0}, d_malformed{0};
};

}  // namespace oppsched
}  // namespace gr
#endif
