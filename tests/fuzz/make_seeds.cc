// Writes the seed corpora of the fuzz targets (docs/fuzzing.md, "Corpora") from golden vectors and
// inputs the project's own encoders make, so every target starts from inputs its code
// accepts. Usage: fuzz_make_seeds <tests/fuzz folder> <host/tests/vectors folder>. The
// output is committed; `make fuzz` adds what the fuzzers find (minimised) beside it.
#include <gnuradio/oppsched/conv_code.h>
#include <gnuradio/oppsched/header_codec.h>
#include <gnuradio/oppsched/ldpc.h>
#include <gnuradio/oppsched/ofdm_modulator.h>
#include <gnuradio/oppsched/scrambler.h>
#include <gnuradio/oppsched/tb_codec.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "oppsched/byte_order.h"
#include "oppsched/pdu.h"
#include "oppsched/segmentation.h"
#include "oppsched/wire.h"
#include "oppsched/wrc_packet.h"
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

// The radio- and network-facing targets (fuzz_wrc_decode.cc, fuzz_classify.cc, fuzz_fec.cc,
// fuzz_tb_codec.cc, fuzz_phy_rx.cc): each input in the target's own format (see its header).
void wrc_seeds() {
    bytes b;
    const auto datagram = [&b](std::uint8_t dt_ms, const bytes& d) {
        b.push_back(static_cast<std::uint8_t>(d.size()));
        b.push_back(dt_ms);
        b.insert(b.end(), d.begin(), d.end());
    };
    for (std::uint32_t seq = 0; seq < 40; ++seq) {
        if (seq == 25) continue;  // a loss
        wrc::data_header h;
        h.flow_id = 7;
        h.seq = seq;
        h.rate_seq = seq < 30 ? 0 : 1;
        h.send_time_ns = 1'000'000'000ull + seq * 10'000'000ull;
        h.snd_sep_us = 10'000;
        h.weight = 2;
        bytes d(wrc::kHeaderBytes);
        wrc::encode(h, d.data(), d.size());
        datagram(seq == 26 ? 30 : 12, d);
        if (seq == 28) {
            wrc::feedback_header f;
            f.flow_id = 7;
            f.rate_seq = 1;
            f.rate_mpps = 80'000;
            f.echo_seq = seq;
            f.epoch = 1;
            bytes fb(wrc::kHeaderBytes);
            wrc::encode(f, fb.data(), fb.size());
            datagram(1, fb);
        }
    }
    write("wrc_decode", "flow", b);
}

void classify_seeds() {
    const bytes users = {0, 10, 0, 0, 1, 1, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    bytes v4 = {0x45, 0, 0, 28, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 9, 10, 0, 0, 1};
    v4.resize(28, 0);
    bytes v6 = {0x60, 0, 0, 0, 0, 8, 17, 64};
    v6.resize(40, 0);
    v6[8] = 0xfd;
    v6[23] = 9;
    v6[24] = 0xfd;
    v6[39] = 1;
    v6.resize(48, 0);
    write("classify", "ipv4", cat({{2}, users, v4}));
    write("classify", "ipv6", cat({{2}, users, v6}));
    bytes other = v4;
    other[19] = 2;
    write("classify", "unknown", cat({{2}, users, other}));
}

void fec_seeds() {
    using namespace gr::oppsched;
    for (int li = 0; li < 3; ++li)
        for (int r = 0; r < 4; ++r) {
            const ldpc_code& code =
                ldpc_code::get(ldpc_code::lengths[li], static_cast<code_rate>(r));
            const std::uint8_t pick = static_cast<std::uint8_t>(li | (r << 2));
            bytes clean = {0x02, pick};
            std::vector<std::uint8_t> info(static_cast<std::size_t>(code.k()));
            for (int i = 0; i < code.k(); i += 8) {
                const std::uint8_t byte = static_cast<std::uint8_t>(0x3c ^ (i * 7));
                clean.push_back(byte);
                for (int j = 0; j < 8 && i + j < code.k(); ++j)
                    info[static_cast<std::size_t>(i + j)] = (byte >> (7 - j)) & 1u;
            }
            for (int i = 0; i < code.n(); ++i) clean.push_back(static_cast<std::uint8_t>(i * 37));
            const std::string name = std::to_string(code.n()) + "_r" + std::to_string(r);
            write("fec", "ldpc_clean_" + name, clean);
            // Raw int8 LLRs of the same codeword, every 23rd bit flipped.
            const auto cw = code.encode(info);
            bytes raw = {0x00, pick};
            for (std::size_t i = 0; i < cw.size(); ++i) {
                const int v = (cw[i] ? -20 : 20) * (i % 23 == 0 ? -1 : 1);
                raw.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(v)));
            }
            write("fec", "ldpc_raw_" + name, raw);
        }
    // Viterbi: the header's 96-bit tail-biting block, a TB-sized zero-tail block.
    for (const auto& [k, pick, name] :
         {std::tuple<int, std::uint8_t, const char*>{96, 1, "tail_biting_acs16"},
          {96, 1 | 2 | 4, "tail_biting_volk8"},
          {352, 0, "zero_tail_acs16"},
          {352, 2 | 4, "zero_tail_volk8"}}) {
        bytes clean = cat({{0x03}, be16(static_cast<std::uint16_t>(k - 1)), {pick}});
        std::vector<std::uint8_t> info(static_cast<std::size_t>(k));
        for (int i = 0; i < k; i += 8) {
            const std::uint8_t byte = static_cast<std::uint8_t>(0xa5 ^ (i * 13));
            clean.push_back(byte);
            for (int j = 0; j < 8; ++j)
                info[static_cast<std::size_t>(i + j)] = (byte >> (7 - j)) & 1u;
        }
        const auto cw = (pick & 1) ? conv_encoder_k7::encode_tail_biting(info)
                                   : conv_encoder_k7::encode_zero_tail(info);
        for (std::size_t i = 0; i <= cw.size(); ++i)
            clean.push_back(static_cast<std::uint8_t>(i * 53));
        write("fec", std::string("viterbi_clean_") + name, clean);
        bytes raw = cat({{0x01}, be16(static_cast<std::uint16_t>(k - 1)), {pick}});
        for (std::size_t i = 0; i < cw.size(); ++i) {
            const int v = (cw[i] ? -30 : 30) * (i % 17 == 0 ? -1 : 1);
            raw.push_back(static_cast<std::uint8_t>(static_cast<std::int8_t>(v)));
        }
        write("fec", std::string("viterbi_raw_") + name, raw);
    }
}

void tb_codec_seeds() {
    for (int conv = 0; conv < 2; ++conv)
        for (int mcs = 0; mcs < 8; ++mcs) {
            // A first transmission (RV 0), then a retransmission (RV 2) with 3 REs changed.
            bytes b = {static_cast<std::uint8_t>(0x02 | conv)};
            const auto tx = [&b, mcs](int rv, std::uint8_t seed) {
                b.push_back(static_cast<std::uint8_t>(mcs));
                b.push_back(static_cast<std::uint8_t>(rv | 0x40));  // NDI 1
                const bytes tb = be16(99);                          // 1 + 99 % max bytes
                b.insert(b.end(), tb.begin(), tb.end());
                b.push_back(seed);
            };
            tx(0, 5);
            for (int i = 0; i < 100; ++i) b.push_back(static_cast<std::uint8_t>(i * 29 + mcs));
            b.push_back(0);  // no changes
            tx(2, 6);
            b.push_back(3);
            for (std::uint16_t at : {10, 200, 1000}) {
                const bytes a = be16(at);
                b.insert(b.end(), a.begin(), a.end());
                b.push_back(4);  // negate the RE
            }
            write("tb_codec", std::string(conv ? "conv" : "ldpc") + "_mcs" + std::to_string(mcs),
                  b);
        }
    bytes raw = {0x00, 3, 0x40, 0, 49, 9};
    for (int i = 0; i < 4000; ++i) raw.push_back(static_cast<std::uint8_t>((i * 97) ^ (i >> 3)));
    write("tb_codec", "raw", raw);
}

// fuzz_phy_rx.cc's synthesised slot: header fields, TB, lead, gain, CFO, SNR, noise seed.
bytes phy_synth(std::uint8_t control, std::uint8_t f, std::uint16_t tb_bytes, std::uint8_t cfo,
                std::uint8_t snr_byte) {
    bytes b = cat({{control}, be16(12), {f, 3}, be32(4242), be16(tb_bytes)});
    for (std::uint16_t i = 0; i < tb_bytes; ++i) b.push_back(static_cast<std::uint8_t>(i * 31));
    b = cat({b, be16(300), {128, cfo, snr_byte}, be32(0x1234567), {0}});
    if (control & 2u)  // chunk sizes
        for (std::uint16_t c : {100, 1000, 7, 2500, 1, 3000, 3000, 3000}) b = cat({b, be16(c)});
    return b;
}

void phy_rx_seeds() {
    using namespace gr::oppsched;
    write("phy_rx", "synth_mcs0", phy_synth(0x01, 0x00 | 0x20, 20, 0, 160));
    write("phy_rx", "synth_mcs4_cfo", phy_synth(0x01, 0x04 | 0x08, 200, 20, 200));
    write("phy_rx", "synth_mcs7_twice_chunked", phy_synth(0x03, 0x07 | 0x80, 500, 0xf0, 220));
    write("phy_rx", "synth_mcs2_low_snr_uplink", phy_synth(0x01, 0x02 | 0x40, 60, 3, 56));
    write("phy_rx", "synth_no_payload", phy_synth(0x01, 0x00, 0, 0, 180));
    // A modulated slot as int8 samples (x 32), behind 200 zeros: a real slot to mutate.
    const numerology n{numerology_params{}};
    header_codec hdr(n);
    tb_encoder enc(n);
    ofdm_modulator mod(n);
    header_fields h;
    h.user = 1;
    h.mcs = 3;
    h.tb_bytes = 80;
    h.slot = 77;
    std::vector<std::uint8_t> tb(80);
    for (std::size_t i = 0; i < tb.size(); ++i) tb[i] = static_cast<std::uint8_t>(i);
    const auto h_re = hdr.encode(h);
    const auto p_re = enc.encode(tb, h.mcs, h.rv, scrambler::seed_for_slot(h.slot));
    const auto slot = mod.modulate(h_re, p_re);
    bytes raw = {0x00};
    raw.resize(1 + 2 * 200, 0);
    const auto q = [](float x) {
        return static_cast<std::uint8_t>(
            static_cast<std::int8_t>(std::max(-127.0f, std::min(127.0f, std::round(32.0f * x)))));
    };
    for (const auto& x : slot) {
        raw.push_back(q(x.real()));
        raw.push_back(q(x.imag()));
    }
    raw.resize(raw.size() + 2 * slot.size(), 0);
    write("phy_rx", "raw_int8_slot", raw);
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
    wrc_seeds();
    classify_seeds();
    fec_seeds();
    tb_codec_seeds();
    phy_rx_seeds();
    return 0;
}
