// Cost of the AP MAC's per-event work (ap_core.h), as oppsched-apd does it:
//  - one slot_request with U backlogged users (scheduler over U users, HARQ scans, the TB
//    built by segmentation with its CRC, the CLAMP price, the slot trace row), followed by
//    the ACK of that TB and enough 1440-byte packets to keep every queue backlogged;
//  - one downlink packet (classification, CLAMP router EMA, RED enqueue).
// Budget: a slot is 1.667 ms (EV-DO) or 3 ms (CLAMP); the apd answers a request at once.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "oppsched/ap_core.h"

using namespace oppsched;

namespace {

std::vector<std::uint8_t> ipv4_to(std::uint32_t user, std::size_t size) {
    std::vector<std::uint8_t> p(size, 0x5a);
    p[0] = 0x45;
    p[2] = static_cast<std::uint8_t>(size >> 8);
    p[3] = static_cast<std::uint8_t>(size);
    p[8] = 64;
    p[9] = 17;
    p[16] = 10, p[17] = 1, p[18] = static_cast<std::uint8_t>(user >> 8),
    p[19] = static_cast<std::uint8_t>(user);
    return p;
}

ap::ap_core_params params(int users) {
    ap::ap_core_params p;
    for (int u = 0; u < users; ++u) {
        ap::ap_user_params up;
        up.name = "ue" + std::to_string(u);
        up.addresses = {"10.1." + std::to_string(u >> 8) + "." + std::to_string(u & 0xff)};
        p.users.push_back(up);
    }
    p.table = ap::shannon_table({});
    p.slot_s = 3e-3;
    p.aqm = aqm::default_config(aqm::aqm_kind::red);
    p.aqm.limits = {0, 1000};
    p.clamp.enabled = true;
    p.harq.feedback_delay_slots = 1;
    p.record_slots = true;
    return p;
}

void BM_ap_slot(benchmark::State& state) {
    const int users = static_cast<int>(state.range(0));
    ap::ap_core ap(params(users));
    for (int u = 0; u < users; ++u) {
        ap.on_cqi(static_cast<std::uint32_t>(u), 0, 3.0 + u % 4, 0);
        for (int i = 0; i < 20; ++i)
            ap.on_downlink_packet(0, ipv4_to(static_cast<std::uint32_t>(u), 1440));
    }
    std::uint64_t slot = 0;
    time_ns now = 0;
    std::size_t bytes = 0;
    for (auto _ : state) {
        const auto g = ap.on_slot_request(now, slot, now);
        if (!g.empty) {
            ap.on_harq_feedback(g.user, slot, g.harq_pid, true);
            bytes += g.tb.size();
            // Keep the served queue backlogged (not timed separately: see BM_ap_downlink).
            while (ap.queued_bytes(g.user) < 20 * 1440)
                ap.on_downlink_packet(now, ipv4_to(g.user, 1440));
        }
        benchmark::DoNotOptimize(ap.take_slot_rows());
        ++slot;
        now += 3 * kNsPerMs;
    }
    state.SetItemsProcessed(state.iterations());
    state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_ap_slot)->Arg(4)->Arg(16)->Arg(64);

void BM_ap_downlink(benchmark::State& state) {
    ap::ap_core ap(params(4));
    const auto pkt = ipv4_to(1, 1440);
    std::uint64_t slot = 0;
    time_ns now = 0;
    for (auto _ : state) {
        ap.on_downlink_packet(now, pkt);
        now += 100'000;
        if (ap.queued_bytes(1) > 500 * 1440) {  // drain outside the timing
            state.PauseTiming();
            while (ap.queued_bytes(1) > 100 * 1440) {
                const auto g = ap.on_slot_request(now, slot, now);
                if (!g.empty) ap.on_harq_feedback(g.user, slot, g.harq_pid, true);
                ++slot;
            }
            ap.take_slot_rows();
            state.ResumeTiming();
        }
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ap_downlink);

}  // namespace
