// TCP/IP header tools: see oppsched/tcpip.h.
#include "oppsched/tcpip.h"

#include <sodium.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "oppsched/byte_order.h"
#include "oppsched/validation.h"

namespace oppsched::tcpip {
namespace {

error_info err(const char* field, std::size_t value, const char* why) {
    return error_info{std::string(field) + ": " + std::to_string(value) + " " + why};
}

// One's-complement sum of bytes (big-endian 16-bit words, odd byte padded with zero),
// not folded: the caller folds. Safe for any length below 2^31 bytes.
std::uint64_t sum_bytes(const std::uint8_t* p, std::size_t n, std::uint64_t acc = 0) {
    std::size_t i = 0;
    for (; i + 1 < n; i += 2) acc += load_be16(p + i);
    if (i < n) acc += std::uint64_t{p[i]} << 8;
    return acc;
}
std::uint16_t fold(std::uint64_t s) {
    while (s >> 16) s = (s & 0xFFFFu) + (s >> 16);
    return static_cast<std::uint16_t>(s);
}

// Parses the TCP header at [off, end). `end` is the end of the IP payload.
std::optional<error_info> parse_tcp(const std::uint8_t* d, std::size_t off, std::size_t end,
                                    tcp_header& t) {
    if (end < off || end - off < 20) return err("tcp.header", end - off, "bytes left, need >= 20");
    const std::uint8_t* h = d + off;
    const std::size_t hl = static_cast<std::size_t>(h[12] >> 4) * 4;
    if (hl < 20) return err("tcp.data_offset", hl / 4, "words, need >= 5");
    if (hl > end - off) return err("tcp.data_offset", hl / 4, "words runs past the IP payload");
    t.offset = off;
    t.header_len = hl;
    t.payload_len = end - off - hl;
    t.seq = load_be32(h + 4);
    t.ack = load_be32(h + 8);
    t.flags = h[13];
    t.window = load_be16(h + 14);
    t.checksum = load_be16(h + 16);

    // Options (RFC 9293 §3.1, RFC 7323, RFC 2018): every length checked against `oe`.
    std::size_t i = 20;
    while (i < hl) {
        const std::uint8_t kind = h[i];
        if (kind == 0) break;  // EOL: the rest is padding
        if (kind == 1) {
            ++i;
            continue;
        }  // NOP
        if (i + 1 >= hl) return err("tcp.option.length", kind, "(kind) has no length byte");
        const std::size_t olen = h[i + 1];
        if (olen < 2) return err("tcp.option.length", olen, "is below 2");
        if (olen > hl - i) return err("tcp.option.length", olen, "runs past the TCP header");
        const std::uint8_t* o = h + i;
        switch (kind) {
            case 2:
                if (olen != 4) return err("tcp.option.mss.length", olen, "is not 4");
                t.mss = load_be16(o + 2);
                break;
            case 3:
                if (olen != 3) return err("tcp.option.wscale.length", olen, "is not 3");
                t.wscale = o[2];
                break;
            case 4:
                if (olen != 2) return err("tcp.option.sack_permitted.length", olen, "is not 2");
                t.sack_permitted = true;
                break;
            case 5:
                if (olen < 10 || (olen - 2) % 8 != 0 || olen > 34)
                    return err("tcp.option.sack.length", olen, "is not 2 + 8n, n in 1..4");
                for (std::size_t b = 2; b < olen; b += 8)
                    t.sack_blocks.emplace_back(load_be32(o + b), load_be32(o + b + 4));
                break;
            case 8:
                if (olen != 10) return err("tcp.option.timestamp.length", olen, "is not 10");
                t.timestamp = std::make_pair(load_be32(o + 2), load_be32(o + 6));
                break;
            default:
                break;  // unknown kind: skipped by its (checked) length
        }
        i += olen;
    }
    return std::nullopt;
}

}  // namespace

bool flow_key::operator==(const flow_key& o) const {
    return ip_version == o.ip_version && proto == o.proto && sport == o.sport && dport == o.dport &&
           src == o.src && dst == o.dst;
}

flow_key flow_key::reversed() const {
    flow_key r = *this;
    std::swap(r.src, r.dst);
    std::swap(r.sport, r.dport);
    return r;
}

std::size_t flow_key_hash::operator()(const flow_key& k) const {
    // Eight bytes at a time with a multiply-xorshift mix: a handful of cycles for a v4 key.
    auto mix = [](std::uint64_t h, std::uint64_t v) {
        h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
        return h ^ (h >> 31);
    };
    std::uint64_t h = (std::uint64_t{k.ip_version} << 40) | (std::uint64_t{k.proto} << 32) |
                      (std::uint64_t{k.sport} << 16) | k.dport;
    const std::size_t n = k.ip_version == 6 ? 16 : 4;
    for (const auto* a : {&k.src, &k.dst}) {
        for (std::size_t i = 0; i < n; i += 8) {
            std::uint64_t w = 0;
            std::memcpy(&w, a->data() + i, n - i < 8 ? n - i : 8);
            h = mix(h, w);
        }
    }
    return static_cast<std::size_t>(h);
}

keyed_flow_hash::keyed_flow_hash(std::uint64_t seed) {
    if (sodium_init() < 0) throw std::runtime_error("libsodium: sodium_init failed");
    // The SipHash key from the seed through SplitMix64 (Steele, Lea & Flood's generator, as
    // in java.util.SplittableRandom): two well-mixed words, different for every seed.
    std::uint64_t x = seed;
    for (std::size_t half = 0; half < 2; ++half) {
        std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z ^= z >> 31;
        for (std::size_t i = 0; i < 8; ++i)
            key_[half * 8 + i] = static_cast<std::uint8_t>(z >> (8 * i));
    }
}

std::size_t keyed_flow_hash::operator()(const flow_key& k) const {
    static_assert(crypto_shorthash_KEYBYTES == 16 && crypto_shorthash_BYTES == 8);
    std::array<std::uint8_t, 6 + 2 * 16> in{};
    in[0] = k.ip_version;
    in[1] = k.proto;
    in[2] = static_cast<std::uint8_t>(k.sport >> 8);
    in[3] = static_cast<std::uint8_t>(k.sport);
    in[4] = static_cast<std::uint8_t>(k.dport >> 8);
    in[5] = static_cast<std::uint8_t>(k.dport);
    const std::size_t n = k.ip_version == 6 ? 16 : 4;  // the address bytes in use
    std::memcpy(in.data() + 6, k.src.data(), n);
    std::memcpy(in.data() + 6 + n, k.dst.data(), n);
    unsigned char out[crypto_shorthash_BYTES];
    crypto_shorthash(out, in.data(), 6 + 2 * n, key_.data());
    std::uint64_t h = 0;
    std::memcpy(&h, out, sizeof h);
    return static_cast<std::size_t>(h);
}

expected<packet_info> parse(const std::uint8_t* d, std::size_t len) {
    if (d == nullptr || len == 0) return err("ip.length", len, "bytes, packet is empty");
    packet_info info;
    const std::uint8_t version = d[0] >> 4;
    std::size_t off = 0;    // start of the transport header
    bool transport = true;  // false for non-first fragments and ESP / no-next-header
    std::uint8_t proto = 0;

    if (version == 4) {
        if (len < 20) return err("ipv4.header", len, "bytes, need >= 20");
        const std::size_t ihl = std::size_t{d[0] & 0x0Fu} * 4;
        if (ihl < 20) return err("ipv4.ihl", ihl / 4, "words, need >= 5");
        const std::size_t total = load_be16(d + 2);
        if (total < ihl) return err("ipv4.total_length", total, "is below the header length");
        if (total > len) return err("ipv4.total_length", total, "exceeds the buffer");
        info.ip_version = 4;
        info.ip_header_len = ihl;
        info.total_len = total;
        info.ecn = d[1] & 0x03u;
        proto = d[9];
        std::memcpy(info.flow.src.data(), d + 12, 4);
        std::memcpy(info.flow.dst.data(), d + 16, 4);
        const std::uint16_t frag = load_be16(d + 6);
        const bool more = (frag & 0x2000u) != 0;
        const std::uint16_t frag_off = frag & 0x1FFFu;
        info.is_fragment = more || frag_off != 0;
        transport = frag_off == 0;
        off = ihl;
    } else if (version == 6) {
        if (len < 40) return err("ipv6.header", len, "bytes, need >= 40");
        const std::size_t total = 40 + std::size_t{load_be16(d + 4)};
        if (total > len) return err("ipv6.payload_length", total - 40, "exceeds the buffer");
        info.ip_version = 6;
        info.total_len = total;
        info.ecn = (d[1] >> 4) & 0x03u;
        std::memcpy(info.flow.src.data(), d + 8, 16);
        std::memcpy(info.flow.dst.data(), d + 24, 16);
        std::uint8_t nh = d[6];
        off = 40;
        // Each extension header is >= 8 bytes, so the walk ends within total/8 steps.
        for (;;) {
            if (nh == kIpv6HopByHop || nh == kIpv6Routing || nh == kIpv6DestOpts) {
                if (total - off < 8) return err("ipv6.ext_header", nh, "(type) is truncated");
                const std::size_t hl = (std::size_t{d[off + 1]} + 1) * 8;
                if (hl > total - off)
                    return err("ipv6.ext_header.length", hl, "bytes runs past the payload");
                nh = d[off];
                off += hl;
            } else if (nh == kIpv6Fragment) {
                if (total - off < 8) return err("ipv6.fragment", total - off, "bytes left, need 8");
                const std::uint16_t fo = load_be16(d + off + 2);
                const std::uint16_t frag_off = fo >> 3;
                const bool more = (fo & 1u) != 0;
                info.is_fragment = more || frag_off != 0;  // atomic fragments are whole
                if (frag_off != 0) transport = false;
                nh = d[off];
                off += 8;
            } else if (nh == kIpv6Ah) {
                if (total - off < 8) return err("ipv6.ah", total - off, "bytes left, need >= 8");
                const std::size_t hl = (std::size_t{d[off + 1]} + 2) * 4;  // RFC 4302 §2.2
                if (hl > total - off)
                    return err("ipv6.ah.length", hl, "bytes runs past the payload");
                nh = d[off];
                off += hl;
            } else {
                break;  // upper-layer protocol, ESP or no-next-header
            }
            if (!transport) break;
        }
        proto = nh;
        if (nh == kIpv6Esp || nh == kIpv6NoNext) transport = false;
        info.ip_header_len = off;
    } else {
        return err("ip.version", version, "is neither 4 nor 6");
    }

    info.flow.ip_version = info.ip_version;
    info.flow.proto = proto;
    if (transport && proto == kProtoTcp) {
        tcp_header t;
        if (auto e = parse_tcp(d, off, info.total_len, t)) return *e;
        info.flow.sport = load_be16(d + off);
        info.flow.dport = load_be16(d + off + 2);
        info.tcp = std::move(t);
    } else if (transport && proto == kProtoUdp) {
        if (info.total_len - off < 8)
            return err("udp.header", info.total_len - off, "bytes left, need 8");
        info.flow.sport = load_be16(d + off);
        info.flow.dport = load_be16(d + off + 2);
    }
    return info;
}

bool mark_ce(std::vector<std::uint8_t>& packet, bool not_ect_too) {
    auto r = parse(packet);
    if (!r) return false;
    const packet_info& info = r.value();
    if (info.ecn == kNotEct && !not_ect_too) return false;
    if (info.ecn == kCe) return true;  // already marked: nothing to change
    std::uint8_t* d = packet.data();
    if (info.ip_version == 4) {
        const std::uint16_t old_word = load_be16(d);  // version/IHL + TOS
        d[1] = static_cast<std::uint8_t>(d[1] | kCe);
        const std::uint16_t new_word = load_be16(d);
        const std::uint16_t nc = checksum_update16(load_be16(d + 10), old_word, new_word);
        store_be16(d + 10, nc);
    } else {
        d[1] = static_cast<std::uint8_t>(d[1] | (kCe << 4));  // no IPv6 header checksum
    }
    return true;
}

std::uint16_t ipv4_header_checksum(const std::uint8_t* d, std::size_t ihl) {
    std::uint64_t s = sum_bytes(d, ihl);
    s -= load_be16(d + 10);  // treat the checksum field as zero
    return static_cast<std::uint16_t>(~fold(s));
}

std::uint16_t tcp_checksum(const std::uint8_t* d, const packet_info& info) {
    const std::size_t off = info.tcp ? info.tcp->offset : info.ip_header_len;
    const std::size_t seg_len = info.total_len - off;
    std::uint64_t s = 0;
    if (info.ip_version == 4) {
        s = sum_bytes(d + 12, 8);  // src, dst
    } else {
        s = sum_bytes(d + 8, 32);
    }
    s += kProtoTcp;
    s += seg_len & 0xFFFFu;
    s += seg_len >> 16;
    s = sum_bytes(d + off, seg_len, s);
    s -= load_be16(d + off + 16);  // the checksum field counts as zero
    // s cannot underflow: the field's word was added just above.
    return static_cast<std::uint16_t>(~fold(s));
}

expected<std::uint16_t> set_window(std::uint8_t* packet, std::size_t len, const packet_info& info,
                                   std::uint64_t window_bytes, std::uint8_t shift) {
    if (!info.tcp) return error_info{"tcp: packet has no TCP header"};
    const std::size_t off = info.tcp->offset;
    if (off > len || len - off < 20)
        return err("tcp.offset", off, "leaves < 20 bytes in the packet");
    if (shift > kMaxWindowShift) shift = kMaxWindowShift;
    if (info.tcp->flags & kSyn) shift = 0;  // RFC 7323 §2.2: SYN windows are unscaled
    const std::uint16_t field = window_field_for(window_bytes, shift);
    write_window_field(packet + off, field);
    return field;
}

// ---------------------------------------------------------------------------------------
// window_tracker

void window_tracker_params::validate() const {
    if (max_flows == 0) throw_invalid("window_tracker.max_flows: 0 must be >= 1");
    if (idle_timeout <= 0)
        throw_invalid("window_tracker.idle_timeout: " + std::to_string(idle_timeout) +
                      " ns must be > 0");
}

window_tracker::window_tracker(window_tracker_params params) : params_(params) {
    params_.validate();
    map_.reserve(std::min<std::size_t>(params_.max_flows, 1024));
}

window_tracker::flow_map::iterator window_tracker::find(const flow_key& flow, bool& is_initiator) {
    auto it = map_.find(flow);
    if (it != map_.end()) {
        is_initiator = true;
        return it;
    }
    is_initiator = false;
    return map_.find(flow.reversed());
}

void window_tracker::touch(flow_map::iterator it, time_ns now) {
    it->second.lru->last_seen = now;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
}

void window_tracker::erase(flow_map::iterator it) {
    lru_.erase(it->second.lru);
    map_.erase(it);
}

std::uint8_t window_tracker::shift_of(const flow_entry& e, bool initiator_side) {
    // RFC 7323 §2.2: scaling is enabled only if both sides sent the option.
    if (!e.initiator.ws_option || !e.responder.ws_option) return 0;
    const std::uint8_t s = initiator_side ? *e.initiator.ws_option : *e.responder.ws_option;
    return s > kMaxWindowShift ? kMaxWindowShift : s;
}

void window_tracker::expire(time_ns now) {
    // The LRU list is ordered by last_seen (callers' clocks are monotonic), so expiry pops
    // the back; the common case (nothing to expire) costs one comparison.
    while (!lru_.empty() && now - lru_.back().last_seen > params_.idle_timeout) {
        erase(map_.find(lru_.back().key));
        ++stats_.expired;
    }
}

void window_tracker::learn(const packet_info& info, time_ns now) {
    bool initiator = false;
    (void)learn_find(info, now, initiator);
}

window_tracker::flow_map::iterator window_tracker::learn_find(const packet_info& info, time_ns now,
                                                              bool& initiator) {
    expire(now);
    initiator = false;
    if (!info.tcp) return map_.end();
    const tcp_header& t = *info.tcp;
    auto it = find(info.flow, initiator);
    if (t.flags & kRst) {
        if (it != map_.end()) erase(it);
        return map_.end();
    }
    const bool syn = (t.flags & kSyn) != 0;
    const bool ack = (t.flags & kAck) != 0;
    if (syn && !ack) {
        // A retransmitted SYN (same direction, same ISN) keeps the connection: it may be
        // read after the SYN-ACK that answers the first one has already gone the other way
        // (the SYN's 1-s timer against a SYN-ACK queued about as long), and no SYN-ACK may
        // follow it (the receiver is established by then). Only a new ISN (port reuse)
        // restarts the connection, keyed by the SYN's direction.
        if (it != map_.end() && initiator && it->second.syn_seq == t.seq) {
            ++stats_.syn_retransmits;
            touch(it, now);
            return it;
        }
        if (it != map_.end()) erase(it);
        if (map_.size() >= params_.max_flows) {
            erase(map_.find(lru_.back().key));
            ++stats_.evicted;
        }
        lru_.push_front(lru_node{info.flow, now});
        flow_entry e;
        e.initiator.ws_option = t.wscale;
        e.syn_seq = t.seq;
        e.lru = lru_.begin();
        ++stats_.syns;
        if (t.wscale && *t.wscale > kMaxWindowShift) ++stats_.scale_clamped;
        initiator = true;
        return map_.emplace(info.flow, e).first;
    }
    if (it == map_.end()) return it;
    if (syn && ack && !initiator) {
        flow_entry& e = it->second;
        if (!e.syn_ack_seen) ++stats_.syn_acks;
        e.responder.ws_option = t.wscale;
        e.syn_ack_seen = true;
        // The SYN-ACK's (unscaled) window already advertised a right edge: later ACKs of
        // the responder must not move left of it.
        e.responder.has_edge = true;
        e.responder.max_right_edge = t.ack + t.window;
        if (t.wscale && *t.wscale > kMaxWindowShift) ++stats_.scale_clamped;
    }
    touch(it, now);
    return it;
}

std::optional<std::uint8_t> window_tracker::shift(const flow_key& flow) const {
    auto it = map_.find(flow);
    bool initiator = true;
    if (it == map_.end()) {
        it = map_.find(flow.reversed());
        initiator = false;
    }
    if (it == map_.end() || !it->second.syn_ack_seen) return std::nullopt;
    return shift_of(it->second, initiator);
}

std::optional<std::uint64_t> window_tracker::advertised_bytes(const packet_info& info) const {
    if (!info.tcp) return std::nullopt;
    if (info.tcp->flags & kSyn) return info.tcp->window;  // never scaled
    const auto s = shift(info.flow);
    if (!s) return std::nullopt;
    return std::uint64_t{info.tcp->window} << *s;
}

rewrite_outcome window_tracker::rewrite(std::uint8_t* packet, std::size_t len,
                                        const packet_info& info, std::uint64_t window_bytes,
                                        time_ns now) {
    bool initiator = false;
    auto it = learn_find(info, now, initiator);
    if (!info.tcp || info.is_fragment || !(info.tcp->flags & kAck)) {
        ++stats_.unchanged_other;
        return rewrite_outcome::not_applicable;
    }
    const tcp_header& t = *info.tcp;
    if (t.flags & kSyn) {
        ++stats_.unchanged_syn;
        return rewrite_outcome::syn;
    }
    if (it == map_.end() || !it->second.syn_ack_seen) {
        ++stats_.unchanged_unknown;
        return rewrite_outcome::unknown_flow;
    }
    if (t.offset > len || len - t.offset < 20) {
        ++stats_.unchanged_other;
        return rewrite_outcome::not_applicable;
    }
    flow_entry& e = it->second;
    direction_state& dir = initiator ? e.initiator : e.responder;
    const std::uint8_t shift = shift_of(e, initiator);
    const std::uint64_t max_window = std::uint64_t{0xFFFF} << shift;
    if (window_bytes > max_window) {
        window_bytes = max_window;
        ++stats_.window_clamped;
    }
    std::uint32_t field = window_field_for(window_bytes, shift);
    if (dir.has_edge) {
        // Serial-number arithmetic (RFC 1982): how far the remembered right edge lies
        // beyond this ACK. Negative means this ACK is already past it: no constraint.
        const auto ahead = static_cast<std::int32_t>(dir.max_right_edge - t.ack);
        if (ahead > 0) {
            const std::uint64_t g = std::uint64_t{1} << shift;
            std::uint64_t need = (static_cast<std::uint64_t>(ahead) + g - 1) >> shift;
            if (need > 0xFFFFu) need = 0xFFFFu;  // an old ACK far behind: best effort
            if (need > field) {
                field = static_cast<std::uint32_t>(need);
                ++stats_.right_edge_held;
            }
        }
    }
    write_window_field(packet + t.offset, static_cast<std::uint16_t>(field));
    const std::uint32_t edge = t.ack + (field << shift);
    if (!dir.has_edge || static_cast<std::int32_t>(edge - dir.max_right_edge) > 0) {
        dir.max_right_edge = edge;
        dir.has_edge = true;
    }
    ++stats_.rewritten;
    return rewrite_outcome::rewritten;
}

}  // namespace oppsched::tcpip
