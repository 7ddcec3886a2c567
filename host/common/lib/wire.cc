#include "oppsched/wire.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <string>

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

std::uint16_t checked_len(std::size_t n, const char* field) {
    if (n > std::numeric_limits<std::uint16_t>::max())
        throw_invalid(field, n, "bytes exceed the 65535-byte field");
    return static_cast<std::uint16_t>(n);
}

struct body_writer {
    byte_writer& w;
    void operator()(const slot_request& m) {
        w.u64(m.slot);
        w.i64(m.air_time_ns);
    }
    void operator()(const slot_grant& m) {
        w.u64(m.slot);
        w.u8(m.empty ? 1 : 0);
        w.u16(m.user);
        w.u8(m.mcs);
        w.u8(m.harq_pid);
        w.u8(m.ndi);
        w.u8(m.rv);
        w.u16(checked_len(m.tb.size(), "slot_grant.tb"));
        w.bytes(m.tb);
    }
    void operator()(const rx_indication& m) {
        w.u64(m.slot);
        w.u16(m.user);
        w.u8(m.mcs);
        w.u8(m.harq_pid);
        w.u8(m.ndi);
        w.u8(m.rv);
        w.u8((m.header_ok ? 1 : 0) | (m.addressed ? 2 : 0) | (m.crc_ok ? 4 : 0));
        w.f32(m.snr_db);
        w.u8(m.cqi);
        w.u8(m.combined);
        w.u16(checked_len(m.tb.size(), "rx_indication.tb"));
        w.bytes(m.tb);
    }
    void operator()(const cqi_report& m) {
        w.u16(m.user);
        w.u64(m.slot);
        w.f32(m.snr_db);
        w.u8(m.cqi);
    }
    void operator()(const harq_feedback& m) {
        w.u16(m.user);
        w.u64(m.slot);
        w.u8(m.harq_pid);
        w.u8(m.ack ? 1 : 0);
    }
    void operator()(const uplink_packet& m) {
        w.u16(m.user);
        w.u16(checked_len(m.packet.size(), "uplink_packet.packet"));
        w.bytes(m.packet);
    }
};

template <class T>
std::string bad_value(const char* field, T v, const char* why) {
    std::ostringstream s;
    s << field << ": " << +v << " " << why;
    return s.str();
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
    }
    return "unknown";
}

msg_type type_of(const message& m) {
    return static_cast<msg_type>(m.index() + 1);  // variant order == msg_type numbering
}

bool slot_request::operator==(const slot_request& o) const {
    return slot == o.slot && air_time_ns == o.air_time_ns;
}
bool slot_grant::operator==(const slot_grant& o) const {
    return slot == o.slot && empty == o.empty && user == o.user && mcs == o.mcs &&
           harq_pid == o.harq_pid && ndi == o.ndi && rv == o.rv && tb == o.tb;
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

std::vector<std::uint8_t> encode(const message& msg, std::uint32_t seq) {
    byte_writer w(kHeaderLen + 64);
    w.u32(kMagic);
    w.u8(kVersion);
    w.u8(static_cast<std::uint8_t>(type_of(msg)));
    w.u16(0);
    w.u32(seq);
    w.u32(0);  // body_len, patched below
    std::visit(body_writer{w}, msg);
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
    h.u16("reserved");
    const auto seq = static_cast<std::uint32_t>(h.get(4, "seq"));
    const auto body_len = static_cast<std::uint32_t>(h.get(4, "body_len"));
    if (magic != kMagic) {
        std::ostringstream s;
        s << "header.magic: 0x" << std::hex << magic << " is not 0x" << kMagic;
        return error_info{s.str()};
    }
    if (version != kVersion) return error_info{bad_value("header.version", version, "is not 1")};
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

    const std::uint8_t* body = data + kHeaderLen;
    frame f;
    f.seq = seq;
    switch (static_cast<msg_type>(type)) {
        case msg_type::slot_request: {
            byte_reader r(body, body_len, "slot_request");
            slot_request m;
            m.slot = r.u64("slot");
            m.air_time_ns = r.i64("air_time_ns");
            r.expect_end();
            if (!r.ok()) return error_info{r.error()};
            f.msg = m;
            break;
        }
        case msg_type::slot_grant: {
            byte_reader r(body, body_len, "slot_grant");
            slot_grant m;
            m.slot = r.u64("slot");
            const auto flags = r.u8("flags");
            m.empty = flags & 1;
            m.user = r.u16("user");
            m.mcs = r.u8("mcs");
            m.harq_pid = r.u8("harq_pid");
            m.ndi = r.u8("ndi");
            m.rv = r.u8("rv");
            const auto n = r.u16("tb_len");
            m.tb = r.bytes(n, "tb");
            r.expect_end();
            if (r.ok() && m.empty && !m.tb.empty())
                r.fail(bad_value("slot_grant.tb_len", n, "bytes in a slot marked empty"));
            if (!r.ok()) return error_info{r.error()};
            f.msg = std::move(m);
            break;
        }
        case msg_type::rx_indication: {
            byte_reader r(body, body_len, "rx_indication");
            rx_indication m;
            m.slot = r.u64("slot");
            m.user = r.u16("user");
            m.mcs = r.u8("mcs");
            m.harq_pid = r.u8("harq_pid");
            m.ndi = r.u8("ndi");
            m.rv = r.u8("rv");
            const auto flags = r.u8("flags");
            m.header_ok = flags & 1;
            m.addressed = flags & 2;
            m.crc_ok = flags & 4;
            m.snr_db = r.f32("snr_db");
            m.cqi = r.u8("cqi");
            m.combined = r.u8("combined");
            const auto n = r.u16("tb_len");
            m.tb = r.bytes(n, "tb");
            r.expect_end();
            if (!r.ok()) return error_info{r.error()};
            f.msg = std::move(m);
            break;
        }
        case msg_type::cqi_report: {
            byte_reader r(body, body_len, "cqi_report");
            cqi_report m;
            m.user = r.u16("user");
            m.slot = r.u64("slot");
            m.snr_db = r.f32("snr_db");
            m.cqi = r.u8("cqi");
            r.expect_end();
            if (!r.ok()) return error_info{r.error()};
            f.msg = m;
            break;
        }
        case msg_type::harq_feedback: {
            byte_reader r(body, body_len, "harq_feedback");
            harq_feedback m;
            m.user = r.u16("user");
            m.slot = r.u64("slot");
            m.harq_pid = r.u8("harq_pid");
            const auto ack = r.u8("ack");
            r.expect_end();
            if (r.ok() && ack > 1) r.fail(bad_value("harq_feedback.ack", ack, "is not 0 or 1"));
            if (!r.ok()) return error_info{r.error()};
            m.ack = ack == 1;
            f.msg = m;
            break;
        }
        case msg_type::uplink_packet: {
            byte_reader r(body, body_len, "uplink_packet");
            uplink_packet m;
            m.user = r.u16("user");
            const auto n = r.u16("len");
            m.packet = r.bytes(n, "packet");
            r.expect_end();
            if (!r.ok()) return error_info{r.error()};
            f.msg = std::move(m);
            break;
        }
        default:
            return error_info{bad_value("header.type", type, "is not a known message type (1..6)")};
    }
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
