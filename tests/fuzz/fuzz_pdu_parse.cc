// Fuzz target: the MAC PDU parsers (host/include/oppsched/pdu.h): pdu::parse_view / parse
// (standard format) and parse_compact_view / parse_compact, and peek_header. The first input
// byte steers, the rest is the TB. With bit 0 set the CRC-32 of a standard PDU is recomputed
// over the mutated bytes, so the segment checks are reached. Invariants: no parser throws
// or reads outside the TB; every view lies inside the TB; an accepted PDU serialises again
// into a TB of the same size and parses back to the same fields and bytes; errors name a
// field. The integrity tag (integrity.h): the TB with its tag appended verifies, and with
// any one of its bytes changed (the one the input's size picks) it does not.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "oppsched/byte_order.h"
#include "oppsched/crc32.h"
#include "oppsched/integrity.h"
#include "oppsched/pdu.h"

using namespace oppsched;

namespace {

bool same_float(const std::optional<float>& a, const std::optional<float>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || std::memcmp(&*a, &*b, sizeof(float)) == 0;
}

bool same(const pdu::mac_pdu& a, const pdu::mac_pdu& b) {
    if (a.header.user != b.header.user || a.header.seq != b.header.seq ||
        !same_float(a.header.price_s, b.header.price_s) || a.header.session != b.header.session ||
        a.segments.size() != b.segments.size())
        return false;
    for (std::size_t i = 0; i < a.segments.size(); ++i) {
        const auto &x = a.segments[i], &y = b.segments[i];
        if (x.packet_seq != y.packet_seq || x.packet_len != y.packet_len || x.offset != y.offset ||
            x.data != y.data)
            return false;
    }
    return true;
}

bool same(const pdu::compact_pdu& a, const pdu::compact_pdu& b) {
    return a.seq == b.seq && same_float(a.price_s, b.price_s) && a.continuation == b.continuation &&
           a.packets == b.packets && a.session == b.session;
}

void check_error(const std::string& e) { FUZZ_CHECK(e.find(": ") != std::string::npos, e.c_str()); }

void standard(const std::vector<std::uint8_t>& tb) {
    const std::uint8_t* end = tb.data() + tb.size();
    const expected<pdu::pdu_view> v = pdu::parse_view(tb.data(), tb.size());
    const expected<pdu::mac_pdu> p = pdu::parse(tb.data(), tb.size());
    FUZZ_CHECK(v.ok() == p.ok(), "parse and parse_view agree");
    if (!v.ok()) {
        check_error(v.error());
        return;
    }
    // The CRC, and before it the session trailer when SESSION is set.
    const std::size_t tail = pdu::kCrcBytes + (v->header.session ? pdu::kSessionBytes : 0);
    std::size_t bytes = pdu::kHeaderBytes;
    for (const pdu::segment_view& s : v->segments) {
        FUZZ_CHECK(s.seg_len >= 1 && std::size_t{s.offset} + s.seg_len <= s.packet_len,
                   "a segment lies inside its packet");
        FUZZ_CHECK(s.data >= tb.data() + pdu::kHeaderBytes && s.data + s.seg_len <= end - tail,
                   "a segment view lies inside the TB, before the session and the CRC");
        bytes += pdu::kSegmentHeaderBytes + s.seg_len;
    }
    FUZZ_CHECK(bytes + v->padding + tail == tb.size(),
               "header, segments, padding, session and CRC fill the TB");
    const expected<std::vector<std::uint8_t>> again = pdu::serialize(p.value(), tb.size());
    FUZZ_CHECK(again.ok(), again.ok() ? "" : again.error().c_str());
    const expected<pdu::mac_pdu> back = pdu::parse(again.value());
    FUZZ_CHECK(back.ok() && same(back.value(), p.value()),
               "an accepted PDU serialises and parses back");
}

void compact(const std::vector<std::uint8_t>& tb) {
    const expected<pdu::compact_view> v = pdu::parse_compact_view(tb.data(), tb.size());
    const expected<pdu::compact_pdu> p = pdu::parse_compact(tb.data(), tb.size());
    FUZZ_CHECK(v.ok() == p.ok(), "parse_compact and parse_compact_view agree");
    if (!v.ok()) {
        check_error(v.error());
        return;
    }
    const std::size_t trailer = v->session ? pdu::kSessionBytes : 0;
    FUZZ_CHECK(v->header_bytes + v->payload_len + trailer == tb.size(),
               "header, payload and the session trailer fill the TB");
    FUZZ_CHECK(v->continuation <= v->payload_len, "the continuation lies inside the payload");
    std::size_t at = v->continuation;
    for (const pdu::compact_packet_view& k : v->packets) {
        FUZZ_CHECK(k.offset >= at && k.bytes >= 1 && k.offset + k.bytes <= v->payload_len,
                   "packets lie inside the payload, in order, without overlap");
        if (k.packet_len) FUZZ_CHECK(k.bytes <= *k.packet_len, "no packet longer than its header");
        at = k.offset + k.bytes;
    }
    FUZZ_CHECK(at + v->padding <= v->payload_len, "the padding follows the packets");
    const expected<std::vector<std::uint8_t>> again = pdu::serialize_compact(p.value(), tb.size());
    FUZZ_CHECK(again.ok(), again.ok() ? "" : again.error().c_str());
    const expected<pdu::compact_pdu> back = pdu::parse_compact(again.value());
    FUZZ_CHECK(back.ok() && same(back.value(), p.value()),
               "an accepted compact PDU serialises and parses back");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::uint8_t control = data[0];
    // An exact-size heap copy, so an overread leaves the allocation (ASan reports it).
    std::vector<std::uint8_t> tb(data + 1, data + size);
    if ((control & 1u) && tb.size() >= pdu::kMinPduBytes)
        store_be32(&tb[tb.size() - 4], crc32(tb.data(), tb.size() - 4));
    standard(tb);
    compact(tb);
    const expected<pdu::header_summary> h = pdu::peek_header(tb.data(), tb.size());
    if (!h.ok()) check_error(h.error());
    integrity::tag_key key{};
    key[0] = control;
    std::vector<std::uint8_t> tagged = tb;
    integrity::append_tag(key, tagged);
    FUZZ_CHECK(integrity::verify(key, tagged.data(), tagged.size()), "tag of its own TB fails");
    tagged[size % tagged.size()] ^= 0x01;
    FUZZ_CHECK(!integrity::verify(key, tagged.data(), tagged.size()), "altered TB verifies");
    return 0;
}
