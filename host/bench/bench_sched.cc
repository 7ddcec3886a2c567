// Per-slot cost of the scheduler decision, per-TB cost of the HARQ entity, per-TB cost of
// link adaptation. Budget: a scheduling decision for 64 users must stay <= 50 us (a 1.667 ms
// EV-DO slot leaves the daemon plenty of other work).
//
// Results (RelWithDebInfo, 2-core shared VM under load from parallel builds, CPU time):
//   BM_pf_slot/16 92 ns, /64 380 ns        (choose + update, a third of the users idle)
//   BM_pf_choose/16 73 ns, /64 285 ns      (the decision alone)
//   BM_glambda_slot/16 184 ns, /64 667 ns  (two logs per candidate)
//   BM_wpf_slot/64 380 ns, BM_rr_slot/64 402 ns
//   BM_harq_tb_acked 506 ns                (new TB + per-slot expire scan of 512 processes + ACK)
//   BM_harq_tb_one_retx 574 ns             (+ NACK, next_retransmission scan, retransmit)
//   BM_olla_select_update 4.6 ns
// i.e. 75x (glambda) to 130x (PF) under the 50 us budget for 64 users.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "oppsched/harq.h"
#include "oppsched/linkadapt.h"
#include "oppsched/sched.h"

namespace {

using namespace oppsched;

constexpr std::size_t kRows = 1024;  // pre-drawn slots, cycled

std::vector<std::vector<double>> rayleigh_rows(std::size_t users) {
    std::mt19937_64 rng(1);
    std::exponential_distribution<double> e(1.0);
    std::vector<std::vector<double>> rows(kRows, std::vector<double>(users));
    for (auto& row : rows) {
        for (std::size_t i = 0; i < users; ++i) {
            const double mean = std::pow(10.0, (static_cast<double>(i % 16)) / 10.0);
            row[i] = 1e6 * std::log2(1.0 + mean * e(rng));
        }
    }
    return rows;
}

void run_step(benchmark::State& state, sched::policy_params params) {
    const auto users = static_cast<std::size_t>(state.range(0));
    auto p = sched::make_scheduler(sched::scheduler_params{users, std::move(params)});
    const auto rows = rayleigh_rows(users);
    std::vector<bool> backlogged(users, true);
    for (std::size_t i = 0; i < users; i += 3) backlogged[i] = false;  // a third idle
    std::size_t k = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(p->step(rows[k], backlogged));
        k = (k + 1) % kRows;
    }
    state.SetItemsProcessed(state.iterations());
}

// One slot = choose() + update() (the whole per-slot scheduler cost).
void BM_pf_slot(benchmark::State& state) { run_step(state, sched::pf_params{0.03}); }
void BM_glambda_slot(benchmark::State& state) { run_step(state, sched::glambda_params{0.01, 2.0}); }
void BM_wpf_slot(benchmark::State& state) {
    run_step(state, sched::weighted_pf_params{
                        0.03, std::vector<double>(static_cast<std::size_t>(state.range(0)), 1.5)});
}
void BM_rr_slot(benchmark::State& state) { run_step(state, sched::round_robin_params{}); }
BENCHMARK(BM_pf_slot)->Arg(16)->Arg(64);
BENCHMARK(BM_glambda_slot)->Arg(16)->Arg(64);
BENCHMARK(BM_wpf_slot)->Arg(64);
BENCHMARK(BM_rr_slot)->Arg(64);

// The decision alone (choose(), const).
void BM_pf_choose(benchmark::State& state) {
    const auto users = static_cast<std::size_t>(state.range(0));
    auto p = sched::make_scheduler(sched::scheduler_params{users, sched::pf_params{}});
    const auto rows = rayleigh_rows(users);
    const std::vector<bool> all(users, true);
    for (std::size_t k = 0; k < 100; ++k) p->step(rows[k], all);  // warm averages
    std::size_t k = 0;
    for (auto _ : state) {
        benchmark::DoNotOptimize(p->choose(rows[k], all));
        k = (k + 1) % kRows;
    }
}
BENCHMARK(BM_pf_choose)->Arg(16)->Arg(64);

// One TB through HARQ, the common path: new transmission, ACK after the feedback delay, and
// the per-slot expire() scan, for 64 users x 8 processes.
void BM_harq_tb_acked(benchmark::State& state) {
    harq::harq_params c;
    c.num_users = 64;
    c.num_processes = 8;
    c.feedback_delay_slots = 4;
    c.feedback_timeout_slots = 16;
    harq::harq_entity h(c);
    std::vector<harq::harq_event> out;
    harq::slot_t now = 0;
    std::uint64_t id = 0;
    std::uint32_t user = 0;
    for (auto _ : state) {
        const harq::tx_grant g = h.new_transmission(user, {++id, 1500}, now);
        out.clear();
        h.expire(now, out);
        benchmark::DoNotOptimize(h.on_feedback(user, g.process, g.ndi, true, now + 4));
        user = (user + 1) % 64;
        now += 5;
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_harq_tb_acked);

// One TB with one NACK and a retransmission (next_retransmission scan included).
void BM_harq_tb_one_retx(benchmark::State& state) {
    harq::harq_params c;
    c.num_users = 64;
    c.num_processes = 8;
    harq::harq_entity h(c);
    harq::slot_t now = 0;
    std::uint64_t id = 0;
    std::uint32_t user = 0;
    for (auto _ : state) {
        const harq::tx_grant g = h.new_transmission(user, {++id, 1500}, now);
        h.on_feedback(user, g.process, g.ndi, false, now + 4);
        const auto r = h.next_retransmission(now + 4);
        const harq::tx_grant g2 = h.retransmit(r->user, r->process, now + 4);
        benchmark::DoNotOptimize(h.on_feedback(user, g2.process, g2.ndi, true, now + 8));
        user = (user + 1) % 64;
        now += 9;
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_harq_tb_one_retx);

// Link adaptation per TB: OLLA-corrected CQI -> MCS lookup and the ACK update.
void BM_olla_select_update(benchmark::State& state) {
    const auto t = linkadapt::mcs_table::ofdm_provisional();
    linkadapt::olla o(linkadapt::olla_params{});
    double cqi = 3.0;
    bool ack = true;
    for (auto _ : state) {
        benchmark::DoNotOptimize(o.select(t, cqi));
        o.update(ack);
        ack = !ack;
        cqi = cqi > 25.0 ? 3.0 : cqi + 0.37;
    }
}
BENCHMARK(BM_olla_select_update);

}  // namespace
