// Fuzz target: tcpip::parse and the ACK-window rewriting of the client (host/lib/tcpip.cc's
// window_tracker, clamp_rewriter.cc's CLAMP rewriter: Andrew & Hanly, CLAMP, eq. 17). The
// input is a sequence of packets: segments of two TCP connections (IPv4 or IPv6) built with
// the tests' independent builder, with handshake options, windows, scales (> 14 included)
// and payloads the input picks, then bytes flipped where it says; or raw bytes. Checksums are
// recomputed when asked, so mutated packets reach the trackers with valid checksums. Each
// packet goes downlink (clamp_rewriter::on_downlink) or uplink (window_tracker::rewrite with
// a window the input picks, and clamp_rewriter::on_uplink with a price). Invariants: parse
// never throws and its lengths stay inside the packet; a rewrite changes the window and
// checksum fields only, keeps a valid IPv4 header checksum and TCP checksum valid, never
// advertises less than asked (rounded up to the scale) and leaves a packet that parses the
// same; both tables stay within max_flows.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/byte_order.h"
#include "oppsched/clamp_rewriter.h"
#include "oppsched/client_core.h"
#include "oppsched/tcpip.h"
#include "tcp_test_packets.h"

using namespace oppsched;
using oppsched::fuzz::input_reader;
using test::byte_buffer;

namespace {

constexpr std::size_t kMaxFlows = 3;  // small, so eviction is exercised

struct checksums {
    bool ip_ok = true, tcp_ok = false;
};

checksums check(const byte_buffer& p, const tcpip::packet_info& i) {
    checksums c;
    if (i.ip_version == 4)
        c.ip_ok = tcpip::ipv4_header_checksum(p.data(), i.ip_header_len) == load_be16(&p[10]);
    if (i.tcp && !i.is_fragment) c.tcp_ok = tcpip::tcp_checksum(p.data(), i) == i.tcp->checksum;
    return c;
}

void fix_checksums(byte_buffer& p) {
    const auto r = tcpip::parse(p);
    if (!r.ok()) return;
    if (r->ip_version == 4 && r->ip_header_len <= p.size())
        store_be16(&p[10], tcpip::ipv4_header_checksum(p.data(), r->ip_header_len));
    if (r->tcp && !r->is_fragment)
        store_be16(&p[r->tcp->offset + 16], tcpip::tcp_checksum(p.data(), r.value()));
}

byte_buffer build(input_reader& in, const test::conn (&conns)[2]) {
    const std::uint8_t kind = in.u8();
    test::conn c = conns[kind & 1u];
    if (kind & 0x80u) c.ws_client = in.u8() % 20;  // scales above 14 included
    if (kind & 0x40u) c.ws_server = in.u8() % 20;
    if ((kind & 0x20u) && (kind & 0x40u)) c.ws_server.reset();
    switch ((kind >> 1) % 8) {
        case 0:
            return c.client_syn();
        case 1:
            return c.server_synack();
        case 2:
            return c.server_syn();
        case 3:
            return c.client_synack();
        case 4:
            return c.server_rst();
        case 5: {
            const std::uint32_t offset = in.u32();  // own statements: arguments are unsequenced
            return c.server_data(offset, in.u16() % 1500);
        }
        default: {
            const std::uint32_t acked = in.u32();
            const std::uint16_t window = in.u16();
            return c.client_ack(acked, window, in.u8() % 64);
        }
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    input_reader in(data, size);
    static const test::conn conns_v4[2] = {test::conn(4), test::conn(4, 40001)};
    static const test::conn conns_v6[2] = {test::conn(6), test::conn(6, 40001)};

    tcpip::window_tracker_params tp;
    tp.max_flows = kMaxFlows;
    tcpip::window_tracker tracker(tp);
    client::client_core_stats stats;
    client::clamp_rewriter_params cp;
    cp.enabled = true;
    cp.max_flows = kMaxFlows;
    cp.flow_idle_timeout = 5 * kNsPerSec;
    client::clamp_rewriter clamp(cp, stats);
    time_ns now = 0;

    for (int n = 0; n < 64 && !in.empty(); ++n) {
        const std::uint8_t op = in.u8();
        byte_buffer p;
        if (op & 1u) {
            p = in.bytes(in.u16() % 1600);
        } else {
            p = build(in, (op & 2u) ? conns_v6 : conns_v4);
            for (int flips = in.u8() % 4; flips > 0 && !p.empty(); --flips) {
                const std::size_t at = in.u16() % p.size();
                p[at] ^= in.u8();
            }
        }
        if (op & 4u) fix_checksums(p);
        now += time_ns{in.u16()} * kNsPerMs / 10;

        const expected<tcpip::packet_info> r = tcpip::parse(p);
        if (!r.ok()) {
            FUZZ_CHECK(r.error().find(": ") != std::string::npos, r.error().c_str());
            continue;
        }
        const tcpip::packet_info& i = r.value();
        FUZZ_CHECK(i.ip_header_len <= i.total_len && i.total_len <= p.size(),
                   "the IP lengths lie inside the packet");
        if (i.tcp)
            FUZZ_CHECK(i.tcp->offset + i.tcp->header_len + i.tcp->payload_len <= i.total_len,
                       "the TCP segment lies inside the IP packet");
        const checksums before = check(p, i);
        std::optional<float> price;
        if (op & 8u) price = static_cast<float>(in.u8()) * 1e-3f;

        if (op & 16u) {  // downlink: toward the client
            byte_buffer copy = p;
            tracker.learn(i, now);
            clamp.on_downlink(now, copy, price);
            FUZZ_CHECK(copy == p, "a downlink packet is never modified");
        } else {  // uplink: its ACK window rewritten
            const std::uint64_t window = in.u32();
            byte_buffer q = p;
            const tcpip::rewrite_outcome out = tracker.rewrite(q.data(), q.size(), i, window, now);
            byte_buffer q2 = p;
            clamp.on_uplink(now, q2, price);
            for (const byte_buffer* w : {&q, &q2}) {
                if (*w == p) continue;
                FUZZ_CHECK(i.tcp.has_value(), "only TCP segments are rewritten");
                const std::size_t t = i.tcp->offset;
                byte_buffer a = *w, b = p;
                for (std::size_t k = t + 14; k < t + 18; ++k) a[k] = b[k] = 0;
                FUZZ_CHECK(a == b, "a rewrite changes the window and checksum fields only");
                const auto again = tcpip::parse(*w);
                FUZZ_CHECK(again.ok() && again->total_len == i.total_len && again->tcp &&
                               again->tcp->seq == i.tcp->seq && again->tcp->ack == i.tcp->ack &&
                               again->tcp->flags == i.tcp->flags,
                           "a rewritten packet parses the same");
                const checksums after = check(*w, again.value());
                FUZZ_CHECK(after.ip_ok == before.ip_ok, "the IPv4 header checksum is kept");
                FUZZ_CHECK(after.tcp_ok == before.tcp_ok, "a valid TCP checksum stays valid");
            }
            if (out == tcpip::rewrite_outcome::rewritten) {
                const auto shift = tracker.shift(i.flow);
                FUZZ_CHECK(shift.has_value(), "a rewritten flow has a known scale");
                const std::uint16_t field = load_be16(&q[i.tcp->offset + 14]);
                FUZZ_CHECK(field >= tcpip::window_field_for(window, *shift),
                           "the window advertised is at least the one asked for");
            } else {
                FUZZ_CHECK(q == p, "a packet not rewritten is unchanged");
            }
        }
        FUZZ_CHECK(tracker.size() <= kMaxFlows, "the window tracker holds at most max_flows");
        FUZZ_CHECK(clamp.flows() <= kMaxFlows, "the CLAMP table holds at most max_flows");
        if (n % 8 == 7) (void)clamp.take_records();
    }
    return 0;
}
