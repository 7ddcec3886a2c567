// WRC data and feedback packets. See wrc_packet.h.
#include "oppsched/wrc_packet.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "oppsched/byte_order.h"
#include "oppsched/validation.h"

namespace oppsched::wrc {
namespace {

void check_room(std::size_t len) {
    if (len < kHeaderBytes) throw_invalid("wrc.packet_bytes", len, "< the 32-byte header");
}

void put_common(std::uint8_t* out, std::size_t len, packet_type t, std::uint32_t flow) {
    std::memset(out, 0, len);
    store_be16(out, kMagic);
    out[2] = kVersion;
    out[3] = static_cast<std::uint8_t>(t);
    store_be32(out + 4, flow);
}

std::string hex(unsigned v, int digits) {
    char b[16];
    std::snprintf(b, sizeof b, "0x%0*x", digits, v);
    return b;
}

error_info bad(const std::string& field, const std::string& value, const std::string& why) {
    return error_info{"wrc." + field + ": " + value + " " + why};
}

}  // namespace

void encode(const data_header& h, std::uint8_t* out, std::size_t len) {
    check_room(len);
    put_common(out, len, packet_type::data, h.flow_id);
    store_be32(out + 8, h.seq);
    store_be32(out + 12, h.rate_seq);
    store_be64(out + 16, h.send_time_ns);
    store_be32(out + 24, h.snd_sep_us);
    store_be16(out + 28, h.weight);
}

void encode(const feedback_header& h, std::uint8_t* out, std::size_t len) {
    check_room(len);
    put_common(out, len, packet_type::feedback, h.flow_id);
    store_be32(out + 8, h.rate_seq);
    store_be32(out + 12, h.rate_mpps);
    store_be32(out + 16, h.echo_seq);
    store_be32(out + 20, h.epoch);
}

expected<message> decode(const std::uint8_t* p, std::size_t len) {
    if (p == nullptr || len < kHeaderBytes)
        return bad("length", std::to_string(len), "bytes < the 32-byte header");
    const std::uint16_t magic = load_be16(p);
    if (magic != kMagic) return bad("magic", hex(magic, 4), "is not " + hex(kMagic, 4));
    if (p[2] != kVersion) return bad("version", std::to_string(p[2]), "is not 1");
    const std::uint32_t flow = load_be32(p + 4);
    switch (p[3]) {
        case static_cast<std::uint8_t>(packet_type::data): {
            data_header h;
            h.flow_id = flow;
            h.seq = load_be32(p + 8);
            h.rate_seq = load_be32(p + 12);
            h.send_time_ns = load_be64(p + 16);
            h.snd_sep_us = load_be32(p + 24);
            h.weight = load_be16(p + 28);
            if (h.snd_sep_us == 0) return bad("snd_sep_us", "0", "is not > 0");
            if (h.weight == 0) return bad("weight", "0", "is not >= 1");
            return message{h};
        }
        case static_cast<std::uint8_t>(packet_type::feedback): {
            feedback_header h;
            h.flow_id = flow;
            h.rate_seq = load_be32(p + 8);
            h.rate_mpps = load_be32(p + 12);
            h.echo_seq = load_be32(p + 16);
            h.epoch = load_be32(p + 20);
            if (h.rate_mpps == 0) return bad("rate_mpps", "0", "is not > 0");
            return message{h};
        }
        default:
            return bad("type", std::to_string(p[3]), "is not 1 (data) or 2 (feedback)");
    }
}

std::uint32_t separation_us(double rate_pps) {
    if (!(rate_pps > 0.0)) return 0xffffffffu;
    const double us = std::round(1e6 / rate_pps);
    return static_cast<std::uint32_t>(std::clamp(us, 1.0, 4294967295.0));
}

std::uint32_t rate_mpps(double rate_pps) {
    if (!(rate_pps > 0.0)) return 1;
    const double m = std::round(rate_pps * 1000.0);
    return static_cast<std::uint32_t>(std::clamp(m, 1.0, 4294967295.0));
}

}  // namespace oppsched::wrc
