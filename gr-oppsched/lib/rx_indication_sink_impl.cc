// rx_indication_sink: slot_rx dicts -> wire rx_indication -> client agent (see
// rx_indication_sink.h).
#include "rx_indication_sink_impl.h"

#include <gnuradio/io_signature.h>

#include <algorithm>
#include <stdexcept>

#ifdef OPPSCHED_HAVE_ZMQ
#include "oppsched/wire.h"
#include "slot_messages.h"
#include "zmq_util.h"
#endif

namespace gr {
namespace oppsched {

#ifndef OPPSCHED_HAVE_ZMQ
rx_indication_sink::sptr rx_indication_sink::make(const std::string&, int, bool, int, int) {
    throw std::runtime_error(
        "rx_indication_sink: gnuradio-oppsched was built without ZeroMQ (OPPSCHED_HAVE_ZMQ)");
}
#else

namespace {
const pmt::pmt_t k_rx_port = pmt::mp("rx");
namespace wire = ::oppsched::wire;
}  // namespace

rx_indication_sink::sptr rx_indication_sink::make(const std::string& endpoint, int hwm,
                                                  bool report_effective_snr, int reconnect_ms,
                                                  int connect_wait_ms) {
    zmq_util::check_endpoint("rx_indication_sink.endpoint", endpoint);
    zmq_util::check_positive("rx_indication_sink.hwm", hwm);
    zmq_util::check_positive("rx_indication_sink.reconnect_ms", reconnect_ms);
    if (connect_wait_ms < 0)
        throw std::invalid_argument("rx_indication_sink.connect_wait_ms: " +
                                    std::to_string(connect_wait_ms) + " must be >= 0");
    return gnuradio::make_block_sptr<rx_indication_sink_impl>(endpoint, hwm, report_effective_snr,
                                                              reconnect_ms, connect_wait_ms);
}

rx_indication_sink_impl::rx_indication_sink_impl(const std::string& endpoint, int hwm,
                                                 bool report_effective_snr, int reconnect_ms,
                                                 int connect_wait_ms)
    : gr::block("rx_indication_sink", gr::io_signature::make(0, 0, 0),
                gr::io_signature::make(0, 0, 0)),
      d_ep(endpoint),
      d_hwm(hwm),
      d_reconnect_ms(reconnect_ms),
      d_connect_wait_ms(connect_wait_ms),
      d_effective(report_effective_snr) {
    message_port_register_in(k_rx_port);
    set_msg_handler(k_rx_port, [this](const pmt::pmt_t& m) { handle_rx(m); });
}

bool rx_indication_sink_impl::start() {
    d_push = std::make_unique<zmq::socket_t>(zmq_util::make_push(d_ctx, d_hwm, d_reconnect_ms));
    // Wait (bounded) until the client is there, so the first indications are not dropped.
    if (!zmq_util::connect_and_wait({d_push.get()}, {d_ep}, d_connect_wait_ms) &&
        d_connect_wait_ms > 0)
        d_logger->warn("client not connected after {} ms; indications are dropped until it is",
                       d_connect_wait_ms);
    return block::start();
}

bool rx_indication_sink_impl::stop() {
    d_push.reset();
    return block::stop();
}

void rx_indication_sink_impl::handle_rx(const pmt::pmt_t& msg) {
    auto r = slot_msg::rx_from_pmt(msg);
    if (!r) {
        ++d_malformed;
        if (d_lim.allow()) d_logger->warn("malformed rx report dropped ({})", r.error());
        return;
    }
    auto ind = slot_msg::to_rx_indication(r.value(), d_effective);
    if (!ind) {
        ++d_malformed;
        if (d_lim.allow()) d_logger->warn("rx report not representable ({})", ind.error());
        return;
    }
    std::vector<std::uint8_t> frame;
    try {
        frame = wire::encode(ind.value(), d_seq);
    } catch (const std::exception& e) {  // a TB longer than the u16 length field
        ++d_malformed;
        if (d_lim.allow()) d_logger->warn("rx report not encodable ({})", e.what());
        return;
    }
    bool ok = false;
    if (d_push) {
        try {
            ok = zmq_util::try_send(*d_push, frame);
        } catch (const zmq::error_t&) {
            ok = false;
        }
    }
    ++d_seq;
    if (ok)
        ++d_sent;
    else
        ++d_dropped;
}

#endif

}  // namespace oppsched
}  // namespace gr
