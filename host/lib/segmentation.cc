// Segmentation and reassembly of IP packets into MAC PDUs: see oppsched/segmentation.h.
#include "oppsched/segmentation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "oppsched/byte_order.h"
#include "oppsched/validation.h"

namespace oppsched::pdu {

// ---------------------------------------------------------------------------------------
// Segmenter

void segmenter_params::validate() const {
    if (format == pdu_format::compact && first_seq > kCompactSeqMask)
        throw_invalid("segmenter.first_seq: " + std::to_string(first_seq) +
                      " not in [0, 4095] (compact format)");
}

segmenter::segmenter(segmenter_params params)
    : params_(params),
      next_seq_(params.first_seq),
      next_packet_seq_(params.first_packet_seq),
      announce_session_(params.session.has_value()) {
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

std::optional<ip_packet> segmenter::pull(const packet_source& source) {
    if (!source) return std::nullopt;
    for (;;) {
        std::optional<ip_packet> p = source();
        if (!p) return std::nullopt;
        bool ok = !p->data.empty() && p->data.size() <= kMaxPacketBytes;
        if (ok && params_.format == pdu_format::compact) {
            // The client finds the packet's end from its IP header: it must tell the truth.
            const auto len = ip_packet_length(p->data.data(), p->data.size());
            ok = len && len.value() && *len.value() == p->data.size();
        }
        if (ok) return p;
        ++stats_.packets_rejected;
    }
}

built_tb segmenter::build(std::size_t tb_bytes, const packet_source& source,
                          std::optional<float> price_s) {
    if (price_s && !(std::isfinite(*price_s) && *price_s >= 0.0f))
        throw_invalid("segmenter.price_s: " + std::to_string(*price_s) + " is not finite and >= 0");
    if (params_.format == pdu_format::compact) return build_compact(tb_bytes, source, price_s);
    if (tb_bytes < kMinPduBytes || tb_bytes > kMaxPduBytes)
        throw_invalid("segmenter.tb_bytes: " + std::to_string(tb_bytes) + " not in [20, 65535]");
    built_tb out;
    out.bytes.assign(tb_bytes, 0);
    tb_record& rec = out.record;
    rec.user = params_.user;
    rec.seq = next_seq_;
    rec.tb_bytes = tb_bytes;

    std::uint8_t* b = out.bytes.data();
    std::size_t pos = kHeaderBytes;
    // The session trailer while the client may not know it yet (pdu.h); 20..21-byte TBs carry
    // nothing but the header anyway.
    rec.session = announce_session_ && tb_bytes >= kMinPduBytes + kSessionBytes;
    const std::size_t end = tb_bytes - kCrcBytes - (rec.session ? kSessionBytes : 0);
    std::uint16_t n_segments = 0;
    // Invariant: a segment is only started if its header and >= 1 data byte fit, so a
    // packet pulled from the source always starts in this TB.
    while (end - pos > kSegmentHeaderBytes) {
        if (!partial_) {
            std::optional<ip_packet> p = pull(source);
            if (!p) break;
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
    if (rec.session) {
        h.session = params_.session;
        ++stats_.sessions_sent;
    }
    write_header_and_crc(b, tb_bytes, h, n_segments,
                         static_cast<std::uint16_t>(pos - kHeaderBytes));
    ++next_seq_;
    ++stats_.tbs;
    stats_.data_bytes += rec.data_bytes;
    stats_.padding_bytes += rec.padding;
    stats_.overhead_bytes += tb_bytes - rec.data_bytes - rec.padding;
    return out;
}

built_tb segmenter::build_compact(std::size_t tb_bytes, const packet_source& source,
                                  std::optional<float> price_s) {
    if (tb_bytes < kCompactMinPduBytes || tb_bytes > kMaxPduBytes)
        throw_invalid("segmenter.tb_bytes: " + std::to_string(tb_bytes) +
                      " not in [5, 65535] (compact format)");
    // The price only where it leaves a byte for packets (pdu.h): an 8-byte TB goes unpriced.
    const bool priced = price_s && tb_bytes > kCompactHeaderBytes + kCompactPriceBytes;
    if (price_s && !priced) ++stats_.prices_omitted;
    const std::size_t hdr = kCompactHeaderBytes + (priced ? kCompactPriceBytes : 0);
    // The session trailer while announcing, where it leaves a byte for packets (pdu.h).
    const bool with_session = announce_session_ && tb_bytes > hdr + kSessionBytes;
    if (announce_session_ && !with_session) ++stats_.sessions_omitted;
    if (with_session) ++stats_.sessions_sent;
    built_tb out;
    out.bytes.assign(tb_bytes, 0);
    tb_record& rec = out.record;
    rec.user = params_.user;
    rec.seq = next_seq_ & kCompactSeqMask;
    rec.tb_bytes = tb_bytes;
    rec.session = with_session;

    std::uint8_t* b = out.bytes.data();
    std::size_t pos = hdr;
    const std::size_t end = tb_bytes - (with_session ? kSessionBytes : 0);
    // Copies as much of the packet in progress as fits and records the fragment (the record
    // is what a HARQ drop of this TB drops, held_tbs.h).
    auto carry = [&]() {
        partial_packet& pr = *partial_;
        const std::size_t size = pr.packet.data.size();
        const std::size_t n = std::min(end - pos, size - pr.sent);
        std::memcpy(b + pos, pr.packet.data.data() + pr.sent, n);
        rec.segments.push_back(
            segment_record{pr.packet.id, pr.packet_seq, static_cast<std::uint16_t>(size),
                           static_cast<std::uint16_t>(pr.sent), static_cast<std::uint16_t>(n)});
        pos += n;
        pr.sent += n;
        rec.data_bytes += n;
        if (pr.sent == size) {
            ++stats_.packets_completed;
            partial_.reset();
        }
    };
    std::uint16_t first = 0;
    if (partial_) {
        carry();
        // Where the continuation ends; if it fills the TB, nothing starts here.
        first = pos == end ? kCompactNoStart : static_cast<std::uint16_t>(pos - hdr);
    }
    // Invariant: a packet pulled from the source always starts in this TB (pos < end), even
    // if only its first byte fits.
    while (pos < end) {
        std::optional<ip_packet> p = pull(source);
        if (!p) break;
        partial_ = partial_packet{std::move(*p), next_packet_seq_++, 0};
        ++stats_.packets_started;
        carry();
    }
    rec.padding = end - pos;  // zeros: the first one, where a packet would start, marks it
    write_compact_header(b, next_seq_, priced ? price_s : std::nullopt, first, with_session);
    if (with_session) write_session_trailer(b, tb_bytes, pdu_format::compact, *params_.session);
    next_seq_ = (next_seq_ + 1) & kCompactSeqMask;
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
    if (held_timeout < 0)
        throw_invalid("reassembler.held_timeout: " + std::to_string(held_timeout) +
                      " ns must be >= 0");
    if (max_ahead < 1)
        throw_invalid("reassembler.max_ahead: " + std::to_string(max_ahead) + " must be >= 1");
    if (max_bytes < kMaxPacketBytes)
        throw_invalid("reassembler.max_bytes: " + std::to_string(max_bytes) +
                      " is below one maximal packet (65535)");
}

reassembler::reassembler(reassembler_params params)
    : params_(params), next_(params.first_seq), expected_packet_seq_(params.first_packet_seq) {
    params_.validate();
}

std::uint32_t reassembler::seq_mask() const {
    return format_ == pdu_format::compact ? kCompactSeqMask : 0xFFFFFFFFu;
}

std::uint32_t reassembler::next_seq() const {
    return static_cast<std::uint32_t>(next_) & seq_mask();
}

std::uint32_t reassembler::window() const {
    return format_ == pdu_format::compact ? std::min(params_.window, kCompactMaxWindow)
                                          : params_.window;
}

std::optional<std::uint64_t> reassembler::unwrap(std::uint32_t seq) const {
    // RFC 1982 serial arithmetic around next_, mod 2^32 (standard) or 2^12 (compact): a seq
    // within half the space before next_ is old (nullopt), otherwise it lies at or beyond
    // next_ on the unwrapped 64-bit line.
    const std::uint32_t mask = seq_mask();
    const std::uint32_t d = (seq - static_cast<std::uint32_t>(next_)) & mask;
    if (d > (mask >> 1)) return std::nullopt;
    return next_ + d;
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
        case loss_cause::restart:
            stats_.dropped_restart += n;
            break;
    }
}

void reassembler::drop_partial(loss_cause cause) {
    if (!partial_) return;
    held_bytes_ -= partial_->data.size();
    partial_.reset();
    count_drop(cause, 1);
    skipping_ = true;  // compact: its rest, if it comes, is discarded without a count
}

void reassembler::deliver_partial(delivered_packets& out) {
    held_bytes_ -= partial_->data.size();
    stats_.delivered_bytes += partial_->data.size();
    ++stats_.delivered;
    out.push_back(std::move(partial_->data));
    partial_.reset();
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

void reassembler::process_compact(const tb_entry& e, delivered_packets& out, bool closes_run) {
    const loss_cause cause = loss_pending_ ? last_cause_ : loss_cause::reported;
    const std::uint8_t* d = e.data.data();
    if (partial_) {
        // The continuation belongs to the packet in progress: no loss since it started.
        partial_packet& pr = *partial_;
        pr.data.insert(pr.data.end(), d, d + e.continuation);
        held_bytes_ += e.continuation;
        std::string why;
        if (pr.packet_len == 0) {  // its header was cut off: complete now?
            const auto l = ip_packet_length(pr.data.data(), pr.data.size(), "pdu.continuation: ");
            if (!l)
                why = l.error();
            else if (l.value())
                pr.packet_len = static_cast<std::uint16_t>(*l.value());
        }
        const std::string where = " (PDU seq " + std::to_string(next_seq()) + ")";
        if (why.empty() && pr.packet_len != 0 && pr.data.size() > pr.packet_len) {
            why = "pdu.first: " + std::to_string(e.no_start ? kCompactNoStart : e.continuation) +
                  " continues the packet to " + std::to_string(pr.data.size()) +
                  " bytes, past the " + std::to_string(pr.packet_len) + " its IP header gives" +
                  where;
        } else if (why.empty() && !e.no_start && e.continuation > 0 &&
                   (pr.packet_len == 0 || pr.data.size() < pr.packet_len)) {
            why = "pdu.first: " + std::to_string(e.continuation) + " ends the packet at " +
                  std::to_string(pr.data.size()) + " bytes, short of the " +
                  (pr.packet_len ? std::to_string(pr.packet_len) : std::string("(unknown)")) +
                  " its IP header gives" + where;
        } else if (!why.empty()) {
            why += where;
        }
        if (!why.empty()) {
            // The stream disagrees with itself: drop the packet, resume at the next start.
            ++stats_.inconsistent;
            if (error_) *error_ = why;
            drop_partial(cause);
        } else if (pr.packet_len != 0 && pr.data.size() == pr.packet_len) {
            deliver_partial(out);
        } else if (!e.no_start) {
            // A packet (or the padding) starts with the packet unfinished: the AP abandoned
            // it (segmenter::abandon_partial).
            drop_partial(cause);
        }
    } else if (e.continuation > 0 && !skipping_) {
        // The rest of a packet whose beginning a lost PDU carried: discarded, counted once.
        count_drop(cause, 1);
        skipping_ = true;
        if (closes_run) runs_.back().tail_counted = true;
    }
    if (!e.no_start) {
        skipping_ = false;  // resynchronised: packets start at `first`
        for (const segment_ref& s : e.segs) {
            const std::uint8_t* p = d + s.data_pos;
            if (s.packet_len != 0 && s.seg_len == s.packet_len) {
                out.emplace_back(p, p + s.seg_len);
                ++stats_.delivered;
                stats_.delivered_bytes += s.seg_len;
            } else {  // the last one, cut by the TB's end
                partial_ =
                    partial_packet{0, s.packet_len, std::vector<std::uint8_t>(p, p + s.seg_len)};
                held_bytes_ += s.seg_len;
            }
        }
    }
    loss_pending_ = false;
}

void reassembler::process(const tb_entry& e, delivered_packets& out) {
    const bool closes_run = run_open_;
    if (run_open_) {
        runs_.back().closed = true;
        runs_.back().tail_ambiguous = e.lost;
        run_open_ = false;
    }
    if (e.lost) {
        process_loss(loss_cause::reported);
        return;
    }
    if (e.compact) {
        process_compact(e, out, closes_run);
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

std::size_t reassembler::entry_cost(const tb_entry& e) {
    // The constant covers what one entry allocates besides its bytes: a map node (three
    // links and a colour word, the key, the tb_entry), an arrival-index node (the same
    // links, the pair) and the malloc headers of the map node, index node and two vectors.
    constexpr std::size_t rb_links = 4 * sizeof(void*), malloc_header = 16;
    static_assert(rb_links + sizeof(std::uint64_t) + sizeof(tb_entry) + rb_links +
                          sizeof(std::pair<time_ns, std::uint64_t>) + 4 * malloc_header <=
                      kEntryOverheadBytes,
                  "kEntryOverheadBytes must cover the structures of one entry");
    static_assert(sizeof(segment_ref) <= kSegmentOverheadBytes);
    return kEntryOverheadBytes + e.data.size() + e.segs.size() * kSegmentOverheadBytes;
}

void reassembler::insert_entry(std::uint64_t u, tb_entry&& e) {
    auto it = buffer_.find(u);
    if (it != buffer_.end()) erase_entry(it);  // a PDU replacing its loss report
    held_bytes_ += entry_cost(e);
    by_arrival_.emplace(e.arrival, u);
    buffer_.emplace(u, std::move(e));
}

void reassembler::erase_entry(std::map<std::uint64_t, tb_entry>::iterator it) {
    held_bytes_ -= entry_cost(it->second);
    by_arrival_.erase({it->second.arrival, it->first});
    buffer_.erase(it);
}

void reassembler::drain(delivered_packets& out) {
    while (!buffer_.empty() && buffer_.begin()->first == next_) {
        auto it = buffer_.begin();
        process(it->second, out);
        erase_entry(it);
        ++next_;
    }
}

void reassembler::give_up_until(std::uint64_t target, loss_cause cause, delivered_packets& out) {
    while (next_ < target) {
        auto it = buffer_.begin();
        if (it != buffer_.end() && it->first == next_) {
            process(it->second, out);
            erase_entry(it);
            ++next_;
        } else {
            // A run of missing PDUs [next_, stop): one loss, whatever its length.
            const std::uint64_t stop =
                (it != buffer_.end() && it->first < target) ? it->first : target;
            process_loss(cause);
            stats_.tbs_given_up += stop - next_;
            if (cause != loss_cause::restart) {
                if (run_open_) {  // two runs back to back (window): the first's tail is unknown
                    runs_.back().closed = true;
                    runs_.back().tail_ambiguous = true;
                }
                given_up_run r;
                r.first = next_;
                r.stop = stop;
                r.state.assign(static_cast<std::size_t>(stop - next_), 0);
                runs_.push_back(std::move(r));
                run_open_ = true;
            }
            next_ = stop;
        }
    }
    drain(out);
}

void reassembler::enforce_timeout(time_ns now, delivered_packets& out) {
    // Invariant after drain(): the buffer never holds next_, so a non-empty buffer means a
    // gap at next_. Give it up once the PDU waiting longest has waited `timeout`: no
    // complete packet is held back longer than that by a missing TB. The oldest arrival is
    // the first of by_arrival_, and each round that finds it expired removes at least the
    // first buffered entry, so a call reads the index (expired entries + 1) times.
    while (!by_arrival_.empty()) {
        ++timeout_scan_visits_;
        const time_ns a = by_arrival_.begin()->first;
        if (now - a < timeout_at(a)) break;
        give_up_until(buffer_.begin()->first, loss_cause::timeout, out);
    }
    // Forget the runs given up beyond the horizon (a compact stream cannot tell a PDU that
    // old from one ahead anyway).
    std::size_t drop = 0;
    while (drop < runs_.size() &&
           (runs_[drop].stop + kLateHorizon <= next_ || runs_.size() - drop > kMaxRuns))
        ++drop;
    if (drop == runs_.size()) run_open_ = false;
    runs_.erase(runs_.begin(), runs_.begin() + static_cast<std::ptrdiff_t>(drop));
}

time_ns reassembler::timeout_at(time_ns arrival) const {
    // The missing PDU was sent before the later one arrived: a HARQ process the client
    // NACKed before then may hold it.
    if (harq_pending_since_ && *harq_pending_since_ <= arrival)
        return std::max(params_.timeout, params_.held_timeout);
    return params_.timeout;
}

bool reassembler::on_late(std::uint32_t seq, const tb_entry& e) {
    const std::uint32_t mask = seq_mask();
    const std::uint64_t back = (static_cast<std::uint32_t>(next_) - seq) & mask;
    if (back == 0 || back > next_) return false;
    const std::uint64_t u = next_ - back;
    auto run = std::find_if(runs_.begin(), runs_.end(),
                            [u](const given_up_run& r) { return r.first <= u && u < r.stop; });
    if (run == runs_.end()) return false;
    const std::size_t k = static_cast<std::size_t>(u - run->first);
    if (run->state[k] != 0) return false;  // it came late before: a duplicate now
    const bool has_start = !e.compact || !e.no_start;
    run->state[k] = has_start ? 1 : 2;
    ++stats_.tbs_late;
    if (!e.compact || !has_start) return true;  // standard: every packet counted (gap)
    // Compact. Its continuation belongs to a packet started earlier: counted with the PDU
    // that carried its head (the packet in progress at the loss was counted then). Packets
    // it carried whole were never counted.
    bool cut = false;
    for (const segment_ref& s : e.segs) {
        if (s.packet_len != 0 && s.seg_len == s.packet_len)
            ++stats_.dropped_late;
        else
            cut = true;  // the last one, cut by the PDU's end
    }
    if (!cut) return true;
    // The packet it started and did not end: counted only if it ran through the rest of the
    // run into the PDU after it, whose continuation was counted (tail_counted).
    if (run->closed && !run->tail_counted && !run->tail_ambiguous) {
        ++stats_.dropped_late;
        return true;
    }
    for (std::size_t j = k + 1; j < run->state.size(); ++j) {
        if (run->state[j] == 1) {  // it ended there, inside the run: never counted
            ++stats_.dropped_late;
            return true;
        }
        if (run->state[j] == 0) {  // not seen: it may run on into the counted tail
            ++stats_.dropped_late_perhaps;
            return true;
        }
    }
    if (run->closed && run->tail_counted && !run->tail_ambiguous) return true;  // the tail
    ++stats_.dropped_late_perhaps;  // the run is open, or a loss report closed it
    return true;
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
    if (by_arrival_.empty()) return std::nullopt;
    const time_ns a = by_arrival_.begin()->first;
    return a + timeout_at(a);
}

std::optional<std::string> reassembler::to_entry(const std::uint8_t* data, std::size_t len,
                                                 tb_entry& e, std::uint32_t& seq,
                                                 std::optional<std::uint16_t>& session) {
    const std::optional<pdu_format> f = data && len ? format_of(data[0]) : std::nullopt;
    if (!f) {
        if (!data || len == 0) return std::string("pdu.length: 0 bytes, need >= 5");
        char b[5];
        std::snprintf(b, sizeof b, "0x%02x", data[0]);
        return "pdu.format: byte 0 " + std::string(b) +
               " is neither standard (0x01) nor compact (0b10xxxxxx)";
    }
    // A PDU naming a new session may change the format (the AP restarted with another one).
    if (format_ && *f != *format_) {
        const auto h = peek_header(data, len);
        if (!h || !h.value().session || h.value().session == session_)
            return std::string("pdu.format: a ") + to_string(*f) + " PDU in a stream of " +
                   to_string(*format_) + " PDUs";
    }
    if (*f == pdu_format::compact) {
        auto r = parse_compact_view(data, len);
        if (!r) return r.error();
        const compact_view& v = r.value();
        seq = v.seq;
        session = v.session;
        e.compact = true;
        e.data.assign(v.payload, v.payload + (v.payload_len - v.padding));
        e.continuation = v.continuation;
        e.no_start = !v.first;
        e.segs.reserve(v.packets.size());
        for (const compact_packet_view& p : v.packets)
            e.segs.push_back(segment_ref{0, static_cast<std::uint16_t>(p.packet_len.value_or(0)), 0,
                                         static_cast<std::uint16_t>(p.bytes), p.offset});
    } else {
        auto r = parse_view(data, len);
        if (!r) return r.error();
        const pdu_view& v = r.value();
        if (params_.user && v.header.user != *params_.user)
            return "pdu.user: " + std::to_string(v.header.user) + " is not this client's " +
                   std::to_string(*params_.user);
        seq = v.header.seq;
        session = v.header.session;
        std::size_t bytes = 0;
        for (const segment_view& s : v.segments) bytes += s.seg_len;
        e.data.reserve(bytes);
        e.segs.reserve(v.segments.size());
        for (const segment_view& s : v.segments) {
            e.segs.push_back(
                segment_ref{s.packet_seq, s.packet_len, s.offset, s.seg_len, e.data.size()});
            e.data.insert(e.data.end(), s.data, s.data + s.seg_len);
        }
    }
    format_ = *f;  // the stream's format from its first PDU on
    return std::nullopt;
}

reassembler::delivered_packets reassembler::on_pdu(const std::uint8_t* data, std::size_t len,
                                                   time_ns now, std::string* error) {
    delivered_packets out;
    error_ = error;  // inconsistencies found while processing, in this call
    tb_entry e;
    std::uint32_t seq = 0;
    std::optional<std::uint16_t> session;
    const std::optional<pdu_format> format_before = format_;
    if (auto why = to_entry(data, len, e, seq, session)) {
        ++stats_.malformed;
        if (error) *error = *why;
        enforce_timeout(now, out);
        error_ = nullptr;
        return out;
    }
    if (session && session == retired_session_) {
        // A late PDU of the session a restart replaced (it was in flight, or delayed): the
        // AP that sent it is gone, and it must not flip the stream back.
        ++stats_.stale_session;
        enforce_timeout(now, out);
        error_ = nullptr;
        return out;
    }
    if (session && session != session_) {
        retired_session_ = session_;
        if (session_) {
            // The stream so far was in the old format: finish it in that one.
            const std::optional<pdu_format> now_format = format_;
            format_ = format_before;
            restart_session(out);
            format_ = now_format;
        }
        session_ = session;
    }
    const std::optional<std::uint64_t> uo = unwrap(seq);
    if (uo && far_ahead(*uo)) {
        ++stats_.far_ahead;
        enforce_timeout(now, out);
        error_ = nullptr;
        return out;
    }
    auto it = uo ? buffer_.find(*uo) : buffer_.end();
    if (!uo && on_late(seq, e)) {
        enforce_timeout(now, out);
        error_ = nullptr;
        return out;
    }
    if (!uo || (it != buffer_.end() && !it->second.lost)) {
        ++stats_.duplicates;
        enforce_timeout(now, out);
        error_ = nullptr;
        return out;
    }
    const std::uint64_t u = *uo;
    if (u - next_ >= window()) {
        // Beyond the reordering window: give up the oldest missing PDUs to make room.
        give_up_until(u - window() + 1, loss_cause::timeout, out);
    }
    e.arrival = now;
    insert_entry(u, std::move(e));  // replaces a loss report if the PDU made it after all
    ++stats_.tbs_received;
    drain(out);
    enforce_memory(out);
    enforce_timeout(now, out);
    error_ = nullptr;
    return out;
}

reassembler::delivered_packets reassembler::on_lost(std::uint32_t seq, time_ns now) {
    delivered_packets out;
    const std::optional<std::uint64_t> uo = unwrap(seq);
    if (uo && far_ahead(*uo)) {
        ++stats_.far_ahead;
    } else if (uo && buffer_.find(*uo) == buffer_.end()) {
        const std::uint64_t u = *uo;
        if (u - next_ >= window()) give_up_until(u - window() + 1, loss_cause::timeout, out);
        tb_entry e;
        e.lost = true;
        e.arrival = now;
        insert_entry(u, std::move(e));
        ++stats_.tbs_lost_reported;
        drain(out);
        enforce_memory(out);  // a loss report costs its entry too
    }
    enforce_timeout(now, out);
    return out;
}

bool reassembler::far_ahead(std::uint64_t u) const {
    // A fresh stream (nothing accepted yet) joins wherever the AP is, as before.
    if (stats_.tbs_received == 0 && stats_.tbs_lost_reported == 0) return false;
    return u - next_ >= std::max(window(), params_.max_ahead);
}

void reassembler::restart_session(delivered_packets& out) {
    // Deliver what the old session completed in the buffer and count the rest as lost by
    // the restart: every gap and the packet in progress.
    if (!buffer_.empty())
        give_up_until(std::prev(buffer_.end())->first + 1, loss_cause::restart, out);
    // Packets lost whole after the last PDU heard cannot be counted here without their
    // numbers; the AP's records account for them.
    drop_partial(loss_cause::restart);
    runs_.clear();  // the old session's sequence numbers
    run_open_ = false;
    next_ = params_.first_seq;
    expected_packet_seq_ = params_.first_packet_seq;
    loss_pending_ = false;
    skipping_ = false;
    last_cause_ = loss_cause::reported;
    ++stats_.session_restarts;
}

reassembler::delivered_packets reassembler::poll(time_ns now) {
    delivered_packets out;
    enforce_timeout(now, out);
    return out;
}

}  // namespace oppsched::pdu
