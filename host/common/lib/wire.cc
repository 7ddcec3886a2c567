#include "oppsched/wire.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <utility>

#include "oppsched/byte_order.h"
#include "oppsched/crc32.h"
#include "oppsched/validation.h"

namespace oppsched::wire {
namespace {

class byte_writer {
  public:
    explicit byte_writer(std::size_t reserve) { b_.reserve(reserve); }
    void u8(std::uint8_t v) { b_.push_back(v); }
    void u16(std::uint16_t v) { store_be16(grow(2), v); }
    void u32(std::uint32_t v) { store_be32(grow(4), v); }
    void u64(std::uint64_t v) { store_be64(grow(8), v); }
    void i64(std::int64_t v) { u64(static_cast<std::uint64_t>(v)); }
    void f32(float v) {
        std::uint32_t u;
        std::memcpy(&u, &v, 4);
        u32(u);
    }
    void bytes(const std::vector<std::uint8_t>& v) { b_.insert(b_.end(), v.begin(), v.end()); }
    std::vector<std::uint8_t>& buf() { return b_; }

  private:
    // n more bytes at the end of the buffer, for a store_be*.
    std::uint8_t* grow(std::size_t n) {
        b_.resize(b_.size() + n);
        return b_.data() + b_.size() - n;
    }
    std::vector<std::uint8_t> b_;
};

// Bounds-checked big-endian (network order) reader; the first failure is remembered with the field
// name.
class byte_reader {
  public:
    byte_reader(const std::uint8_t* p, std::size_t n, const char* msg) : p_(p), n_(n), msg_(msg) {}
    bool ok() const { return err_.empty(); }
    const std::string& error() const { return err_; }
    std::uint64_t get(int n, const char* field) {
        if (!ok()) return 0;
        if (n_ - pos_ < static_cast<std::size_t>(n)) {
            std::ostringstream s;
            s << msg_ << "." << field << ": truncated (needs " << n << " bytes at offset " << pos_
              << ", body has " << n_ << ")";
            err_ = s.str();
            return 0;
        }
        const std::uint8_t* q = p_ + pos_;
        const std::uint64_t v = n == 1   ? q[0]
                                : n == 2 ? load_be16(q)
                                : n == 4 ? load_be32(q)
                                         : load_be64(q);
        pos_ += n;
        return v;
    }
    std::uint8_t u8(const char* f) { return static_cast<std::uint8_t>(get(1, f)); }
    std::uint16_t u16(const char* f) { return static_cast<std::uint16_t>(get(2, f)); }
    std::uint64_t u64(const char* f) { return get(8, f); }
    std::int64_t i64(const char* f) { return static_cast<std::int64_t>(get(8, f)); }
    float f32(const char* f) {
        auto u = static_cast<std::uint32_t>(get(4, f));
        float v;
        std::memcpy(&v, &u, 4);
        return v;
    }
    std::vector<std::uint8_t> bytes(std::size_t n, const char* f) {
        if (!ok()) return {};
        if (n_ - pos_ < n) {
            std::ostringstream s;
            s << msg_ << "." << f << ": length " << n << " exceeds the " << (n_ - pos_)
              << " bytes left";
            err_ = s.str();
            return {};
        }
        std::vector<std::uint8_t> v(p_ + pos_, p_ + pos_ + n);
        pos_ += n;
        return v;
    }
    void fail(std::string e) {
        if (ok()) err_ = std::move(e);
    }
    void expect_end() {
        if (ok() && pos_ != n_) {
            std::ostringstream s;
            s << msg_ << ": " << (n_ - pos_) << " trailing bytes after the body";
            err_ = s.str();
        }
    }

  private:
    const std::uint8_t* p_;
    std::size_t n_;
    std::size_t pos_ = 0;
    const char* msg_;
    std::string err_;
};

std::uint16_t checked_len(std::size_t n, const std::string& field) {
    if (n > std::numeric_limits<std::uint16_t>::max())
        throw_invalid(field, n, "bytes exceed the 65535-byte field");
    return static_cast<std::uint16_t>(n);
}

template <class T>
std::string bad_value(const std::string& field, T v, const char* why) {
    std::ostringstream s;
    s << field << ": " << +v << " " << why;
    return s.str();
}

// Writes a body as for_each_wire_field describes it.
struct body_writer {
    byte_writer& w;
    const char* msg;
    void num(const char*, std::uint8_t v) { w.u8(v); }
    void num(const char*, std::uint16_t v) { w.u16(v); }
    void num(const char*, std::uint64_t v) { w.u64(v); }
    void num(const char*, std::int64_t v) { w.i64(v); }
    void num(const char*, float v) { w.f32(v); }
    template <class... B>
    void flags(const char*, const wire_bit<B>&... bits) {
        std::uint8_t x = 0;
        int i = 0;
        ((x |= static_cast<std::uint8_t>(bits.value ? 1u << i : 0u), ++i), ...);
        w.u8(x);
    }
    void boolean(const char*, bool b) { w.u8(b ? 1 : 0); }
    void bytes(const char*, const char* name, const std::vector<std::uint8_t>& v) {
        w.u16(checked_len(v.size(), std::string(msg) + "." + name));
        w.bytes(v);
    }
};

// Reads a body as for_each_wire_field describes it; the first error stays in the reader.
struct body_reader {
    byte_reader& r;
    const char* msg;
    void num(const char* f, std::uint8_t& x) { x = r.u8(f); }
    void num(const char* f, std::uint16_t& x) { x = r.u16(f); }
    void num(const char* f, std::uint64_t& x) { x = r.u64(f); }
    void num(const char* f, std::int64_t& x) { x = r.i64(f); }
    void num(const char* f, float& x) { x = r.f32(f); }
    template <class... B>
    void flags(const char* f, const wire_bit<B>&... bits) {
        const std::uint8_t x = r.u8(f);
        // Bits beyond those the layout names are reserved: a frame with one set comes from
        // a newer or broken sender, and its meaning is unknown (the PDU header, pdu.h, is
        // as strict).
        constexpr unsigned known = (1u << sizeof...(B)) - 1;
        if (r.ok() && (x & ~known) != 0) {
            std::ostringstream s;
            s << msg << "." << f << ": 0x" << std::hex << +x << " sets reserved bits 0x"
              << (x & ~known & 0xFFu) << " (known: 0x" << known << ")";
            r.fail(s.str());
        }
        int i = 0;
        ((bits.value = ((x >> i) & 1) != 0, ++i), ...);
    }
    void boolean(const char* f, bool& b) {
        const std::uint8_t x = r.u8(f);
        if (r.ok() && x > 1) r.fail(bad_value(std::string(msg) + "." + f, x, "is not 0 or 1"));
        b = x == 1;
    }
    void bytes(const char* len_field, const char* f, std::vector<std::uint8_t>& v) {
        const std::uint16_t n = r.u16(len_field);
        v = r.bytes(n, f);
    }
};

// What a well-formed body cannot hold beyond its layout.
template <class M>
void check_body(const M&, byte_reader&) {}
void check_body(const slot_grant& m, byte_reader& r) {
    if (m.empty && !m.tb.empty())
        r.fail(bad_value("slot_grant.tb_len", m.tb.size(), "bytes in a slot marked empty"));
}

template <std::size_t... I>
message make_message_at(std::size_t index, std::index_sequence<I...>) {
    message m;
    ((index == I ? (void)m.emplace<I>() : (void)0), ...);
    return m;
}

}  // namespace

const char* to_string(msg_type t) {
    switch (t) {
        case msg_type::slot_request:
            return "slot_request";
        case msg_type::slot_grant:
            return "slot_grant";
        case msg_type::rx_indication:
            return "rx_indication";
        case msg_type::cqi_report:
            return "cqi_report";
        case msg_type::harq_feedback:
            return "harq_feedback";
        case msg_type::uplink_packet:
            return "uplink_packet";
        case msg_type::uplink_grant:
            return "uplink_grant";
        case msg_type::uplink_tb:
            return "uplink_tb";
        case msg_type::buffer_status:
            return "buffer_status";
    }
    return "unknown";
}

msg_type type_of(const message& m) {
    return static_cast<msg_type>(m.index() + 1);  // variant order == msg_type numbering
}

message make_message(msg_type t) {
    return make_message_at(static_cast<std::size_t>(t) - 1,
                           std::make_index_sequence<std::variant_size_v<message>>{});
}

bool slot_request::operator==(const slot_request& o) const {
    return slot == o.slot && air_time_ns == o.air_time_ns;
}
bool slot_grant::operator==(const slot_grant& o) const {
    return slot == o.slot && empty == o.empty && uplink == o.uplink && user == o.user &&
           mcs == o.mcs && harq_pid == o.harq_pid && ndi == o.ndi && rv == o.rv && tb == o.tb;
}
bool rx_indication::operator==(const rx_indication& o) const {
    return slot == o.slot && user == o.user && mcs == o.mcs && harq_pid == o.harq_pid &&
           ndi == o.ndi && rv == o.rv && header_ok == o.header_ok && addressed == o.addressed &&
           crc_ok == o.crc_ok && snr_db == o.snr_db && cqi == o.cqi && combined == o.combined &&
           tb == o.tb;
}
bool cqi_report::operator==(const cqi_report& o) const {
    return user == o.user && slot == o.slot && snr_db == o.snr_db && cqi == o.cqi;
}
bool harq_feedback::operator==(const harq_feedback& o) const {
    return user == o.user && slot == o.slot && harq_pid == o.harq_pid && ack == o.ack;
}
bool uplink_packet::operator==(const uplink_packet& o) const {
    return user == o.user && packet == o.packet;
}
bool uplink_grant::operator==(const uplink_grant& o) const {
    return user == o.user && slot == o.slot && air_time_ns == o.air_time_ns && mcs == o.mcs &&
           harq_pid == o.harq_pid && ndi == o.ndi && rv == o.rv && tb_bytes == o.tb_bytes;
}
bool uplink_tb::operator==(const uplink_tb& o) const {
    return user == o.user && slot == o.slot && harq_pid == o.harq_pid && ndi == o.ndi &&
           buffer_bytes == o.buffer_bytes && buffer_packets == o.buffer_packets && tb == o.tb;
}
bool buffer_status::operator==(const buffer_status& o) const {
    return user == o.user && last_grant_slot == o.last_grant_slot &&
           buffer_bytes == o.buffer_bytes && buffer_packets == o.buffer_packets;
}

std::vector<std::uint8_t> encode(const message& msg, std::uint32_t seq) {
    byte_writer w(kHeaderLen + 64);
    w.u32(kMagic);
    w.u8(kVersion);
    w.u8(static_cast<std::uint8_t>(type_of(msg)));
    w.u16(0);
    w.u32(seq);
    w.u32(0);  // body_len, patched below
    const char* name = to_string(type_of(msg));
    std::visit([&](const auto& m) { for_each_wire_field(m, body_writer{w, name}); }, msg);
    auto& b = w.buf();
    const auto body_len = static_cast<std::uint32_t>(b.size() - kHeaderLen);
    store_be32(b.data() + 12, body_len);
    w.u32(crc32(b.data(), b.size()));
    return std::move(b);
}

expected<frame> decode(const std::uint8_t* data, std::size_t len, std::size_t max_len) {
    if (len > max_len) {
        std::ostringstream s;
        s << "frame: " << len << " bytes exceed the limit of " << max_len;
        return error_info{s.str()};
    }
    if (len < kHeaderLen + kTrailerLen) {
        return error_info{
            bad_value("frame.length", len, "bytes is shorter than header + CRC (20)")};
    }
    byte_reader h(data, kHeaderLen, "header");
    const auto magic = static_cast<std::uint32_t>(h.get(4, "magic"));
    const auto version = h.u8("version");
    const auto type = h.u8("type");
    const auto reserved = h.u16("reserved");
    const auto seq = static_cast<std::uint32_t>(h.get(4, "seq"));
    const auto body_len = static_cast<std::uint32_t>(h.get(4, "body_len"));
    if (magic != kMagic) {
        std::ostringstream s;
        s << "header.magic: 0x" << std::hex << magic << " is not 0x" << kMagic;
        return error_info{s.str()};
    }
    if (version != kVersion) return error_info{bad_value("header.version", version, "is not 1")};
    if (reserved != 0) {
        std::ostringstream s;
        s << "header.reserved: 0x" << std::hex << reserved << " is not 0";
        return error_info{s.str()};
    }
    if (static_cast<std::size_t>(body_len) != len - kHeaderLen - kTrailerLen) {
        std::ostringstream s;
        s << "header.body_len: " << body_len << " does not match the frame ("
          << (len - kHeaderLen - kTrailerLen) << " body bytes)";
        return error_info{s.str()};
    }
    const std::uint32_t crc_rx = load_be32(data + len - 4);
    const std::uint32_t crc = crc32(data, len - kTrailerLen);
    if (crc != crc_rx) {
        std::ostringstream s;
        s << "frame.crc: 0x" << std::hex << crc_rx << " does not match the computed 0x" << crc;
        return error_info{s.str()};
    }

    if (type < 1 || type > std::variant_size_v<message>)
        return error_info{bad_value("header.type", type, "is not a known message type (1..9)")};
    frame f;
    f.seq = seq;
    f.msg = make_message(static_cast<msg_type>(type));
    const char* name = to_string(static_cast<msg_type>(type));
    byte_reader r(data + kHeaderLen, body_len, name);
    std::visit(
        [&](auto& m) {
            for_each_wire_field(m, body_reader{r, name});
            r.expect_end();
            if (r.ok()) check_body(m, r);
        },
        f.msg);
    if (!r.ok()) return error_info{r.error()};
    return f;
}

std::uint64_t seq_tracker::on_receive(std::uint32_t seq) {
    ++stats_.received;
    if (!started_) {
        started_ = true;
        next_ = seq + 1;
        return 0;
    }
    if (seq == next_) {
        ++next_;
        return 0;
    }
    if (seq == 0) {  // the peer restarted: its numbering begins again
        ++stats_.restarts;
        next_ = 1;
        return 0;
    }
    const std::uint32_t ahead = seq - next_;  // modular distance
    if (ahead < (1u << 31)) {
        stats_.lost += ahead;
        next_ = seq + 1;
        return ahead;
    }
    ++stats_.out_of_order;
    return 0;
}

}  // namespace oppsched::wire
