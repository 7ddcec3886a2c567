// mac_grant_source: ZeroMQ bridge slot_tx <-> oppsched-apd (see mac_grant_source.h).
#include "mac_grant_source_impl.h"

#include <gnuradio/io_signature.h>

#include <stdexcept>

#ifdef OPPSCHED_HAVE_ZMQ
#include "slot_messages.h"
#include "zmq_util.h"
#endif

namespace gr {
namespace oppsched {

bool zmq_bridges_available() {
#ifdef OPPSCHED_HAVE_ZMQ
    return true;
#else
    return false;
#endif
}

#ifndef OPPSCHED_HAVE_ZMQ
mac_grant_source::sptr mac_grant_source::make(const std::string&, const std::string&, int, int,
                                              int) {
    throw std::runtime_error(
        "mac_grant_source: gnuradio-oppsched was built without ZeroMQ (OPPSCHED_HAVE_ZMQ)");
}
#else

namespace {
const pmt::pmt_t k_request_port = pmt::mp("request");
const pmt::pmt_t k_grant_port = pmt::mp("grant");
namespace wire = ::oppsched::wire;
}  // namespace

mac_grant_source::sptr mac_grant_source::make(const std::string& requests_endpoint,
                                              const std::string& grants_endpoint, int hwm,
                                              int reconnect_ms, int connect_wait_ms) {
    zmq_util::check_endpoint("mac_grant_source.requests_endpoint", requests_endpoint);
    zmq_util::check_endpoint("mac_grant_source.grants_endpoint", grants_endpoint);
    zmq_util::check_positive("mac_grant_source.hwm", hwm);
    zmq_util::check_positive("mac_grant_source.reconnect_ms", reconnect_ms);
    if (connect_wait_ms < 0)
        throw std::invalid_argument("mac_grant_source.connect_wait_ms: " +
                                    std::to_string(connect_wait_ms) + " must be >= 0");
    return gnuradio::make_block_sptr<mac_grant_source_impl>(requests_endpoint, grants_endpoint, hwm,
                                                            reconnect_ms, connect_wait_ms);
}

mac_grant_source_impl::mac_grant_source_impl(const std::string& requests_endpoint,
                                             const std::string& grants_endpoint, int hwm,
                                             int reconnect_ms, int connect_wait_ms)
    : gr::block("mac_grant_source", gr::io_signature::make(0, 0, 0),
                gr::io_signature::make(0, 0, 0)),
      d_req_ep(requests_endpoint),
      d_grant_ep(grants_endpoint),
      d_hwm(hwm),
      d_reconnect_ms(reconnect_ms),
      d_connect_wait_ms(connect_wait_ms) {
    message_port_register_in(k_request_port);
    set_msg_handler(k_request_port, [this](const pmt::pmt_t& m) { handle_request(m); });
    message_port_register_out(k_grant_port);
}

mac_grant_source_impl::~mac_grant_source_impl() { stop(); }

bool mac_grant_source_impl::start() {
    // Connect at start: a ZeroMQ connect never waits for the peer, so the daemon may come
    // up later (requests meanwhile are dropped and counted).
    d_push = std::make_unique<zmq::socket_t>(zmq_util::make_push(d_ctx, d_hwm, d_reconnect_ms));
    d_pull = std::make_unique<zmq::socket_t>(zmq_util::make_pull(d_ctx, d_hwm, d_reconnect_ms));
    // Wait (bounded) until the daemon is there, so the first requests are not dropped.
    if (!zmq_util::connect_and_wait({d_push.get(), d_pull.get()}, {d_req_ep, d_grant_ep},
                                    d_connect_wait_ms) &&
        d_connect_wait_ms > 0)
        d_logger->warn("AP daemon not connected after {} ms; requests are dropped until it is",
                       d_connect_wait_ms);
    d_running = true;
    d_thread = std::thread([this] { receive_loop(); });
    return block::start();
}

bool mac_grant_source_impl::stop() {
    d_running = false;
    if (d_thread.joinable()) d_thread.join();
    d_pull.reset();
    d_push.reset();
    return block::stop();
}

void mac_grant_source_impl::handle_request(const pmt::pmt_t& msg) {
    auto r = slot_msg::request_from_pmt(msg);
    if (!r) {
        ++d_req_bad;
        if (d_lim_req.allow()) d_logger->warn("malformed request dropped ({})", r.error());
        return;
    }
    if (!d_push) {  // not started (a message posted before start)
        ++d_req_dropped;
        return;
    }
    wire::slot_request req;
    req.slot = r->slot;
    req.air_time_ns = r->air_time_ns;
    bool ok = false;
    try {
        ok = zmq_util::try_send(*d_push, wire::encode(req, d_seq));
    } catch (const zmq::error_t&) {
        ok = false;
    }
    ++d_seq;  // per socket; a dropped request leaves a gap the daemon counts
    if (ok)
        ++d_req_sent;
    else
        ++d_req_dropped;
}

void mac_grant_source_impl::receive_loop() {
    zmq::pollitem_t item{static_cast<void*>(*d_pull), 0, ZMQ_POLLIN, 0};
    while (d_running) {
        try {
            if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) <= 0) continue;
            zmq::message_t m;
            while (d_running && d_pull->recv(m, zmq::recv_flags::dontwait)) {
                auto f = wire::decode(static_cast<const std::uint8_t*>(m.data()), m.size());
                if (!f) {
                    ++d_grants_bad;
                    if (d_lim_grant.allow())
                        d_logger->warn("undecodable grant frame dropped ({})", f.error());
                    continue;
                }
                const auto* g = std::get_if<wire::slot_grant>(&f->msg);
                if (!g) {
                    ++d_grants_type;
                    if (d_lim_grant.allow())
                        d_logger->warn("{} frame on phy_grants dropped",
                                       wire::to_string(wire::type_of(f->msg)));
                    continue;
                }
                d_seq_lost += d_tracker.on_receive(f->seq);
                slot_msg::grant pg;
                pg.slot = g->slot;
                pg.empty = g->empty || g->tb.empty();
                pg.uplink = !pg.empty && g->uplink;
                pg.user = g->user;
                pg.mcs = g->mcs;
                pg.harq_pid = g->harq_pid;
                pg.ndi = g->ndi != 0;
                pg.rv = g->rv;
                if (!pg.empty) pg.tb = g->tb;
                ++d_grants;
                message_port_pub(k_grant_port, slot_msg::to_pmt(pg));
            }
        } catch (const zmq::error_t& e) {
            if (d_lim_grant.allow()) d_logger->warn("phy_grants: {}", e.what());
        }
    }
}

#endif

}  // namespace oppsched
}  // namespace gr
