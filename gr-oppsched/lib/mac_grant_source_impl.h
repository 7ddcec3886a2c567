#pragma once
#include <gnuradio/oppsched/mac_grant_source.h>

#ifdef OPPSCHED_HAVE_ZMQ
#include <atomic>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "block_util.h"
#include "oppsched/wire.h"

namespace gr {
namespace oppsched {

class mac_grant_source_impl final : public mac_grant_source {
  public:
    mac_grant_source_impl(const std::string& requests_endpoint, const std::string& grants_endpoint,
                          int hwm, int reconnect_ms, int connect_wait_ms);
    ~mac_grant_source_impl() override;

    bool start() override;
    bool stop() override;

    std::uint64_t requests_sent() const override { return d_req_sent; }
    std::uint64_t requests_dropped() const override { return d_req_dropped; }
    std::uint64_t requests_malformed() const override { return d_req_bad; }
    std::uint64_t grants_received() const override { return d_grants; }
    std::uint64_t grants_malformed() const override { return d_grants_bad; }
    std::uint64_t grants_wrong_type() const override { return d_grants_type; }
    std::uint64_t grants_seq_lost() const override { return d_seq_lost; }

  private:
    void handle_request(const pmt::pmt_t& msg);
    void receive_loop();

    std::string d_req_ep, d_grant_ep;
    int d_hwm, d_reconnect_ms, d_connect_wait_ms;
    zmq::context_t d_ctx{1};
    std::unique_ptr<zmq::socket_t> d_push, d_pull;
    std::thread d_thread;
    std::atomic<bool> d_running{false};
    std::uint32_t d_seq = 0;
    ::oppsched::wire::seq_tracker d_tracker;
    log_limiter d_lim_req, d_lim_grant;

    std::atomic<std::uint64_t> d_req_sent{0}, d_req_dropped{0}, d_req_bad{0}, d_grants{0},
        d_grants_bad{0}, d_grants_type{0}, d_seq_lost{0};
};

}  // namespace oppsched
}  // namespace gr
#endif
