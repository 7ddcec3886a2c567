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

std::string hex8(std::uint32_t v) {
    char b[5];
    std::snprintf(b, sizeof b, "0x%02x", v & 0xFFu);
    return b;
}

}  // namespace

const char* to_string(pdu_format f) { return f == pdu_format::compact ? "compact" : "standard"; }

std::optional<pdu_format> pdu_format_from_string(const std::string& name) {
    if (name == "standard") return pdu_format::standard;
    if (name == "compact") return pdu_format::compact;
    return std::nullopt;
}

std::size_t pdu_min_bytes(const mac_pdu& pdu) {
    std::size_t n = kMinPduBytes + (pdu.header.session ? kSessionBytes : 0);
    for (const auto& s : pdu.segments) n += kSegmentHeaderBytes + s.data.size();
    return n;
}

void write_header_and_crc(std::uint8_t* b, std::size_t tb_bytes, const pdu_header& h,
                          std::uint16_t n_segments, std::uint16_t payload_len) {
    b[0] = kVersion;
    b[1] = static_cast<std::uint8_t>((h.price_s ? kFlagPrice : 0) | (h.session ? kFlagSession : 0));
    if (h.session) write_session_trailer(b, tb_bytes, pdu_format::standard, *h.session);
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
    std::size_t trailer = kCrcBytes;
    if (d[1] & kFlagSession) {
        if (len < kMinPduBytes + kSessionBytes)
            return err("pdu.length", len, "bytes, need >= 22 with SESSION set");
        trailer += kSessionBytes;
        v.header.session = load_be16(d + len - trailer);
    }
    const std::size_t n = load_be16(d + 12);
    const std::size_t payload_len = load_be16(d + 14);
    const std::size_t room = len - kHeaderBytes - trailer;
    if (payload_len > room)
        return err("pdu.payload_len", payload_len,
                   ("exceeds the " + std::to_string(room) + " bytes available").c_str());
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
    v.padding = len - trailer - end;
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

// ---------------------------------------------------------------------------------------
// Compact format

std::optional<pdu_format> format_of(std::uint8_t b) {
    if (b == kVersion) return pdu_format::standard;
    if ((b & kCompactMarkerMask) == kCompactMarker) return pdu_format::compact;
    return std::nullopt;
}

std::size_t data_capacity(pdu_format f, std::size_t tb_bytes, bool priced) {
    if (tb_bytes < min_usable_tb_bytes(f)) return 0;
    if (f == pdu_format::standard) return tb_bytes - kMinPduBytes - kSegmentHeaderBytes;
    const std::size_t with_price = kCompactHeaderBytes + kCompactPriceBytes;
    if (priced && tb_bytes > with_price) return tb_bytes - with_price;
    return tb_bytes - kCompactHeaderBytes;  // the price would leave no byte: left out
}

expected<std::optional<std::size_t>> ip_packet_length(const std::uint8_t* p, std::size_t avail,
                                                      const std::string& prefix) {
    if (p == nullptr || avail == 0) return err(prefix + "length", 0, "bytes, need >= 1");
    const unsigned version = p[0] >> 4;
    if (version == 4) {
        const std::size_t ihl = p[0] & 0x0Fu;
        if (ihl < 5) return err(prefix + "ipv4_ihl", ihl, "is below 5 (a 20-byte header)");
        if (avail < 4) return std::optional<std::size_t>{};
        const std::size_t total = load_be16(p + 2);
        if (total < 4 * ihl)
            return err(prefix + "ipv4_total_length", total,
                       ("is below the header's " + std::to_string(4 * ihl) + " bytes (IHL " +
                        std::to_string(ihl) + ")")
                           .c_str());
        return std::optional<std::size_t>{total};
    }
    if (version == 6) {
        if (avail < 6) return std::optional<std::size_t>{};
        const std::size_t payload = load_be16(p + 4);
        if (payload + 40 > kMaxPacketBytes)
            return err(prefix + "ipv6_payload_length", payload,
                       "+ 40 exceeds 65535 (jumbograms are not carried)");
        return std::optional<std::size_t>{payload + 40};
    }
    return err(prefix + "version", version, "is not 4 (IPv4) or 6 (IPv6)");
}

namespace {

std::string packet_field(std::size_t i) { return "pdu.packet[" + std::to_string(i) + "]."; }

}  // namespace

expected<std::vector<std::uint8_t>> serialize_compact(const compact_pdu& pdu,
                                                      std::size_t tb_bytes) {
    if (pdu.seq > kCompactSeqMask) return err("pdu.seq", pdu.seq, "not in [0, 4095]");
    if (pdu.price_s && !price_ok(*pdu.price_s))
        return error_info{"pdu.price: " + std::to_string(*pdu.price_s) +
                          " s is not finite and >= 0"};
    const std::size_t hdr = kCompactHeaderBytes + (pdu.price_s ? kCompactPriceBytes : 0);
    const std::size_t tail = pdu.session ? kSessionBytes : 0;
    if (tb_bytes < hdr + tail + 1 || tb_bytes > kMaxPduBytes)
        return err("pdu.tb_bytes", tb_bytes,
                   ("not in [" + std::to_string(hdr + tail + 1) + ", 65535]").c_str());
    const std::size_t cap = tb_bytes - hdr - tail;
    std::size_t need = pdu.continuation.size();
    for (const auto& p : pdu.packets) need += p.size();
    if (need > cap)
        return err("pdu.tb_bytes", tb_bytes,
                   ("is below the " + std::to_string(hdr + need) + " bytes the PDU needs").c_str());
    // A continuation filling the payload is all the PDU holds: no packet starts, no padding.
    const std::uint16_t first = pdu.packets.empty() && pdu.continuation.size() == cap
                                    ? kCompactNoStart
                                    : static_cast<std::uint16_t>(pdu.continuation.size());
    for (std::size_t i = 0; i < pdu.packets.size(); ++i) {
        const auto& p = pdu.packets[i];
        const std::string f = packet_field(i);
        auto len = ip_packet_length(p.data(), p.size(), f);
        if (!len) return error_info{len.error()};
        const bool last = i + 1 == pdu.packets.size();
        if (len.value() && p.size() > *len.value())
            return err(f + "length", p.size(),
                       ("bytes exceed the " + std::to_string(*len.value()) + " its IP header gives")
                           .c_str());
        const bool whole = len.value() && p.size() == *len.value();
        if (!whole && !last)
            return err(f + "length", p.size(), "bytes: only the last packet may be cut");
        if (!whole && need != cap)
            return err(f + "length", p.size(), "bytes: a cut packet must run to the end of the TB");
    }
    std::vector<std::uint8_t> out(tb_bytes, 0);
    write_compact_header(out.data(), pdu.seq, pdu.price_s, first, pdu.session.has_value());
    if (pdu.session) write_session_trailer(out.data(), tb_bytes, pdu_format::compact, *pdu.session);
    std::size_t pos = hdr;
    if (!pdu.continuation.empty())
        std::memcpy(&out[pos], pdu.continuation.data(), pdu.continuation.size());
    pos += pdu.continuation.size();
    for (const auto& p : pdu.packets) {
        std::memcpy(&out[pos], p.data(), p.size());
        pos += p.size();
    }
    return out;
}

void write_session_trailer(std::uint8_t* b, std::size_t tb_bytes, pdu_format f,
                           std::uint16_t session) {
    const std::size_t at =
        tb_bytes - kSessionBytes - (f == pdu_format::standard ? kCrcBytes : std::size_t{0});
    store_be16(b + at, session);
}

void write_compact_header(std::uint8_t* b, std::uint32_t seq, std::optional<float> price_s,
                          std::uint16_t first, bool session) {
    seq &= kCompactSeqMask;
    b[0] = static_cast<std::uint8_t>(kCompactMarker | (price_s ? kCompactFlagPrice : 0) |
                                     (session ? kCompactFlagSession : 0) | (seq >> 8));
    b[1] = static_cast<std::uint8_t>(seq & 0xFFu);
    store_be16(b + 2, first);
    if (price_s) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &*price_s, 4);
        store_be32(b + 4, bits);
    }
}

expected<compact_view> parse_compact_view(const std::uint8_t* d, std::size_t len) {
    if (d == nullptr || len < kCompactMinPduBytes)
        return err("pdu.length", len, "bytes, need >= 5 (compact format)");
    if (len > kMaxPduBytes) return err("pdu.length", len, "bytes exceeds 65535");
    if ((d[0] & kCompactMarkerMask) != kCompactMarker)
        return error_info{"pdu.format: byte 0 " + hex8(d[0]) + " is not compact (0b10xxxxxx)"};
    compact_view v;
    v.seq = static_cast<std::uint16_t>(((d[0] & 0x0Fu) << 8) | d[1]);
    v.header_bytes = kCompactHeaderBytes;
    const std::size_t tail = (d[0] & kCompactFlagSession) ? kSessionBytes : 0;
    if (tail) {
        if (len <
            kCompactMinPduBytes + tail + ((d[0] & kCompactFlagPrice) ? kCompactPriceBytes : 0))
            return err("pdu.length", len,
                       (d[0] & kCompactFlagPrice) ? "bytes, need >= 11 with PRICE and SESSION set"
                                                  : "bytes, need >= 7 with SESSION set");
        v.session = load_be16(d + len - kSessionBytes);
    }
    if (d[0] & kCompactFlagPrice) {
        if (len < kCompactHeaderBytes + kCompactPriceBytes + 1)
            return err("pdu.length", len, "bytes, need >= 9 with PRICE set");
        const std::uint32_t bits = load_be32(d + 4);
        float price = 0.0f;
        std::memcpy(&price, &bits, 4);
        if (!price_ok(price))
            return error_info{"pdu.price: " + hex32(bits) + " (binary32) is not finite and >= 0"};
        v.price_s = price;
        v.header_bytes += kCompactPriceBytes;
    }
    v.payload = d + v.header_bytes;
    v.payload_len = len - v.header_bytes - tail;
    const std::uint16_t first = load_be16(d + 2);
    if (first == kCompactNoStart) {
        v.continuation = v.payload_len;
        return v;
    }
    if (first >= v.payload_len)
        return err(
            "pdu.first", first,
            ("is not below the " + std::to_string(v.payload_len) + " payload bytes (nor 0xFFFF)")
                .c_str());
    v.first = first;
    v.continuation = first;
    std::size_t pos = first;
    while (pos < v.payload_len) {
        if (v.payload[pos] == 0) {  // IP version 0: the padding starts
            v.padding = v.payload_len - pos;
            break;
        }
        const std::size_t avail = v.payload_len - pos;
        auto l = ip_packet_length(v.payload + pos, avail, packet_field(v.packets.size()));
        if (!l) return error_info{l.error()};
        compact_packet_view p;
        p.offset = pos;
        p.packet_len = l.value();
        p.bytes = p.packet_len ? std::min(*p.packet_len, avail) : avail;
        pos += p.bytes;
        v.packets.push_back(p);
    }
    return v;
}

expected<compact_pdu> parse_compact(const std::uint8_t* data, std::size_t len) {
    auto r = parse_compact_view(data, len);
    if (!r) return error_info{r.error()};
    const compact_view& v = r.value();
    compact_pdu p;
    p.seq = v.seq;
    p.price_s = v.price_s;
    p.session = v.session;
    p.continuation.assign(v.payload, v.payload + v.continuation);
    for (const auto& k : v.packets)
        p.packets.emplace_back(v.payload + k.offset, v.payload + k.offset + k.bytes);
    return p;
}

expected<header_summary> peek_header(const std::uint8_t* d, std::size_t len) {
    if (d == nullptr || len == 0) return err("pdu.length", 0, "bytes, need >= 1");
    const auto f = format_of(d[0]);
    if (!f)
        return error_info{"pdu.format: byte 0 " + hex8(d[0]) +
                          " is neither standard (0x01) nor compact (0b10xxxxxx)"};
    header_summary h;
    h.format = *f;
    std::uint32_t bits = 0;
    if (*f == pdu_format::standard) {
        if (len < kMinPduBytes) return err("pdu.length", len, "bytes, need >= 20");
        h.seq = load_be32(d + 4);
        if ((d[1] & kFlagSession) && len >= kMinPduBytes + kSessionBytes)
            h.session = load_be16(d + len - kCrcBytes - kSessionBytes);
        if (d[1] & kFlagPrice) bits = load_be32(d + 8);
        if (!(d[1] & kFlagPrice)) return h;
    } else {
        if (len < kCompactHeaderBytes) return err("pdu.length", len, "bytes, need >= 4");
        h.seq = ((d[0] & 0x0Fu) << 8) | d[1];
        if ((d[0] & kCompactFlagSession) && len >= kCompactHeaderBytes + kSessionBytes)
            h.session = load_be16(d + len - kSessionBytes);
        if (!(d[0] & kCompactFlagPrice)) return h;
        if (len < kCompactHeaderBytes + kCompactPriceBytes)
            return err("pdu.length", len, "bytes, need >= 8 with PRICE set");
        bits = load_be32(d + 4);
    }
    float price = 0.0f;
    std::memcpy(&price, &bits, 4);
    h.price_s = price;
    return h;
}

}  // namespace oppsched::pdu
