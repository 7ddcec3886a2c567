// Per-packet costs of the TCP/IP tools, CRC-32, and segmentation + reassembly.
// Target: window rewrite <= 10 ns per packet given the parsed TCP offset.
//
// Results (RelWithDebInfo -O2, no -march=native, 2-core VM shared with other builds, load
// average ~7, so CPU time is the meaningful column; wall time was 2-3x higher):
//   BM_window_rewrite_raw/4 and /6   ~3 ns CPU  (write_window_field + window_field_for)
//   BM_set_window                    ~7 ns CPU  (bounds checks, SYN rule, one packet reused)
//   BM_tracker_rewrite               ~50 ns CPU (hash lookup of the 5-tuple, LRU, right edge)
//   BM_parse/4, /6 (1448 B payload)  ~35-40 ns CPU
//   BM_crc32/1500                    ~650 ns CPU (2.1 GB/s, slicing-by-8)
//   BM_flow_key_hash/4, /6           ~12-21 ns CPU (unkeyed mix)
//   BM_keyed_flow_hash/4, /6         ~24 / ~35 ns CPU (SipHash-2-4, libsodium)
//   BM_segment_reassemble/200        ~3.4 us per 1500-byte packet (8 TBs each)
//   BM_segment_reassemble/1000       ~2.0 us per packet
//   BM_segment_reassemble/6000       ~1.7 us per packet (two CRC passes dominate)
#include <benchmark/benchmark.h>

#include <deque>
#include <random>

#include "oppsched/crc32.h"
#include "oppsched/segmentation.h"
#include "oppsched/tcpip.h"

using namespace oppsched;

namespace {

// IPv4 or IPv6 + TCP with NOP, NOP, timestamps (a typical Linux ACK) and `payload` bytes.
std::vector<std::uint8_t> make_tcp(int ipv, std::size_t payload, std::uint8_t flags = tcpip::kAck) {
    const std::size_t ip = ipv == 4 ? 20 : 40;
    std::vector<std::uint8_t> p(ip + 32 + payload, 0);
    if (ipv == 4) {
        p[0] = 0x45;
        p[2] = static_cast<std::uint8_t>(p.size() >> 8);
        p[3] = static_cast<std::uint8_t>(p.size());
        p[8] = 64;
        p[9] = tcpip::kProtoTcp;
        p[12] = 10, p[15] = 1, p[16] = 10, p[19] = 2;
    } else {
        p[0] = 0x60;
        p[4] = static_cast<std::uint8_t>((p.size() - 40) >> 8);
        p[5] = static_cast<std::uint8_t>(p.size() - 40);
        p[6] = tcpip::kProtoTcp;
        p[7] = 64;
        p[8] = 0x20, p[23] = 1, p[24] = 0x20, p[39] = 2;
    }
    std::uint8_t* t = p.data() + ip;
    t[0] = 0x9C, t[1] = 0x40, t[2] = 0x14, t[3] = 0x51;  // ports 40000 -> 5201
    t[8] = 0x10;                                         // ack
    t[12] = 8 << 4;                                      // 32-byte header
    t[13] = flags;
    t[14] = 0x01;
    const std::uint8_t opts[12] = {1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2};
    std::copy(opts, opts + 12, t + 20);
    auto info = tcpip::parse(p);
    const std::uint16_t c = tcpip::tcp_checksum(p.data(), info.value());
    t[16] = static_cast<std::uint8_t>(c >> 8);
    t[17] = static_cast<std::uint8_t>(c);
    return p;
}

}  // namespace

// The raw rewrite: window field + RFC 1624 checksum update at a known TCP offset. Cycles
// through 64 packets, as a stream of different ACKs would (no store-to-load chain on one).
static void BM_window_rewrite_raw(benchmark::State& state) {
    std::vector<std::vector<std::uint8_t>> pkts(64, make_tcp(static_cast<int>(state.range(0)), 0));
    const std::size_t off = state.range(0) == 4 ? 20 : 40;
    std::uint32_t w = 1;
    std::size_t i = 0;
    for (auto _ : state) {
        w = w * 1664525u + 1013904223u;  // a different window each time
        tcpip::write_window_field(pkts[i++ & 63].data() + off, tcpip::window_field_for(w >> 8, 7));
        benchmark::ClobberMemory();
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_window_rewrite_raw)->Arg(4)->Arg(6);

// Stateless rewrite from a parsed packet_info (bounds checks, rounding, clamping).
static void BM_set_window(benchmark::State& state) {
    auto p = make_tcp(4, 0);
    const tcpip::packet_info info = tcpip::parse(p).value();
    std::uint64_t w = 1;
    for (auto _ : state) {
        w = (w * 6364136223846793005ull + 1) & 0xFFFFFF;
        benchmark::DoNotOptimize(tcpip::set_window(p.data(), p.size(), info, w, 7));
    }
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_set_window);

// The CLAMP client path: tracker lookup (hash of the 5-tuple), right-edge rule, rewrite.
static void BM_tracker_rewrite(benchmark::State& state) {
    auto syn = make_tcp(4, 0, tcpip::kSyn);
    auto p = make_tcp(4, 0);
    tcpip::window_tracker t;
    // The SYN-ACK comes from the other side: swap addresses and ports of a SYN+ACK.
    auto syn_ack = make_tcp(4, 0, tcpip::kSyn | tcpip::kAck);
    std::swap_ranges(syn_ack.begin() + 12, syn_ack.begin() + 16, syn_ack.begin() + 16);
    std::swap_ranges(syn_ack.begin() + 20, syn_ack.begin() + 22, syn_ack.begin() + 22);
    t.learn(tcpip::parse(syn).value(), 0);
    t.learn(tcpip::parse(syn_ack).value(), 1);
    const tcpip::packet_info info = tcpip::parse(p).value();
    time_ns now = 2;
    for (auto _ : state) {
        benchmark::DoNotOptimize(t.rewrite(p.data(), p.size(), info, 20000, ++now));
    }
    if (t.stats().rewritten == 0) state.SkipWithError("not rewritten");
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_tracker_rewrite);

static void BM_parse(benchmark::State& state) {
    auto p = make_tcp(static_cast<int>(state.range(0)), 1448);
    for (auto _ : state) benchmark::DoNotOptimize(tcpip::parse(p));
    state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_parse)->Arg(4)->Arg(6);

// One flow-key hash: the unkeyed mix (flow_key_hash) and SipHash-2-4 under a seed
// (keyed_flow_hash, the LAS flow table's), IPv4 (range 4) or IPv6 (6) keys.
template <class H>
static void flow_hash(benchmark::State& state, const H& h) {
    std::vector<tcpip::flow_key> keys(64);
    std::mt19937_64 rng(3);
    for (auto& k : keys) {
        k.ip_version = static_cast<std::uint8_t>(state.range(0));
        k.proto = tcpip::kProtoTcp;
        for (std::size_t i = 0; i < (k.ip_version == 6 ? 16u : 4u); ++i) {
            k.src[i] = static_cast<std::uint8_t>(rng());
            k.dst[i] = static_cast<std::uint8_t>(rng());
        }
        k.sport = static_cast<std::uint16_t>(rng());
        k.dport = 5201;
    }
    std::size_t i = 0;
    for (auto _ : state) benchmark::DoNotOptimize(h(keys[i++ & 63]));
    state.SetItemsProcessed(state.iterations());
}
static void BM_flow_key_hash(benchmark::State& state) { flow_hash(state, tcpip::flow_key_hash{}); }
BENCHMARK(BM_flow_key_hash)->Arg(4)->Arg(6);
static void BM_keyed_flow_hash(benchmark::State& state) {
    flow_hash(state, tcpip::keyed_flow_hash(1));
}
BENCHMARK(BM_keyed_flow_hash)->Arg(4)->Arg(6);

static void BM_crc32(benchmark::State& state) {
    std::vector<std::uint8_t> b(static_cast<std::size_t>(state.range(0)));
    std::mt19937_64 rng(1);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    for (auto _ : state) benchmark::DoNotOptimize(crc32(b));
    state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_crc32)->Arg(1500);

// Segmentation into TBs of state.range(0) bytes and reassembly, per 1500-byte packet
// (includes both CRC-32 passes: the segmenter's and the reassembler's parse).
static void BM_segment_reassemble(benchmark::State& state) {
    const std::size_t tb = static_cast<std::size_t>(state.range(0));
    ip_packet proto;
    proto.data.assign(1500, 0xAB);
    std::uint64_t id = 0;
    pdu::packet_source src = [&]() -> std::optional<ip_packet> {
        ip_packet p = proto;
        p.id = id++;
        return p;
    };
    pdu::segmenter seg;
    pdu::reassembler reasm;
    std::uint64_t delivered = 0;
    time_ns now = 0;
    for (auto _ : state) {
        const pdu::built_tb b = seg.build(tb, src);
        delivered += reasm.on_pdu(b.bytes, ++now).size();
    }
    state.counters["packets_per_s"] =
        benchmark::Counter(static_cast<double>(delivered), benchmark::Counter::kIsRate);
    state.counters["time_per_packet"] = benchmark::Counter(
        static_cast<double>(delivered), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_segment_reassemble)->Arg(200)->Arg(1000)->Arg(6000);
