// Cost of one enqueue + one dequeue per packet, for every AQM, with a standing queue of
// about 20 packets (50-packet limit, default parameters, measured service rate).
// Packets circulate through a pool (no allocation in the loop); the clock advances 100 us per
// packet so the periodic updates (REM/REAQM every 2 ms, PIE every 15 ms) run as they would.
// Figures: see the report of the aqm area (docs are the lead's to place).
#include <benchmark/benchmark.h>

#include <deque>

#include "../tests/test_aqm_packets.h"
#include "oppsched/aqm.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

// `acks`: every third packet is a pure ACK of one of 4 connections (exercises SPM-AF's filter).
void run(benchmark::State& state, aqm_kind kind, bool acks) {
    aqm_params c = default_config(kind);
    auto aqm = make_aqm(c);
    std::deque<ip_packet> free;
    aqm->set_drop_sink([&free](dropped_packet&& d) { free.push_back(std::move(d.packet)); });
    std::uint32_t ackno[4] = {1, 1, 1, 1};
    for (int i = 0; i < 64; ++i) {
        std::vector<std::uint8_t> data;
        if (acks && i % 3 == 2) {
            tcp_spec t;
            t.sport = 80;
            t.dport = static_cast<std::uint16_t>(6000 + i % 4);
            t.ack = 1;
            data = tcp_packet(t);
        } else {
            data = data_packet(1500, tcpip::kEct0, static_cast<std::uint16_t>(5000 + i % 8));
        }
        free.push_back(make_packet(std::move(data), static_cast<std::uint64_t>(i)));
    }
    time_ns now = 0;
    for (int i = 0; i < 20; ++i) {
        aqm->enqueue(std::move(free.front()), now);
        free.pop_front();
    }
    std::uint64_t n = 0;
    for (auto _ : state) {
        now += 100'000;
        ip_packet p = std::move(free.front());
        free.pop_front();
        if (acks && p.size() < 100) {  // advance the ACK number so that filtering applies
            const int f = static_cast<int>(p.data[23] - 0x70);  // dport low byte 0x70.. (6000+)
            ackno[f & 3] += 1448;
            put32(p.data, 28, ackno[f & 3]);
        }
        aqm->enqueue(std::move(p), now);
        if (auto out = aqm->dequeue(now)) free.push_back(std::move(*out));
        ++n;
    }
    state.SetItemsProcessed(static_cast<std::int64_t>(n));
    state.counters["queue"] = static_cast<double>(aqm->packets());
}

void BM_aqm(benchmark::State& state) {
    const auto kind = static_cast<aqm_kind>(state.range(0));
    state.SetLabel(std::string(to_string(kind)));
    run(state, kind, false);
}
BENCHMARK(BM_aqm)->DenseRange(0, static_cast<int>(kAqmKindCount) - 1);

void BM_aqm_with_acks(benchmark::State& state) {
    const auto kind = static_cast<aqm_kind>(state.range(0));
    state.SetLabel(std::string(to_string(kind)));
    run(state, kind, true);
}
BENCHMARK(BM_aqm_with_acks)
    ->Arg(static_cast<int>(aqm_kind::droptail))
    ->Arg(static_cast<int>(aqm_kind::spmaf))
    ->Arg(static_cast<int>(aqm_kind::las));

}  // namespace
