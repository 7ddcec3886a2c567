// Cost of the client agent's per-event work (client_core.h), as oppsched-client does it:
//  - one rx_indication carrying a TB of two 1440-byte TCP segments of a CLAMP flow (HARQ
//    feedback, CQI, reassembly with its CRC, parse + client_agent update per packet);
//  - one outgoing ACK through the CLAMP rewrite (parse, flow lookup, window_tracker), and the
//    same with CLAMP off (the copy into the uplink_packet only);
//  - one uplink message through the uplink_delay (encode with CRC, delay line).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "oppsched/client_core.h"
#include "oppsched/pdu.h"
#include "oppsched/tcpip.h"
#include "oppsched/uplink_delay.h"
#include "oppsched/wire.h"
#include "tcp_test_packets.h"

using namespace oppsched;
using namespace oppsched::client;

namespace {

using test::byte_buffer;
using test::put32;

// IPv4 TCP segment; `down` = server 10.0.0.1:5201 -> client 10.1.0.2:40000.
byte_buffer segment(bool down, std::uint8_t flags, std::uint32_t seq, std::uint32_t ack,
                    std::uint16_t window, std::size_t payload, bool syn_options) {
    const test::conn c(4);
    const byte_buffer opt = syn_options ? test::conn::syn_options(1460, 7) : byte_buffer{};
    return down ? test::tcp_segment(4, c.server, c.client, flags, seq, ack, window, opt, payload)
                : test::tcp_segment(4, c.client, c.server, flags, seq, ack, window, opt, payload);
}

constexpr std::uint32_t kClientIsn = 1000, kServerIsn = 500000;

client_core_params params(bool clamp) {
    client_core_params p;
    p.clamp.enabled = clamp;
    return p;
}

byte_buffer pdu(std::uint32_t seq, std::uint16_t packet_seq, const std::vector<byte_buffer>& pkts,
                std::optional<float> price) {
    return test::pdu_bytes(0, seq, packet_seq, pkts, price);
}

// A core with the connection's handshake done and a price known.
std::unique_ptr<client_core> opened(bool clamp) {
    auto core = std::make_unique<client_core>(params(clamp));
    core->on_uplink_packet(0, segment(false, tcpip::kSyn, kClientIsn, 0, 64240, 0, true));
    wire::rx_indication ind;
    ind.header_ok = ind.addressed = ind.crc_ok = true;
    ind.tb =
        pdu(0, 0,
            {segment(true, tcpip::kSyn | tcpip::kAck, kServerIsn, kClientIsn + 1, 65160, 0, true)},
            0.001f);
    core->on_rx_indication(0, ind);
    return core;
}

void BM_client_rx_tb_two_segments_clamp(benchmark::State& state) {
    constexpr std::size_t kBatch = 4096;
    constexpr std::size_t kSeg = 1440;
    std::vector<wire::rx_indication> inds;
    auto build = [&](std::uint32_t first_pdu, std::uint16_t first_pkt, std::uint32_t first_off) {
        inds.clear();
        for (std::size_t i = 0; i < kBatch; ++i) {
            std::vector<byte_buffer> pk;
            for (int j = 0; j < 2; ++j) {
                const std::uint32_t off =
                    first_off + static_cast<std::uint32_t>((2 * i + j) * kSeg);
                pk.push_back(segment(true, tcpip::kAck | tcpip::kPsh, kServerIsn + 1 + off,
                                     kClientIsn + 1, 502, kSeg, false));
            }
            wire::rx_indication ind;
            ind.slot = first_pdu + i;
            ind.header_ok = ind.addressed = ind.crc_ok = true;
            ind.snr_db = 10.0f;
            ind.tb = pdu(first_pdu + static_cast<std::uint32_t>(i),
                         static_cast<std::uint16_t>(first_pkt + 2 * i), pk, 0.001f);
            inds.push_back(std::move(ind));
        }
    };
    auto core = opened(true);
    build(1, 1, 0);
    std::size_t i = 0;
    time_ns now = kNsPerMs;
    for (auto _ : state) {
        if (i == kBatch) {
            state.PauseTiming();
            core = opened(true);
            build(1, 1, 0);
            i = 0;
            state.ResumeTiming();
        }
        auto out = core->on_rx_indication(now, inds[i++]);
        benchmark::DoNotOptimize(out.delivered.data());
        now += 3 * kNsPerMs;
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * 2 * (kSeg + 40)));
}
BENCHMARK(BM_client_rx_tb_two_segments_clamp);

void run_ack(benchmark::State& state, bool clamp) {
    auto core = opened(clamp);
    byte_buffer ack = segment(false, tcpip::kAck, kClientIsn + 1, kServerIsn + 1, 500, 0, false);
    std::uint32_t acked = 0;
    time_ns now = kNsPerMs;
    for (auto _ : state) {
        acked += 2880;
        put32(ack, 28, kServerIsn + 1 + acked);  // ACKs advance (checksum not checked)
        auto out = core->on_uplink_packet(now, ack);
        benchmark::DoNotOptimize(out.data());
        now += kNsPerMs;
    }
    state.SetItemsProcessed(state.iterations());
    state.counters["rewritten"] = static_cast<double>(core->stats().clamp_acks_rewritten);
    core->take_window_records();
}
void BM_client_ack_clamp_rewrite(benchmark::State& state) { run_ack(state, true); }
void BM_client_ack_clamp_off(benchmark::State& state) { run_ack(state, false); }
BENCHMARK(BM_client_ack_clamp_rewrite);
BENCHMARK(BM_client_ack_clamp_off);

void BM_client_uplink_delay_feedback(benchmark::State& state) {
    uplink_delay d(uplink_delay_params{kNsPerMs, 4u << 20});
    time_ns now = 0;
    const wire::message m = wire::harq_feedback{0, 0, 1, true};
    for (auto _ : state) {
        d.enqueue(now, m);
        now += 100'000;
        auto f = d.pop_due(now);
        benchmark::DoNotOptimize(f.data());
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_client_uplink_delay_feedback);

}  // namespace
