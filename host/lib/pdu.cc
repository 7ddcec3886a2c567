// MAC PDU wire format: see oppsched/pdu.h for the byte-by-byte layout.
#include "oppsched/pdu.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "oppsched/byte_order.h"
#include "oppsched/crc32.h"

namespace oppsched::pdu {
namespace {

error_info err(const std::string& field, std::size_t value, const char* why) {
    return error_info{field + ": " + std::to_string(value) + " " + why};
}
std::string seg_field(std::size_t i, const char* name) {
    return "pdu.segment[" + std::to_string(i) + "]." + name;
}
std::string hex32(std::uint32_t v) {
    char b[11];
    std::snprintf(b, sizeof b, "0x%08x", v);
    return b;
}

bool price_ok(float p) { return std::isfinite(p) && p >= 0.0f; }

// Segment rules shared by serialize() and parse_view(): lengths consistent, only the
// first segment may continue a packet and only the last may leave one unfinished.
std::optional<error_info> check_segment(std::size_t i, std::size_t n, std::size_t packet_len,
                                        std::size_t offset, std::size_t seg_len) {
    if (packet_len == 0) return err(seg_field(i, "packet_len"), 0, "must be >= 1");
    if (seg_len == 0) return err(seg_field(i, "seg_len"), 0, "must be >= 1");
    if (offset + seg_len > packet_len)
        return err(seg_field(i, "seg_len"), seg_len,
                   ("runs past packet_len " + std::to_string(packet_len) + " from offset " +
                    std::to_string(offset))
                       .c_str());
    if (offset != 0 && i != 0)
        return err(seg_field(i, "offset"), offset, "is a continuation but not the first segment");
    if (offset + seg_len != packet_len && i + 1 != n)
        return err(seg_field(i, "seg_len"), seg_len,
                   "leaves the packet unfinished but is not the last segment");
    return std::nullopt;
}

}  // namespace

std::size_t pdu_min_bytes(const mac_pdu& pdu) {
    std::size_t n = kMinPduBytes;
    for (const auto& s : pdu.segments) n += kSegmentHeaderBytes + s.data.size();
    return n;
}

void write_header_and_crc(std::uint8_t* b, std::size_t tb_bytes, const pdu_header& h,
                          std::uint16_t n_segments, std::uint16_t payload_len) {
    b[0] = kVersion;
    b[1] = h.price_s ? kFlagPrice : 0;
    store_be16(b + 2, h.user);
    store_be32(b + 4, h.seq);
    const float price = h.price_s ? *h.price_s : 0.0f;
    std::uint32_t bits = 0;
    static_assert(sizeof(float) == 4, "binary32");
    std::memcpy(&bits, &price, 4);
    store_be32(b + 8, bits);
    store_be16(b + 12, n_segments);
    store_be16(b + 14, payload_len);
    store_be32(b + tb_bytes - kCrcBytes, crc32(b, tb_bytes - kCrcBytes));
}

expected<std::vector<std::uint8_t>> serialize(const mac_pdu& pdu, std::size_t tb_bytes) {
    if (tb_bytes < kMinPduBytes || tb_bytes > kMaxPduBytes)
        return err("pdu.tb_bytes", tb_bytes, "not in [20, 65535]");
    if (pdu.header.price_s && !price_ok(*pdu.header.price_s))
        return error_info{"pdu.price: " + std::to_string(*pdu.header.price_s) +
                          " s is not finite and >= 0"};
    if (pdu.segments.size() > 0xFFFFu)
        return err("pdu.n_segments", pdu.segments.size(), "exceeds 65535");
    const std::size_t need = pdu_min_bytes(pdu);
    if (need > tb_bytes)
        return err("pdu.tb_bytes", tb_bytes,
                   ("is below the " + std::to_string(need) + " bytes the segments need").c_str());
    std::vector<std::uint8_t> out(tb_bytes, 0);
    std::size_t pos = kHeaderBytes;
    const std::size_t n = pdu.segments.size();
    for (std::size_t i = 0; i < n; ++i) {
        const pdu_segment& s = pdu.segments[i];
        if (s.data.size() > kMaxPacketBytes)
            return err(seg_field(i, "seg_len"), s.data.size(), "exceeds 65535");
        if (auto e = check_segment(i, n, s.packet_len, s.offset, s.data.size())) return *e;
        store_be16(&out[pos], s.packet_seq);
        store_be16(&out[pos + 2], s.packet_len);
        store_be16(&out[pos + 4], s.offset);
        store_be16(&out[pos + 6], static_cast<std::uint16_t>(s.data.size()));
        std::memcpy(&out[pos + kSegmentHeaderBytes], s.data.data(), s.data.size());
        pos += kSegmentHeaderBytes + s.data.size();
    }
    write_header_and_crc(out.data(), tb_bytes, pdu.header, static_cast<std::uint16_t>(n),
                         static_cast<std::uint16_t>(pos - kHeaderBytes));
    return out;
}

expected<pdu_view> parse_view(const std::uint8_t* d, std::size_t len) {
    if (d == nullptr || len < kMinPduBytes) return err("pdu.length", len, "bytes, need >= 20");
    if (len > kMaxPduBytes) return err("pdu.length", len, "bytes exceeds 65535");
    const std::uint32_t crc_wire = load_be32(d + len - kCrcBytes);
    const std::uint32_t crc_calc = crc32(d, len - kCrcBytes);
    if (crc_wire != crc_calc)
        return error_info{"pdu.crc32: " + hex32(crc_wire) + " does not match the computed " +
                          hex32(crc_calc)};
    if (d[0] != kVersion) return err("pdu.version", d[0], "is not 1");
    if (d[1] & ~kFlagsKnown) return err("pdu.flags", d[1], "has reserved bits set");
    pdu_view v;
    v.header.user = load_be16(d + 2);
    v.header.seq = load_be32(d + 4);
    const std::uint32_t bits = load_be32(d + 8);
    float price = 0.0f;
    std::memcpy(&price, &bits, 4);
    if (!price_ok(price))
        return error_info{"pdu.price: " + hex32(bits) + " (binary32) is not finite and >= 0"};
    if (d[1] & kFlagPrice) v.header.price_s = price;
    const std::size_t n = load_be16(d + 12);
    const std::size_t payload_len = load_be16(d + 14);
    if (payload_len > len - kMinPduBytes)
        return err(
            "pdu.payload_len", payload_len,
            ("exceeds the " + std::to_string(len - kMinPduBytes) + " bytes available").c_str());
    // Each segment takes >= 9 bytes, so n is bounded by the payload before reserving.
    if (n * (kSegmentHeaderBytes + 1) > payload_len)
        return err("pdu.n_segments", n,
                   ("cannot fit in payload_len " + std::to_string(payload_len)).c_str());
    v.segments.reserve(n);
    std::size_t pos = kHeaderBytes;
    const std::size_t end = kHeaderBytes + payload_len;
    for (std::size_t i = 0; i < n; ++i) {
        if (end - pos < kSegmentHeaderBytes)
            return err(seg_field(i, "header"), end - pos, "bytes left in payload_len, need 8");
        segment_view s;
        s.packet_seq = load_be16(d + pos);
        s.packet_len = load_be16(d + pos + 2);
        s.offset = load_be16(d + pos + 4);
        s.seg_len = load_be16(d + pos + 6);
        if (s.seg_len > end - pos - kSegmentHeaderBytes)
            return err(seg_field(i, "seg_len"), s.seg_len, "runs past payload_len");
        if (auto e = check_segment(i, n, s.packet_len, s.offset, s.seg_len)) return *e;
        s.data = d + pos + kSegmentHeaderBytes;
        pos += kSegmentHeaderBytes + s.seg_len;
        v.segments.push_back(s);
    }
    if (pos != end)
        return err("pdu.payload_len", payload_len,
                   ("disagrees with the " + std::to_string(pos - kHeaderBytes) + " bytes of " +
                    std::to_string(n) + " segments")
                       .c_str());
    v.padding = len - kCrcBytes - end;
    return v;
}

expected<mac_pdu> parse(const std::uint8_t* data, std::size_t len) {
    auto r = parse_view(data, len);
    if (!r) return error_info{r.error()};
    mac_pdu p;
    p.header = r->header;
    p.segments.reserve(r->segments.size());
    for (const segment_view& s : r->segments) {
        pdu_segment seg;
        seg.packet_seq = s.packet_seq;
        seg.packet_len = s.packet_len;
        seg.offset = s.offset;
        seg.data.assign(s.data, s.data + s.seg_len);
        p.segments.push_back(std::move(seg));
    }
    return p;
}

}  // namespace oppsched::pdu
