// Segmentation and reassembly of IP packets into MAC PDUs: see oppsched/segmentation.h.
#include "oppsched/segmentation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "oppsched/byte_order.h"
#include "oppsched/validation.h"

namespace oppsched::pdu {

// ---------------------------------------------------------------------------------------
// Segmenter

segmenter::segmenter(segmenter_params params)
    : params_(params), next_seq_(params.first_seq), next_packet_seq_(params.first_packet_seq) {
    params_.validate();
}

std::size_t segmenter::partial_remaining() const {
    return partial_ ? partial_->packet.data.size() - partial_->sent : 0;
}

void segmenter::abandon_partial() {
    if (partial_) {
        ++stats_.packets_abandoned;
        partial_.reset();
    }
}

built_tb segmenter::build(std::size_t tb_bytes, const packet_source& source,
                          std::optional<float> price_s) {
    if (tb_bytes < kMinPduBytes || tb_bytes > kMaxPduBytes)
        throw_invalid("segmenter.tb_bytes: " + std::to_string(tb_bytes) + " not in [20, 65535]");
    if (price_s && !(std::isfinite(*price_s) && *price_s >= 0.0f))
        throw_invalid("segmenter.price_s: " + std::to_string(*price_s) + " is not finite and >= 0");
    built_tb out;
    out.bytes.assign(tb_bytes, 0);
    tb_record& rec = out.record;
    rec.user = params_.user;
    rec.seq = next_seq_;
    rec.tb_bytes = tb_bytes;

    std::uint8_t* b = out.bytes.data();
    std::size_t pos = kHeaderBytes;
    const std::size_t end = tb_bytes - kCrcBytes;
    std::uint16_t n_segments = 0;
    // Invariant: a segment is only started if its header and >= 1 data byte fit, so a
    // packet pulled from the source always starts in this TB.
    while (end - pos > kSegmentHeaderBytes) {
        if (!partial_) {
            if (!source) break;
            std::optional<ip_packet> p = source();
            if (!p) break;
            if (p->data.empty() || p->data.size() > kMaxPacketBytes) {
                ++stats_.packets_rejected;
                continue;
            }
            partial_ = partial_packet{std::move(*p), next_packet_seq_++, 0};
            ++stats_.packets_started;
        }
        partial_packet& pr = *partial_;
        const std::size_t size = pr.packet.data.size();
        const std::size_t n = std::min(end - pos - kSegmentHeaderBytes, size - pr.sent);
        store_be16(b + pos, pr.packet_seq);
        store_be16(b + pos + 2, static_cast<std::uint16_t>(size));
        store_be16(b + pos + 4, static_cast<std::uint16_t>(pr.sent));
        store_be16(b + pos + 6, static_cast<std::uint16_t>(n));
        std::memcpy(b + pos + kSegmentHeaderBytes, pr.packet.data.data() + pr.sent, n);
        rec.segments.push_back(
            segment_record{pr.packet.id, pr.packet_seq, static_cast<std::uint16_t>(size),
                           static_cast<std::uint16_t>(pr.sent), static_cast<std::uint16_t>(n)});
        pos += kSegmentHeaderBytes + n;
        pr.sent += n;
        rec.data_bytes += n;
        ++n_segments;
        if (pr.sent == size) {
            ++stats_.packets_completed;
            partial_.reset();
        } else {
            break;  // the TB is full; the rest continues in the next TB
        }
    }
    rec.padding = end - pos;
    pdu_header h;
    h.user = params_.user;
    h.seq = next_seq_;
    h.price_s = price_s;
    write_header_and_crc(b, tb_bytes, h, n_segments,
                         static_cast<std::uint16_t>(pos - kHeaderBytes));
    ++next_seq_;
    ++stats_.tbs;
    stats_.data_bytes += rec.data_bytes;
    stats_.padding_bytes += rec.padding;
    stats_.overhead_bytes += tb_bytes - rec.data_bytes - rec.padding;
    return out;
}

// ---------------------------------------------------------------------------------------
// Reassembler

void reassembler_params::validate() const {
    if (window < 1 || window > (1u << 30))
        throw_invalid("reassembler.window: " + std::to_string(window) + " not in [1, 2^30]");
    if (timeout <= 0)
        throw_invalid("reassembler.timeout: " + std::to_string(timeout) + " ns must be > 0");
    if (max_bytes < kMaxPacketBytes)
        throw_invalid("reassembler.max_bytes: " + std::to_string(max_bytes) +
                      " is below one maximal packet (65535)");
}

reassembler::reassembler(reassembler_params params)
    : params_(params), next_(params.first_seq), expected_packet_seq_(params.first_packet_seq) {
    params_.validate();
}

std::optional<std::uint64_t> reassembler::unwrap(std::uint32_t seq) const {
    // RFC 1982 serial arithmetic around next_: a seq within 2^31 before next_ is old
    // (nullopt), otherwise it lies at or beyond next_ on the unwrapped 64-bit line.
    const auto d = static_cast<std::int32_t>(seq - static_cast<std::uint32_t>(next_));
    if (d < 0) return std::nullopt;
    return next_ + static_cast<std::uint64_t>(d);
}

void reassembler::count_drop(loss_cause cause, std::uint64_t n) {
    switch (cause) {
        case loss_cause::reported:
            stats_.dropped_incomplete += n;
            break;
        case loss_cause::timeout:
            stats_.dropped_timeout += n;
            break;
        case loss_cause::memory:
            stats_.dropped_memory += n;
            break;
    }
}

void reassembler::drop_partial(loss_cause cause) {
    if (!partial_) return;
    held_bytes_ -= partial_->data.size();
    partial_.reset();
    count_drop(cause, 1);
}

void reassembler::process_loss(loss_cause cause) {
    // The lost TB may have carried the rest of the packet in progress: drop it. Packets it
    // carried whole, or started, show up as a gap in packet sequence numbers later.
    drop_partial(cause);
    last_cause_ = cause;
    loss_pending_ = true;
}

void reassembler::account_gap(std::uint16_t packet_seq) {
    const auto gap = static_cast<std::uint16_t>(packet_seq - expected_packet_seq_);
    if (gap != 0 && gap < 0x8000u)  // packets between were carried whole by lost TBs
        count_drop(loss_pending_ ? last_cause_ : loss_cause::reported, gap);
}

void reassembler::process(const tb_entry& e, delivered_packets& out) {
    if (e.lost) {
        process_loss(loss_cause::reported);
        return;
    }
    const loss_cause cause = loss_pending_ ? last_cause_ : loss_cause::reported;
    for (const segment_ref& s : e.segs) {
        const std::uint8_t* d = e.data.data() + s.data_pos;
        const bool last = std::size_t{s.offset} + s.seg_len == s.packet_len;
        if (s.offset == 0) {
            // A packet starts. An unfinished one before it lost its tail (the segmenter
            // abandoned it, or a loss was not seen): drop it.
            drop_partial(cause);
            account_gap(s.packet_seq);
            expected_packet_seq_ = static_cast<std::uint16_t>(s.packet_seq + 1);
            if (last) {
                out.emplace_back(d, d + s.seg_len);
                ++stats_.delivered;
                stats_.delivered_bytes += s.seg_len;
            } else {
                partial_ = partial_packet{s.packet_seq, s.packet_len,
                                          std::vector<std::uint8_t>(d, d + s.seg_len)};
                held_bytes_ += s.seg_len;
            }
        } else if (partial_ && partial_->packet_seq == s.packet_seq &&
                   partial_->packet_len == s.packet_len && partial_->data.size() == s.offset) {
            partial_->data.insert(partial_->data.end(), d, d + s.seg_len);
            held_bytes_ += s.seg_len;
            if (last) {
                held_bytes_ -= partial_->data.size();
                stats_.delivered_bytes += partial_->data.size();
                ++stats_.delivered;
                out.push_back(std::move(partial_->data));
                partial_.reset();
            }
        } else {
            // A continuation without its beginning: the beginning was in a lost TB.
            drop_partial(cause);
            const auto ahead = static_cast<std::uint16_t>(s.packet_seq - expected_packet_seq_);
            if (ahead < 0x8000u) {  // not counted yet: its head and the gap before it
                account_gap(s.packet_seq);
                count_drop(cause, 1);
                expected_packet_seq_ = static_cast<std::uint16_t>(s.packet_seq + 1);
            }
        }
        loss_pending_ = false;
    }
}

void reassembler::drain(delivered_packets& out) {
    while (!buffer_.empty() && buffer_.begin()->first == next_) {
        auto it = buffer_.begin();
        process(it->second, out);
        held_bytes_ -= it->second.data.size();
        buffer_.erase(it);
        ++next_;
    }
}

void reassembler::give_up_until(std::uint64_t target, loss_cause cause, delivered_packets& out) {
    while (next_ < target) {
        auto it = buffer_.begin();
        if (it != buffer_.end() && it->first == next_) {
            process(it->second, out);
            held_bytes_ -= it->second.data.size();
            buffer_.erase(it);
            ++next_;
        } else {
            // A run of missing PDUs [next_, stop): one loss, whatever its length.
            const std::uint64_t stop =
                (it != buffer_.end() && it->first < target) ? it->first : target;
            process_loss(cause);
            stats_.tbs_given_up += stop - next_;
            next_ = stop;
        }
    }
    drain(out);
}

void reassembler::enforce_timeout(time_ns now, delivered_packets& out) {
    // Invariant after drain(): the buffer never holds next_, so a non-empty buffer means a
    // gap at next_. Give it up once the PDU waiting longest has waited `timeout`: no
    // complete packet is held back longer than that by a missing TB.
    while (!buffer_.empty()) {
        time_ns oldest = std::numeric_limits<time_ns>::max();
        for (const auto& kv : buffer_) oldest = std::min(oldest, kv.second.arrival);
        if (now - oldest < params_.timeout) break;
        give_up_until(buffer_.begin()->first, loss_cause::timeout, out);
    }
}

void reassembler::enforce_memory(delivered_packets& out) {
    while (held_bytes_ > params_.max_bytes) {
        if (!buffer_.empty()) {
            give_up_until(buffer_.begin()->first, loss_cause::memory, out);
        } else if (partial_) {
            drop_partial(loss_cause::memory);
        } else {
            break;
        }
    }
}

std::optional<time_ns> reassembler::next_deadline() const {
    if (buffer_.empty()) return std::nullopt;
    time_ns oldest = std::numeric_limits<time_ns>::max();
    for (const auto& kv : buffer_) oldest = std::min(oldest, kv.second.arrival);
    return oldest + params_.timeout;
}

reassembler::delivered_packets reassembler::on_pdu(const std::uint8_t* data, std::size_t len,
                                                   time_ns now, std::string* error) {
    delivered_packets out;
    auto r = parse_view(data, len);
    if (!r || (params_.user && r->header.user != *params_.user)) {
        ++stats_.malformed;
        if (error)
            *error = !r ? r.error()
                        : "pdu.user: " + std::to_string(r->header.user) + " is not this client's " +
                              std::to_string(*params_.user);
        enforce_timeout(now, out);
        return out;
    }
    const pdu_view& v = r.value();
    const std::optional<std::uint64_t> uo = unwrap(v.header.seq);
    auto it = uo ? buffer_.find(*uo) : buffer_.end();
    if (!uo || (it != buffer_.end() && !it->second.lost)) {
        ++stats_.duplicates;
        enforce_timeout(now, out);
        return out;
    }
    const std::uint64_t u = *uo;
    if (u - next_ >= params_.window) {
        // Beyond the reordering window: give up the oldest missing PDUs to make room.
        give_up_until(u - params_.window + 1, loss_cause::timeout, out);
    }
    tb_entry e;
    e.arrival = now;
    std::size_t bytes = 0;
    for (const segment_view& s : v.segments) bytes += s.seg_len;
    e.data.reserve(bytes);
    e.segs.reserve(v.segments.size());
    for (const segment_view& s : v.segments) {
        e.segs.push_back(
            segment_ref{s.packet_seq, s.packet_len, s.offset, s.seg_len, e.data.size()});
        e.data.insert(e.data.end(), s.data, s.data + s.seg_len);
    }
    held_bytes_ += e.data.size();
    buffer_[u] = std::move(e);  // replaces a loss report if the PDU made it after all
    ++stats_.tbs_received;
    drain(out);
    enforce_memory(out);
    enforce_timeout(now, out);
    return out;
}

reassembler::delivered_packets reassembler::on_lost(std::uint32_t seq, time_ns now) {
    delivered_packets out;
    const std::optional<std::uint64_t> uo = unwrap(seq);
    if (uo && buffer_.find(*uo) == buffer_.end()) {
        const std::uint64_t u = *uo;
        if (u - next_ >= params_.window)
            give_up_until(u - params_.window + 1, loss_cause::timeout, out);
        tb_entry e;
        e.lost = true;
        e.arrival = now;
        buffer_[u] = std::move(e);
        ++stats_.tbs_lost_reported;
        drain(out);
    }
    enforce_timeout(now, out);
    return out;
}

reassembler::delivered_packets reassembler::poll(time_ns now) {
    delivered_packets out;
    enforce_timeout(now, out);
    return out;
}

}  // namespace oppsched::pdu
