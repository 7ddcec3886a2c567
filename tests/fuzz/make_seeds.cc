// Writes the seed corpora of the fuzz targets (docs/fuzzing.md, "Corpora") from golden vectors and
// inputs the project's own encoders make, so every target starts from inputs its code
// accepts. Usage: fuzz_make_seeds <tests/fuzz folder> <host/tests/vectors folder>. The
// output is committed; `make fuzz` adds what the fuzzers find (minimised) beside it.
#include <gnuradio/oppsched/header_codec.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "oppsched/byte_order.h"
#include "oppsched/pdu.h"
#include "oppsched/segmentation.h"
#include "oppsched/wire.h"
#include "tcp_test_packets.h"

namespace fs = std::filesystem;
using namespace oppsched;
using bytes = std::vector<std::uint8_t>;

namespace {

fs::path out_dir;

void write(const std::string& target, const std::string& name, const bytes& b) {
    const fs::path dir = out_dir / target;
    fs::create_directories(dir);
    std::ofstream f(dir / ("seed_" + name), std::ios::binary);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

bytes cat(std::initializer_list<bytes> parts) {
    bytes out;
    for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
    return out;
}
bytes be16(std::uint16_t v) {
    return {static_cast<std::uint8_t>(v >> 8), static_cast<std::uint8_t>(v)};
}
bytes be32(std::uint32_t v) {
    return cat({be16(static_cast<std::uint16_t>(v >> 16)), be16(static_cast<std::uint16_t>(v))});
}
bytes be64(std::uint64_t v) {
    return cat({be32(static_cast<std::uint32_t>(v >> 32)), be32(static_cast<std::uint32_t>(v))});
}

bytes from_hex(const fs::path& p) {
    std::ifstream f(p);
    std::string s;
    f >> s;
    bytes b;
    for (std::size_t i = 0; i + 1 < s.size(); i += 2)
        b.push_back(static_cast<std::uint8_t>(std::stoi(s.substr(i, 2), nullptr, 16)));
    return b;
}

void wire_seeds() {
    wire::slot_grant g;
    g.slot = 123456789012ull;
    g.empty = false;
    g.user = 3;
    g.mcs = 5;
    g.harq_pid = 7;
    g.ndi = 1;
    g.rv = 2;
    g.tb = {1, 2, 3, 4, 5};
    wire::rx_indication rx;
    rx.slot = 42;
    rx.user = 2;
    rx.mcs = 7;
    rx.header_ok = rx.addressed = rx.crc_ok = true;
    rx.snr_db = 17.25f;
    rx.cqi = 11;
    rx.combined = 2;
    rx.tb = bytes(40, 0xab);
    const std::vector<wire::message> msgs = {
        wire::slot_request{99, -5},
        g,
        rx,
        wire::cqi_report{4, 77, -3.5f, 2},
        wire::harq_feedback{1, 8, 3, true},
        wire::uplink_packet{9, bytes(60, 0x45)},
        wire::uplink_grant{2, 1000, 123456789, 4, 3, 1, 2, 200},
        wire::uplink_tb{2, 1000, 3, 1, 6500, 4, bytes(50, 0x3c)},
        wire::buffer_status{5, 998, 1500, 1}};
    for (const auto& m : msgs)
        write("wire_decode", wire::to_string(wire::type_of(m)),
              cat({{0x03}, wire::encode(m, 1000)}));  // control: CRC and body_len fixed
    wire::slot_grant up = g;                          // a station's uplink TB (shared medium)
    up.uplink = true;
    write("wire_decode", "slot_grant_uplink", cat({{0x03}, wire::encode(up, 1001)}));
}

void pdu_seeds(const fs::path& vectors) {
    for (const auto& e : fs::directory_iterator(vectors))
        if (e.path().extension() == ".hex")
            write("pdu_parse", e.path().stem().string(), cat({{0x00}, from_hex(e.path())}));
    // Segmenter output, both formats: packets split across TBs.
    for (auto f : {pdu::pdu_format::standard, pdu::pdu_format::compact}) {
        pdu::segmenter_params sp;
        sp.format = f;
        pdu::segmenter s(sp);
        int k = 0;
        const pdu::packet_source src = [&]() -> std::optional<ip_packet> {
            if (k >= 3) return std::nullopt;
            ip_packet p;
            p.data = test::conn(4).server_data(0, 100 + 50 * static_cast<std::size_t>(k++));
            return p;
        };
        for (int i = 0; i < 3; ++i) {
            const auto tb = s.build(200, src, i == 1 ? std::optional<float>(0.01f) : std::nullopt);
            write("pdu_parse", std::string(pdu::to_string(f)) + "_segmented_" + std::to_string(i),
                  cat({{0x00}, tb.bytes}));
        }
    }
}

// The reassembler target's program (fuzz_reassembler.cc): mode, window, timeout, max_bytes,
// first_seq, first_packet_seq, then ops.
bytes reasm_header(std::uint8_t mode, std::uint32_t first_seq) {
    return cat({{mode}, be16(63), {49}, be16(1000), be32(first_seq), be16(0)});
}
bytes build_op(std::uint16_t tb, std::uint8_t packets, std::vector<std::uint16_t> lens) {
    bytes b = cat({{0x00}, be16(tb), {packets}});
    for (auto l : lens) b = cat({b, be16(l)});
    return b;
}
bytes deliver_op(std::uint16_t i) { return cat({{0x02}, be16(i)}); }
bytes lost_op(std::uint16_t i) { return cat({{0x05}, be16(i)}); }
bytes poll_op(std::uint16_t t10us) { return cat({{0x06}, be16(t10us)}); }

void reassembler_seeds(const fs::path& vectors) {
    for (std::uint8_t fmt : {0x00, 0x02}) {
        const std::string name = fmt ? "compact_" : "standard_";
        write("reassembler", name + "in_order",
              cat({reasm_header(fmt, 10), build_op(400, 2, {100, 500}), build_op(400, 1, {60}),
                   build_op(400, 0, {}), deliver_op(0), deliver_op(1), deliver_op(2)}));
        write("reassembler", name + "reordered_lost_duplicate_wrap",
              cat({reasm_header(fmt | 0x04, 0), build_op(300, 3, {100, 200, 300}),
                   build_op(300, 1, {50}), build_op(300, 1, {700}), build_op(300, 0, {}),
                   deliver_op(1), deliver_op(0), deliver_op(0), lost_op(2), deliver_op(3),
                   poll_op(10000), deliver_op(2)}));
    }
    bytes raw = cat({{0x01}, be16(63), {49}, be16(1000), be32(5), be16(0)});
    for (const char* v : {"pdu_v1_empty.hex", "pdu_v1_two_packets.hex"}) {
        const bytes b = from_hex(vectors / v);
        raw = cat({raw, {0x00}, be16(static_cast<std::uint16_t>(b.size())), b});
    }
    write("reassembler", "raw_golden", cat({raw, {0x03}, be16(100)}));
}

void tcpip_seeds() {
    // Ops of fuzz_tcpip_clamp.cc: op (bit 1 IPv6, bit 2 fix checksums, bit 3 price, bit 4
    // downlink), then the builder's kind and fields, flips, the clock step, price, window.
    for (std::uint8_t v6 : {0x00, 0x02}) {
        bytes b;
        auto pkt = [&](std::uint8_t op, std::uint8_t kind, const bytes& fields, bool uplink) {
            b = cat({b, {op}, {kind}, fields, {0x00}, be16(10)});
            if (op & 8u) b.push_back(20);
            if (uplink) b = cat({b, be32(30000)});
        };
        pkt(v6, 0 << 1, {}, true);                                     // client SYN, uplink
        pkt(v6 | 16, 1 << 1, {}, false);                               // server SYN-ACK, downlink
        pkt(v6 | 8, 6 << 1, cat({be32(0), be16(502), {0}}), true);     // handshake ACK
        pkt(v6 | 16 | 8, 5 << 1, cat({be32(0), be16(1000)}), false);   // data down
        pkt(v6 | 8, 6 << 1, cat({be32(1000), be16(400), {0}}), true);  // its ACK, clamped
        pkt(v6 | 16, 4 << 1, {}, false);                               // RST
        write("tcpip_clamp", v6 ? "ipv6_connection" : "ipv4_connection", b);
    }
}

void header_seeds() {
    gr::oppsched::numerology_params np;
    gr::oppsched::header_codec c{gr::oppsched::numerology(np)};
    gr::oppsched::header_fields h;
    h.user = 3;
    h.mcs = 4;
    h.harq_process = 9;
    h.ndi = true;
    h.rv = 2;
    h.tb_bytes = 100;
    h.slot = 123456;
    const auto packed = c.pack(h);
    write("header_codec", "packed", cat({{0x00}, bytes(packed.begin(), packed.end())}));
    const auto re = c.encode(h);
    bytes b = {0x02};
    for (const auto& x : re)
        for (float f : {x.real(), x.imag(), 0.1f}) {
            std::uint8_t raw[4];
            std::memcpy(raw, &f, 4);
            b.insert(b.end(), raw, raw + 4);
        }
    write("header_codec", "encoded_bpsk", b);
}

// A program of fuzz_slot_msg.cc: a dict of (key index, value) entries.
void slot_msg_seeds() {
    auto lng = [](std::uint8_t key, std::uint8_t v) { return bytes{key, 11, v}; };
    auto u64 = [](std::uint8_t key, std::uint64_t v) { return cat({{key, 2}, be64(v)}); };
    auto boo = [](std::uint8_t key, bool v) { return bytes{key, 4, static_cast<std::uint8_t>(v)}; };
    auto real = [](std::uint8_t key, double v) {
        std::uint64_t bits;
        std::memcpy(&bits, &v, 8);
        return cat({{key, 3}, be64(bits)});
    };
    auto u8v = [](std::uint8_t key, std::uint8_t n) { return cat({{key, 6, n}, bytes(n, 0x5a)}); };
    // Key indices: slot 0, air_time_ns 1, empty 2, user 3, mcs 4, harq_pid 5, ndi 6, rv 7,
    // tb 8, slot_estimated 9, detected 10, header_ok 11, tb_bytes 12, addressed 13, crc_ok 14,
    // snr_db 15, effective_snr_db 16, cqi 17, combined 18, cfo_hz 19, sample 20, other 21,
    // uplink 22.
    write("slot_msg", "request", cat({{1, 2}, u64(0, 77), lng(1, 5)}));
    write("slot_msg", "grant",
          cat({{1, 7},
               u64(0, 9),
               boo(2, false),
               lng(3, 2),
               lng(4, 5),
               lng(5, 3),
               boo(6, true),
               u8v(8, 12)}));
    write("slot_msg", "grant_uplink",
          cat({{1, 8},
               u64(0, 10),
               boo(2, false),
               boo(22, true),
               lng(3, 1),
               lng(4, 2),
               lng(5, 1),
               boo(6, true),
               u8v(8, 12)}));
    write("slot_msg", "rx_report",
          cat({{1, 12},
               u64(0, 9),
               boo(11, true),
               lng(3, 2),
               lng(4, 5),
               boo(13, true),
               boo(14, true),
               real(15, 12.5),
               lng(17, 9),
               lng(18, 1),
               real(19, -120.0),
               u8v(8, 16),
               u64(20, 4096)}));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: %s <tests/fuzz> <host/tests/vectors>\n", argv[0]);
        return 2;
    }
    out_dir = argv[1];
    wire_seeds();
    pdu_seeds(argv[2]);
    reassembler_seeds(argv[2]);
    tcpip_seeds();
    header_seeds();
    slot_msg_seeds();
    return 0;
}
