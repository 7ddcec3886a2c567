// Fuzz target: the client's pdu::reassembler (host/include/oppsched/segmentation.h) fed
// arbitrary sequences of PDUs, loss reports and clock steps. The input's first bytes pick the
// parameters (format, window, timeout, memory cap, first sequence number, near a wrap or
// not); then each op byte picks an action. Two modes:
//  - traffic: the AP's segmenter cuts numbered IPv4 packets into TBs of sizes the input
//    picks; ops deliver any TB built so far (so reordered, duplicated, late or never),
//    report any as lost, or step the clock. Invariants, after every call: held_bytes() stays
//    within max_bytes; every packet delivered is byte-identical to one sent, no packet is
//    delivered twice, and they come in the order sent; the counters add up (delivered and
//    delivered_bytes match what was returned; delivered + every drop counter never exceeds
//    the packets sent, each packet counted at most once).
//  - raw: PDUs are the input's bytes (the standard format's CRC recomputed when asked, so
//    the parser's later checks are reached). Invariants: no throw, held_bytes() within
//    max_bytes, delivered packets non-empty IP-sized, the delivered counters add up, every
//    PDU is counted once (accepted, duplicate or malformed).
#include <map>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/byte_order.h"
#include "oppsched/crc32.h"
#include "oppsched/segmentation.h"

using namespace oppsched;
using oppsched::fuzz::input_reader;

namespace {

constexpr std::uint16_t kUser = 7;
constexpr std::size_t kPacketIdAt = 20;  // the packet's number, 8 bytes after its IPv4 header

// IPv4 packet number `id` of `len` bytes (>= 28): a valid header, the id, a pattern.
std::vector<std::uint8_t> make_packet(std::uint64_t id, std::size_t len) {
    std::vector<std::uint8_t> p(len);
    p[0] = 0x45;
    store_be16(&p[2], static_cast<std::uint16_t>(len));
    p[8] = 64;
    p[9] = 17;
    store_be64(&p[kPacketIdAt], id);
    for (std::size_t i = kPacketIdAt + 8; i < len; ++i)
        p[i] = static_cast<std::uint8_t>(id * 31 + i);
    return p;
}

struct checker {
    const pdu::reassembler& r;
    std::uint64_t delivered = 0, delivered_bytes = 0;
    void common(const pdu::reassembler::delivered_packets& out) {
        FUZZ_CHECK(r.held_bytes() <= r.params().max_bytes, "memory stays within max_bytes");
        for (const auto& p : out) {
            FUZZ_CHECK(!p.empty() && p.size() <= pdu::kMaxPacketBytes,
                       "a delivered packet is 1..65535 bytes");
            delivered_bytes += p.size();
        }
        delivered += out.size();
        const pdu::reassembler_stats& s = r.stats();
        FUZZ_CHECK(s.delivered == delivered, "stats.delivered counts the packets returned");
        FUZZ_CHECK(s.delivered_bytes == delivered_bytes,
                   "stats.delivered_bytes counts the bytes returned");
    }
};

std::uint64_t drops(const pdu::reassembler_stats& s) {
    return s.dropped_incomplete + s.dropped_timeout + s.dropped_memory + s.dropped_late;
}

void traffic(input_reader& in, pdu::reassembler& r, const pdu::reassembler_params& rp,
             pdu::pdu_format format) {
    pdu::segmenter_params sp;
    sp.user = kUser;
    sp.first_seq = rp.first_seq;
    sp.first_packet_seq = rp.first_packet_seq;
    sp.format = format;
    pdu::segmenter seg(sp);
    std::vector<std::vector<std::uint8_t>> sent_packets;
    std::vector<pdu::built_tb> tbs;
    checker c{r};
    std::uint64_t next_expected_id = 0;  // delivered ids only go up
    time_ns now = 0;
    const auto take = [&](const pdu::reassembler::delivered_packets& out) {
        c.common(out);
        for (const auto& p : out) {
            FUZZ_CHECK(p.size() >= kPacketIdAt + 8, "a delivered packet is one that was sent");
            const std::uint64_t id = load_be64(&p[kPacketIdAt]);
            FUZZ_CHECK(id < sent_packets.size() && p == sent_packets[id],
                       "a delivered packet is byte-identical to the one sent");
            FUZZ_CHECK(id >= next_expected_id, "no packet twice, and in the order sent");
            next_expected_id = id + 1;
        }
        FUZZ_CHECK(r.stats().delivered + drops(r.stats()) <= sent_packets.size(),
                   "each packet is delivered or counted lost at most once");
    };
    const std::size_t min_tb = pdu::min_usable_tb_bytes(format);
    while (!in.empty()) {
        const std::uint8_t op = in.u8();
        switch (op % 8) {
            case 0:
            case 1: {  // the AP builds the next TB
                const std::size_t tb_bytes = min_tb + in.u16() % 1500;
                int budget = in.u8() % 4;  // packets the queue offers
                const pdu::packet_source source = [&]() -> std::optional<ip_packet> {
                    if (budget-- <= 0) return std::nullopt;
                    ip_packet p;
                    p.id = sent_packets.size();
                    p.data = make_packet(p.id, 28 + in.u16() % 3000);
                    sent_packets.push_back(p.data);
                    return p;
                };
                std::optional<float> price;
                if (op & 8u) price = 0.001f * (op >> 4);
                tbs.push_back(seg.build(tb_bytes, source, price));
                break;
            }
            case 2:
            case 3:
            case 4: {  // one of them arrives (again, late, out of order ...)
                if (tbs.empty()) break;
                const auto& tb = tbs[in.u16() % tbs.size()];
                take(r.on_pdu(tb.bytes, now));
                break;
            }
            case 5: {  // the AP reports one lost
                if (tbs.empty()) break;
                take(r.on_lost(tbs[in.u16() % tbs.size()].record.seq, now));
                break;
            }
            case 6:
                now += time_ns{in.u16()} * 10'000;  // up to 655 ms
                take(r.poll(now));
                break;
            default:
                if (seg.has_partial() && (op & 8u)) seg.abandon_partial();
                break;
        }
    }
}

void raw(input_reader& in, pdu::reassembler& r) {
    checker c{r};
    time_ns now = 0;
    std::uint64_t pdus = 0;
    std::uint64_t pdus_far_ahead = 0;  // far_ahead counts loss reports too: the PDUs' share
    while (!in.empty()) {
        const std::uint8_t op = in.u8();
        switch (op % 4) {
            case 0:
            case 1: {
                std::vector<std::uint8_t> b = in.bytes(in.u16() % 2048);
                if ((op & 4u) && b.size() >= pdu::kMinPduBytes)
                    store_be32(&b[b.size() - 4], crc32(b.data(), b.size() - 4));
                std::string error;
                const std::uint64_t far_before = r.stats().far_ahead;
                c.common(r.on_pdu(b.data(), b.size(), now, &error));
                pdus_far_ahead += r.stats().far_ahead - far_before;
                ++pdus;
                break;
            }
            case 2: {
                const auto delta = static_cast<std::int16_t>(in.u16());
                c.common(r.on_lost(r.next_seq() + static_cast<std::uint32_t>(delta), now));
                break;
            }
            default:
                now += time_ns{in.u16()} * 10'000;
                c.common(r.poll(now));
                break;
        }
        const pdu::reassembler_stats& s = r.stats();
        FUZZ_CHECK(s.tbs_received + s.duplicates + s.tbs_late + s.malformed + s.stale_session +
                           pdus_far_ahead ==
                       pdus,
                   "every PDU is counted once: accepted, duplicate, late, malformed, of a replaced "
                   "session or far ahead");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    input_reader in(data, size);
    const std::uint8_t mode = in.u8();
    const pdu::pdu_format format =
        (mode & 2u) ? pdu::pdu_format::compact : pdu::pdu_format::standard;
    pdu::reassembler_params rp;
    if (!(mode & 1u)) rp.user = kUser;  // raw PDUs may name any user
    rp.window = 1 + in.u16() % 3000;
    rp.timeout = (1 + in.u8()) * kNsPerMs;
    rp.max_bytes = pdu::kMaxPacketBytes + std::size_t{in.u16()} * 8;
    const std::uint32_t first = in.u32();
    // Near a wrap of the sequence numbers, or anywhere.
    rp.first_seq = format == pdu::pdu_format::compact ? first & pdu::kCompactSeqMask : first;
    if (mode & 4u)
        rp.first_seq = (format == pdu::pdu_format::compact ? 4096u : 0u) - 1 - (first & 7);
    if (format == pdu::pdu_format::compact) rp.first_seq &= pdu::kCompactSeqMask;
    rp.first_packet_seq = static_cast<std::uint16_t>(in.u16());
    pdu::reassembler r(rp);
    if (mode & 1u)
        raw(in, r);
    else
        traffic(in, r, rp, format);
    return 0;
}
