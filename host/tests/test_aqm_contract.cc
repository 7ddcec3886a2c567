// The contract every AQM keeps, run over every kind with seeded random traffic.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_map>

#include "oppsched/aqm.h"
#include "test_aqm_packets.h"

using namespace oppsched;
using namespace oppsched::aqm;
using namespace oppsched::aqm::testing;

namespace {

struct contract_case {
    aqm_kind kind;
    int variant;  // 0: packet limit, ECN, measured rate; 1: byte limit, fixed capacity;
                  // 2: both limits, ECN off
};

std::string case_name(const ::testing::TestParamInfo<contract_case>& info) {
    return std::string(to_string(info.param.kind)) + "_v" + std::to_string(info.param.variant);
}

aqm_params contract_config(const contract_case& c) {
    aqm_params cfg = default_config(c.kind);
    cfg.seed = 1234 + static_cast<std::uint64_t>(c.variant);
    switch (c.variant) {
        case 0:
            cfg.limits = {0, 40};
            break;
        case 1:
            cfg.limits = {30000, 0};
            cfg.rate.capacity_bps = 2e6;
            break;
        default:
            cfg.limits = {20000, 25};
            cfg.ecn = false;
            break;
    }
    // Make the disciplines act within a short run.
    if (auto* p = std::get_if<tlas_params>(&cfg.params)) {
        p->threshold_packets = 8;
        p->flow_idle_timeout = 50 * kNsPerMs;
    }
    if (auto* p = std::get_if<las_params>(&cfg.params)) p->flow_idle_timeout = 50 * kNsPerMs;
    if (auto* p = std::get_if<rem_params>(&cfg.params)) {
        p->gamma = 0.05;
        p->target = 5;  // b* = 20 (x 1000 B) would be the whole 20 kB limit of variant 2
    }
    if (auto* p = std::get_if<reaqm_params>(&cfg.params)) p->gamma = 0.05;
    if (auto* p = std::get_if<pie_params>(&cfg.params)) p->max_burst = 20 * kNsPerMs;
    return cfg;
}

// Random mixed traffic: TCP data (v4 and v6), pure ACKs (some duplicate, some with SACK or
// ECE), SYN/FIN/RST, UDP; ECT or not; some high priority.
class traffic {
  public:
    explicit traffic(std::uint64_t seed) : rng_(seed) {}

    ip_packet next(std::uint64_t id) {
        std::uniform_real_distribution<double> u(0.0, 1.0);
        const double r = u(rng_);
        const std::uint8_t ecn = u(rng_) < 0.5 ? tcpip::kEct0 : tcpip::kNotEct;
        std::vector<std::uint8_t> data;
        if (r < 0.45) {  // data segment of one of 5 flows
            const int f = static_cast<int>(u(rng_) * 5);
            tcp_spec t;
            t.ip_version = f == 4 ? 6 : 4;
            t.ecn = ecn;
            t.sport = static_cast<std::uint16_t>(5000 + f);
            t.seq = seq_[f];
            t.flags = tcpip::kAck | tcpip::kPsh;
            t.payload = static_cast<std::size_t>(u(rng_) * 1460);
            seq_[f] += static_cast<std::uint32_t>(t.payload);
            data = tcp_packet(t);
        } else if (r < 0.85) {  // pure ACKs of one of 3 upstream connections
            const int f = static_cast<int>(u(rng_) * 3);
            tcp_spec t;
            t.ecn = ecn;
            t.sport = 80;
            t.dport = static_cast<std::uint16_t>(6000 + f);
            if (u(rng_) < 0.8) ack_[f] += 1448 * (1 + static_cast<std::uint32_t>(u(rng_) * 2));
            t.ack = ack_[f];
            t.flags = tcpip::kAck;
            if (u(rng_) < 0.1) t.flags |= tcpip::kEce;
            if (u(rng_) < 0.15) t.sack = {{ack_[f] + 2896, ack_[f] + 4344}};
            data = tcp_packet(t);
        } else if (r < 0.92) {  // connection control
            tcp_spec t;
            t.ecn = ecn;
            t.sport = 80;
            t.dport = static_cast<std::uint16_t>(6000 + static_cast<int>(u(rng_) * 3));
            const double c = u(rng_);
            t.flags = c < 0.4   ? (tcpip::kSyn | tcpip::kAck)
                      : c < 0.8 ? (tcpip::kFin | tcpip::kAck)
                                : (tcpip::kRst | tcpip::kAck);
            data = tcp_packet(t);
        } else {
            data = udp_packet(28 + static_cast<std::size_t>(u(rng_) * 1400), ecn);
        }
        return make_packet(std::move(data), id, 0, u(rng_) < 0.2);
    }

  private:
    std::mt19937_64 rng_;
    std::uint32_t seq_[5] = {1, 1, 1, 1, 1};
    std::uint32_t ack_[3] = {1000, 1000, 1000};
};

std::string flow_of(const ip_packet& p) {
    auto r = tcpip::parse(p.data);
    if (!r) return "?";
    const auto& f = r->flow;
    std::string s(reinterpret_cast<const char*>(f.src.data()), 16);
    s += std::string(reinterpret_cast<const char*>(f.dst.data()), 16);
    return s + std::to_string(f.proto) + ":" + std::to_string(f.sport) + ":" +
           std::to_string(f.dport);
}

class aqm_contract : public ::testing::TestWithParam<contract_case> {};

TEST_P(aqm_contract, limit_holds_and_every_packet_leaves_exactly_once_in_order) {
    const contract_case c = GetParam();
    const aqm_params cfg = contract_config(c);
    auto aqm = make_aqm(cfg);
    ASSERT_EQ(aqm->kind(), c.kind);

    std::vector<dropped_packet> drops;
    aqm->set_drop_sink([&drops](dropped_packet&& d) { drops.push_back(std::move(d)); });

    traffic traffic(99 + static_cast<std::uint64_t>(c.kind) * 7 + c.variant);
    std::mt19937_64 rng(4242 + static_cast<std::uint64_t>(c.variant));
    std::uniform_real_distribution<double> u(0.0, 1.0);

    std::map<std::uint64_t, std::size_t> in_queue;  // model: id -> size
    std::size_t model_bytes = 0;
    std::map<std::uint64_t, std::uint8_t> offered_ecn;
    std::map<std::uint64_t, std::string> flow_of_id;
    std::vector<std::uint64_t> dequeued;
    std::uint64_t accepted = 0, next_id = 0;
    std::size_t drops_seen = 0;
    time_ns now = 0;

    auto absorb_drops = [&](std::optional<std::uint64_t> just_offered) {
        for (; drops_seen < drops.size(); ++drops_seen) {
            const dropped_packet& d = drops[drops_seen];
            EXPECT_EQ(d.at, now);
            if (removes_queued_packet(d.reason)) {
                auto it = in_queue.find(d.packet.id);
                ASSERT_NE(it, in_queue.end()) << "drop of a packet not queued, id " << d.packet.id;
                model_bytes -= it->second;
                in_queue.erase(it);
            } else {
                ASSERT_TRUE(just_offered.has_value());
                EXPECT_EQ(d.packet.id, *just_offered) << "arrival drop of another packet";
            }
        }
    };
    auto check_limits = [&]() {
        if (cfg.limits.bytes) {
            ASSERT_LE(aqm->bytes(), cfg.limits.bytes);
        }
        if (cfg.limits.packets) {
            ASSERT_LE(aqm->packets(), cfg.limits.packets);
        }
        ASSERT_EQ(aqm->bytes(), model_bytes);
        ASSERT_EQ(aqm->packets(), in_queue.size());
    };
    auto do_dequeue = [&]() {
        auto p = aqm->dequeue(now);
        absorb_drops(std::nullopt);
        if (p) {
            auto it = in_queue.find(p->id);
            ASSERT_NE(it, in_queue.end()) << "dequeued a packet not queued, id " << p->id;
            model_bytes -= it->second;
            in_queue.erase(it);
            dequeued.push_back(p->id);
            const std::uint8_t ecn = ecn_of(*p);
            if (ecn == tcpip::kCe) {
                EXPECT_TRUE(cfg.ecn);
                EXPECT_NE(offered_ecn[p->id], tcpip::kNotEct) << "CE on a Not-ECT packet";
            }
        }
    };

    constexpr int kSteps = 4000;
    for (int step = 0; step < kSteps; ++step) {
        now += static_cast<time_ns>(u(rng) * 3e6);  // 0..3 ms
        const bool overload = (step / 500) % 2 == 0;
        if (u(rng) < (overload ? 0.75 : 0.3)) {
            const int burst = 1 + static_cast<int>(u(rng) * 4);
            for (int b = 0; b < burst; ++b) {
                ip_packet p = traffic.next(next_id++);
                const std::uint64_t id = p.id;
                const std::size_t size = p.size();
                offered_ecn[id] = ecn_of(p);
                flow_of_id[id] = flow_of(p);
                const std::size_t drops_before = drops.size();
                const bool ok = aqm->enqueue(std::move(p), now);
                if (ok) {
                    ++accepted;
                    in_queue[id] = size;
                    model_bytes += size;
                }
                absorb_drops(id);
                // A rejected arrival is reported exactly once, as itself.
                std::size_t own = 0;
                for (std::size_t i = drops_before; i < drops.size(); ++i)
                    own += drops[i].packet.id == id;
                EXPECT_EQ(own, ok ? 0u : 1u);
                check_limits();
            }
        } else {
            const int n = 1 + static_cast<int>(u(rng) * 3);
            for (int i = 0; i < n; ++i) {
                do_dequeue();
                check_limits();
            }
        }
    }
    // Drain.
    for (int guard = 0; guard < 100000 && aqm->packets() > 0; ++guard) {
        now += kNsPerMs;
        do_dequeue();
        check_limits();
    }
    EXPECT_EQ(aqm->packets(), 0u);
    EXPECT_FALSE(aqm->dequeue(now).has_value());

    // Every offered id leaves exactly once.
    std::map<std::uint64_t, int> seen;
    for (auto id : dequeued) ++seen[id];
    for (const auto& d : drops) ++seen[d.packet.id];
    EXPECT_EQ(seen.size(), next_id);
    for (const auto& [id, n] : seen) EXPECT_EQ(n, 1) << "id " << id;

    const aqm_stats s = aqm->stats();
    EXPECT_EQ(s.offered, next_id);
    EXPECT_EQ(s.enqueued, accepted);
    EXPECT_EQ(s.dequeued, dequeued.size());
    EXPECT_EQ(s.dropped_total(), drops.size());
    if (!cfg.ecn) {
        EXPECT_EQ(s.marked, 0u);
    }
    // The run must exercise the limit or the AQM, or it proves little.
    EXPECT_GT(s.dropped_total(), 0u);
    EXPECT_GT(s.dequeued, 1000u);
    // ... and the discipline itself must have acted, not only the limit.
    const std::uint64_t signalled = s.marked + s.dropped_by(drop_reason::early_drop);
    switch (c.kind) {
        case aqm_kind::droptail:
            EXPECT_EQ(signalled, 0u);
            break;
        case aqm_kind::codel:
            EXPECT_GT(s.marked + s.dropped_by(drop_reason::aqm_drop), 0u);
            break;
        case aqm_kind::spmaf:
            EXPECT_GT(s.dropped_by(drop_reason::superseded_ack), 0u);
            EXPECT_GT(s.dropped_by(drop_reason::evicted_low_priority), 0u);
            break;
        case aqm_kind::las:
        case aqm_kind::tlas:
            EXPECT_GT(s.dropped_by(drop_reason::evicted_las), 0u);
            break;
        default:
            EXPECT_GT(signalled, 0u) << "the AQM never signalled congestion";
            break;
    }

    // Order: global FIFO for FIFO disciplines; per-flow order for all.
    const bool fifo = c.kind != aqm_kind::las && c.kind != aqm_kind::tlas;
    if (fifo) {
        for (std::size_t i = 1; i < dequeued.size(); ++i)
            ASSERT_LT(dequeued[i - 1], dequeued[i]) << "FIFO order broken at " << i;
    }
    std::unordered_map<std::string, std::uint64_t> last;
    for (auto id : dequeued) {
        const std::string& f = flow_of_id[id];
        auto it = last.find(f);
        if (it != last.end()) {
            ASSERT_LT(it->second, id) << "per-flow order broken";
        }
        last[f] = id;
    }
}

TEST_P(aqm_contract, clear_flushes_every_queued_packet_once) {
    const contract_case c = GetParam();
    auto aqm = make_aqm(contract_config(c));
    traffic traffic(7);
    std::uint64_t accepted = 0;
    for (std::uint64_t id = 0; id < 30; ++id)
        accepted += aqm->enqueue(traffic.next(id), static_cast<time_ns>(id) * 1000);
    const auto rejected = aqm->take_drops();
    const std::size_t queued = aqm->packets();
    aqm->clear(kNsPerSec);
    const auto flushed = aqm->take_drops();
    EXPECT_EQ(flushed.size(), queued);
    for (const auto& d : flushed) EXPECT_EQ(d.reason, drop_reason::flushed);
    EXPECT_EQ(aqm->packets(), 0u);
    EXPECT_EQ(aqm->bytes(), 0u);
    EXPECT_EQ(aqm->peek(), nullptr);
    EXPECT_GT(accepted, 0u);
    // Without a sink every drop is kept for take_drops(): each offered packet is either
    // still queued or among them.
    EXPECT_EQ(rejected.size() + queued, 30u);
}

std::vector<contract_case> all_cases() {
    std::vector<contract_case> v;
    for (std::size_t k = 0; k < kAqmKindCount; ++k)
        for (int variant = 0; variant < 3; ++variant)
            v.push_back({static_cast<aqm_kind>(k), variant});
    return v;
}

INSTANTIATE_TEST_SUITE_P(EveryKind, aqm_contract, ::testing::ValuesIn(all_cases()), case_name);

}  // namespace
