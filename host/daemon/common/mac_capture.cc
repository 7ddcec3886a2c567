// The MAC capture: see oppsched/daemon/mac_capture.h.
#include "oppsched/daemon/mac_capture.h"

#include <algorithm>
#include <type_traits>
#include <variant>

namespace oppsched::daemon {

namespace mac_pcap {

std::array<std::uint8_t, kHeaderLen> encode(const record_header& h) {
    std::array<std::uint8_t, kHeaderLen> b{};
    b[0] = kVersion;
    b[1] = static_cast<std::uint8_t>(kHeaderLen);
    b[2] = static_cast<std::uint8_t>(h.k);
    b[3] = static_cast<std::uint8_t>(h.dir);
    b[4] = static_cast<std::uint8_t>(h.p);
    b[5] = h.flags;
    b[6] = static_cast<std::uint8_t>(h.user >> 8);
    b[7] = static_cast<std::uint8_t>(h.user);
    for (int i = 0; i < 8; ++i) b[8 + i] = static_cast<std::uint8_t>(h.slot >> (56 - 8 * i));
    b[16] = h.harq_pid;
    b[17] = h.ndi;
    b[18] = h.rv;
    b[19] = h.mcs;
    b[20] = static_cast<std::uint8_t>(h.tb_len >> 8);
    b[21] = static_cast<std::uint8_t>(h.tb_len);
    return b;
}

namespace {

std::uint16_t tb_len_of(const std::vector<std::uint8_t>& tb) {
    return static_cast<std::uint16_t>(std::min<std::size_t>(tb.size(), 0xFFFF));
}

void fill(record_header& h, const wire::slot_request& m) {
    h.flags |= kFlagSlot;
    h.slot = m.slot;
}
// The user, HARQ and MCS fields a slot_grant, an rx_indication and an uplink_grant carry.
template <class M>
void fill_tb(record_header& h, const M& m, std::uint16_t tb_len) {
    h.flags |= kFlagUser | kFlagHarq;
    h.user = m.user;
    h.harq_pid = m.harq_pid;
    h.ndi = m.ndi;
    h.rv = m.rv;
    h.mcs = m.mcs;
    h.tb_len = tb_len;
}
template <class M>
void fill_tb(record_header& h, const M& m) {
    fill_tb(h, m, tb_len_of(m.tb));
}
void fill(record_header& h, const wire::slot_grant& m) {
    h.flags |= kFlagSlot;
    h.slot = m.slot;
    if (!m.empty) fill_tb(h, m);
}
void fill(record_header& h, const wire::rx_indication& m) {
    h.flags |= kFlagSlot;
    h.slot = m.slot;
    if (!m.header_ok || m.user == wire::kUserNobody) return;
    fill_tb(h, m);
    if (m.addressed) h.flags |= kFlagCrc | (m.crc_ok ? kFlagCrcOk : 0);
}
void fill(record_header& h, const wire::cqi_report& m) {
    h.flags |= kFlagSlot | kFlagUser;
    h.slot = m.slot;
    h.user = m.user;
}
void fill(record_header& h, const wire::harq_feedback& m) {
    h.flags |= kFlagSlot | kFlagUser;
    h.slot = m.slot;
    h.user = m.user;
    h.harq_pid = m.harq_pid;
}
void fill(record_header& h, const wire::uplink_packet& m) {
    h.flags |= kFlagUser;
    h.user = m.user;
}
void fill(record_header& h, const wire::uplink_grant& m) {
    h.flags |= kFlagSlot;
    h.slot = m.slot;
    fill_tb(h, m, m.tb_bytes);
}
void fill(record_header& h, const wire::uplink_tb& m) {
    h.flags |= kFlagSlot | kFlagUser;
    h.slot = m.slot;
    h.user = m.user;
    h.harq_pid = m.harq_pid;
    h.ndi = m.ndi;
    h.tb_len = tb_len_of(m.tb);
}
void fill(record_header& h, const wire::buffer_status& m) {
    h.flags |= kFlagUser;
    h.user = m.user;
}

}  // namespace

record_header message_header(direction dir, port p, const std::uint8_t* frame, std::size_t len) {
    record_header h;
    h.k = kind::message;
    h.dir = dir;
    h.p = p;
    const auto r = wire::decode(frame, len, wire::kMaxFrameLen);
    if (!r) {
        h.flags = kFlagBadMessage;
        return h;
    }
    std::visit([&h](const auto& m) { fill(h, m); }, r->msg);
    return h;
}

}  // namespace mac_pcap

namespace {
pcap_writer::options capture_options(std::uint64_t max_bytes) {
    pcap_writer::options o;
    o.linktype = mac_pcap::kLinktype;
    o.max_bytes = max_bytes;
    return o;
}
}  // namespace

mac_capture::mac_capture(const std::string& path, std::uint64_t max_bytes, bool integrity_tag)
    : w_(path, capture_options(max_bytes)), tag_flag_(integrity_tag ? mac_pcap::kFlagTag : 0) {}

void mac_capture::write(const mac_pcap::record_header& h, const std::uint8_t* payload,
                        std::size_t len) {
    auto tagged = h;
    tagged.flags |= tag_flag_;
    const auto ph = mac_pcap::encode(tagged);
    w_.write(realtime_ns(), ph.data(), ph.size(), payload, len);
}

void mac_capture::pdu_sent(const wire::slot_grant& g) {
    if (g.empty || g.tb.empty()) return;
    mac_pcap::record_header h;
    mac_pcap::fill(h, g);
    h.k = mac_pcap::kind::pdu;
    h.dir = mac_pcap::direction::sent;
    h.p = mac_pcap::port::air;
    write(h, g.tb.data(), g.tb.size());
}

void mac_capture::pdu_received(const wire::rx_indication& ind) {
    if (ind.tb.empty()) return;
    mac_pcap::record_header h;
    mac_pcap::fill(h, ind);
    h.k = mac_pcap::kind::pdu;
    h.dir = mac_pcap::direction::received;
    h.p = mac_pcap::port::air;
    write(h, ind.tb.data(), ind.tb.size());
}

void mac_capture::message(mac_pcap::direction dir, mac_pcap::port p, const std::uint8_t* frame,
                          std::size_t len) {
    const auto h = mac_pcap::message_header(dir, p, frame, len);
    write(h, frame, len);
}

}  // namespace oppsched::daemon
