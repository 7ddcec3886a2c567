#pragma once
// Segmentation (AP) and reassembly (client) of IP packets into MAC PDUs (oppsched/pdu.h).
//
// Segmenter (one per user at the AP): fills a TB of a given size from a packet source,
// several packets per TB, a packet split across TBs continuing at the start of the next
// TB of the same user, zero padding when the source runs dry. The source is a callback, so
// any queue or AQM can feed it (dequeue-time AQMs such as CoDel drop inside it). Each TB
// comes with a record of the packet fragments it carried, for HARQ loss accounting and
// traces. It writes the format its params name (pdu.h): standard (segments with headers)
// or compact (the packets back to back).
//
// Reassembler (one per user at the client): accepts either format, told by each PDU's first
// byte; a stream keeps the format of its first PDU (one of the other format is malformed). delivers
// IP packets in MAC sequence order with a reordering window (HARQ processes finish out of order), a
// timeout and a memory cap. A TB lost after its last HARQ attempt (reported by the AP side, or
// detected by the timeout) drops exactly the packets it carried part of; later complete packets are
// not held back beyond the timeout. In the compact format a lost PDU takes the packet in progress
// (its tail is discarded up to the next packet start, the PDU's `first`) and any packet it carried;
// the next packet starting after it is delivered.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "oppsched/packet.h"
#include "oppsched/pdu.h"

namespace oppsched::pdu {

// Returns the next packet of the user's queue, or nullopt when it is empty.
using packet_source = std::function<std::optional<ip_packet>()>;

// One fragment a TB carried.
struct segment_record {
    std::uint64_t packet_id = 0;   // Packet::id
    std::uint16_t packet_seq = 0;  // MAC packet sequence number (on the wire in the standard
                                   // format only; the compact format counts it all the same)
    std::uint16_t packet_len = 0;
    std::uint16_t offset = 0;
    std::uint16_t seg_len = 0;
    bool first() const { return offset == 0; }
    bool last() const { return std::size_t{offset} + seg_len == packet_len; }
};

struct tb_record {
    std::uint16_t user = 0;
    std::uint32_t seq = 0;  // PDU sequence number as sent (mod 2^12 in the compact format)
    std::size_t tb_bytes = 0;
    std::size_t padding = 0;     // zero bytes after the packet data
    std::size_t data_bytes = 0;  // packet bytes carried
    bool session = false;        // the PDU carries the session trailer (pdu.h)
    std::vector<segment_record> segments;
};

struct built_tb {
    std::vector<std::uint8_t> bytes;  // exactly tb_bytes: the serialised PDU
    tb_record record;
};

struct segmenter_params {
    std::uint16_t user = 0;
    std::uint32_t first_seq = 0;         // PDU sequence number of the first TB (compact: <= 4095)
    std::uint16_t first_packet_seq = 0;  // packet sequence number of the first packet
    pdu_format format = pdu_format::standard;
    // The AP's MAC session (pdu.h): written in every PDU until session_acked(); nullopt: never.
    std::optional<std::uint16_t> session;
    void validate() const;  // throws std::invalid_argument naming the field and value
};

struct segmenter_stats {
    std::uint64_t tbs = 0;
    std::uint64_t packets_started = 0;    // packets whose first byte was sent
    std::uint64_t packets_completed = 0;  // packets whose last byte was sent
    std::uint64_t packets_rejected = 0;   // empty or > 65535 bytes (compact: or not the length
                                          // its IP header gives): dropped, never sent
    std::uint64_t packets_abandoned = 0;  // partially sent, then abandon_partial()
    std::uint64_t data_bytes = 0;
    std::uint64_t overhead_bytes = 0;  // PDU and segment headers, CRC
    std::uint64_t padding_bytes = 0;
    std::uint64_t prices_omitted = 0;    // compact: a price given, left out (no data byte left)
    std::uint64_t sessions_sent = 0;     // PDUs that carried the session trailer
    std::uint64_t sessions_omitted = 0;  // compact: announcing, but the TB had no room for it
};

class segmenter final {
  public:
    explicit segmenter(segmenter_params params = {});

    // Builds the next TB of exactly `tb_bytes` bytes (throws std::invalid_argument if not
    // in [20, 65535] standard, [5, 65535] compact). First continues the partially sent packet, then
    // pulls packets from `source` while (standard) a segment header and at least one data byte,
    // (compact) one data byte still fit; a packet pulled is always started in this TB. `price_s`
    // (seconds, finite,
    // >= 0) is stamped in the header when given (compact: when it leaves a data byte).
    // Cost: one copy of the carried bytes, plus the CRC in the standard format.
    built_tb build(std::size_t tb_bytes, const packet_source& source,
                   std::optional<float> price_s = std::nullopt);

    // The partially sent packet: bytes still to send (0 if none).
    std::size_t partial_remaining() const;
    bool has_partial() const { return partial_.has_value(); }
    // Forgets the partially sent packet (e.g. the user's queue is flushed). The client
    // drops it as incomplete when the next TB starts a new packet.
    void abandon_partial();
    // The client acknowledged (HARQ ACK) a PDU that carried the session: it knows the session
    // now, so later PDUs go without the trailer.
    void session_acked() { announce_session_ = false; }
    bool announcing_session() const { return announce_session_; }

    std::uint32_t next_seq() const { return next_seq_; }
    std::uint16_t next_packet_seq() const { return next_packet_seq_; }
    const segmenter_stats& stats() const { return stats_; }
    const segmenter_params& params() const { return params_; }

  private:
    built_tb build_compact(std::size_t tb_bytes, const packet_source& source,
                           std::optional<float> price_s);
    // The next packet from `source` the format can carry (others are counted rejected).
    std::optional<ip_packet> pull(const packet_source& source);

    struct partial_packet {
        ip_packet packet;
        std::uint16_t packet_seq = 0;
        std::size_t sent = 0;
    };
    segmenter_params params_;
    std::optional<partial_packet> partial_;
    std::uint32_t next_seq_;
    std::uint16_t next_packet_seq_;
    bool announce_session_ = false;
    segmenter_stats stats_;
};

struct reassembler_params {
    std::optional<std::uint16_t> user;   // accept only PDUs for this user (nullopt: any)
    std::uint32_t first_seq = 0;         // PDU sequence number expected first
    std::uint16_t first_packet_seq = 0;  // packet sequence number expected first
    std::uint32_t window = 64;           // PDUs [next, next + window) may be buffered; >= 1
                                         // (a compact stream uses at most 2048, pdu.h)
    time_ns timeout = 50 * kNsPerMs;     // a gap is given up once a later PDU waited this
    // ... or this long (if longer) while HARQ may still deliver the missing PDU: the caller
    // says so with set_harq_pending_since() (the client, from the HARQ processes it NACKed
    // and has not seen the AP move on from). 0: the timeout always.
    time_ns held_timeout = 0;
    std::size_t max_bytes = 1 << 20;  // memory held, reassembler::held_bytes(); >= 65535
    // A PDU (or loss report) at least this far ahead of the next expected one is dropped and
    // counted (reassembler_stats::far_ahead), never skipped to: a forged or stale PDU must not
    // make the stream give up what it waits for. Between `window` and this, the oldest gaps
    // are given up to make room. Taken as at least `window`; a compact stream's serial
    // arithmetic cannot tell more than 2048 ahead anyway.
    std::uint32_t max_ahead = 1024;
    void validate() const;  // throws std::invalid_argument naming field, value
};

// Every packet lost is counted exactly once, by the cause of the TB loss that took it:
// reported (dropped_incomplete), timeout or window overflow (dropped_timeout), memory cap
// (dropped_memory). Packets lost whole inside a lost TB are counted from the gap in
// packet sequence numbers (standard format). The compact format has no packet numbers: it
// counts the packet in progress at a loss and a packet whose head a lost TB carried, not
// those a lost TB carried whole (a lower bound; the AP counts them exactly).
//
// A PDU given up (timeout, window, memory) may still arrive: HARQ delivered it after the
// reassembler stopped waiting. It is counted in tbs_late, not in duplicates (the given-up
// sequence numbers are remembered over the last 2048 PDUs), and its packets are not
// delivered (later ones were). In the standard format its packets were all counted already
// (the sequence gap). In the compact format the late PDU shows what the loss could not:
// dropped_late counts the packets it carried whose loss no counter has counted, those it
// carried whole and the one it started that ended in another given-up PDU or whose
// continuation was not counted; dropped_late_perhaps counts a packet it started that may
// have been counted as the given-up run's tail (its later PDUs not seen). So in the compact
// format too, once every given-up PDU has arrived late, each packet lost is counted once.
struct reassembler_stats {
    std::uint64_t delivered = 0;  // packets delivered
    std::uint64_t delivered_bytes = 0;
    std::uint64_t dropped_incomplete = 0;  // packets lost with a TB reported lost by the AP
    std::uint64_t dropped_timeout = 0;     // packets lost with a TB given up by timeout/window
    std::uint64_t dropped_memory = 0;      // packets lost with a TB given up for the memory cap
    std::uint64_t duplicates = 0;          // PDUs already buffered or already passed (HARQ
                                           // duplicates, or late after being given up)
    std::uint64_t malformed = 0;           // PDUs that failed to parse, named another user or
                                           // came in the other format than the stream's
    std::uint64_t tbs_received = 0;        // PDUs accepted
    std::uint64_t tbs_lost_reported = 0;   // loss reports that took effect
    std::uint64_t tbs_given_up = 0;        // missing PDUs skipped by timeout, window or memory
    // Compact: continuations that disagreed with the IP length of the packet they continue
    // (the packet is dropped, counted by cause, and the stream resumes at the next start).
    std::uint64_t inconsistent = 0;
    // MAC sessions (pdu.h): AP restarts detected by a PDU naming another session, the packets
    // given up with everything buffered then, and PDUs or loss reports dropped for being at
    // least max_ahead beyond the next expected PDU (each one counted, none skipped to).
    std::uint64_t session_restarts = 0;
    std::uint64_t dropped_restart = 0;
    std::uint64_t far_ahead = 0;
    std::uint64_t stale_session = 0;  // PDUs of the session a restart replaced (late ones)
    // PDUs that arrived after their gap was given up (HARQ delivered them late), and the
    // packets they carried that no other counter counted, for certain and perhaps (above).
    std::uint64_t tbs_late = 0;
    std::uint64_t dropped_late = 0;
    std::uint64_t dropped_late_perhaps = 0;
};

// Memory: held_bytes() charges every buffered PDU or loss report kEntryOverheadBytes plus its
// packet bytes plus kSegmentOverheadBytes per segment, and the packet in progress its bytes; past
// max_bytes the oldest gaps are given up (their packets counted in dropped_memory) until it fits,
// the packet in progress last. The timeout keeps an index of the entries by arrival time, so a call
// gives up expired gaps in O((expired + 1) log n), whatever the number of PDUs buffered.
class reassembler final {
  public:
    using delivered_packets = std::vector<std::vector<std::uint8_t>>;
    // What one buffered entry costs beyond its packet bytes and segment list: its std::map
    // node (tb_entry and the red-black links), its node in the arrival index, and the
    // allocator headers of its two vectors; about 230 bytes with libstdc++ on 64-bit
    // targets (a static_assert in segmentation.cc keeps the constant above the structures).
    static constexpr std::size_t kEntryOverheadBytes = 256;
    // What each segment (standard) or packet start (compact) of a buffered PDU costs: its
    // entry in the PDU's segment list.
    static constexpr std::size_t kSegmentOverheadBytes = 16;

    explicit reassembler(reassembler_params params = {});

    // A decoded PDU, either format. Returns the packets that became deliverable, in order.
    // Also gives up gaps that have timed out at `now`. Malformed PDUs are counted and
    // ignored (`error`, if given, receives the parse error, or the inconsistency a compact
    // PDU processed in this call revealed); nothing already accepted is lost by them.
    delivered_packets on_pdu(const std::uint8_t* data, std::size_t len, time_ns now,
                             std::string* error = nullptr);
    delivered_packets on_pdu(const std::vector<std::uint8_t>& b, time_ns now) {
        return on_pdu(b.data(), b.size(), now);
    }
    // The AP reports that PDU `seq` failed its last HARQ attempt. Ignored for PDUs already
    // received or passed.
    delivered_packets on_lost(std::uint32_t seq, time_ns now);
    // Gives up gaps whose oldest later PDU has waited >= timeout. Call once per slot or at
    // next_deadline().
    delivered_packets poll(time_ns now);

    // HARQ may still deliver a PDU the client has not received: the oldest time at which it
    // failed a transmission of a TB that the AP has not (as far as the client saw) moved on
    // from; nullopt: none. A gap whose oldest later PDU arrived at or after that time may be
    // that TB's and waits params().held_timeout instead of params().timeout (the TB was sent
    // before every later PDU). Takes effect at the next call that gives up gaps.
    void set_harq_pending_since(std::optional<time_ns> since) { harq_pending_since_ = since; }
    // When poll() would next give up a gap (nullopt if nothing is waiting).
    std::optional<time_ns> next_deadline() const;
    // The memory charged against max_bytes (see above); 0 when nothing is buffered.
    std::size_t held_bytes() const { return held_bytes_; }
    // Arrival-index entries the timeout scans have read since construction: a cost counter
    // (tests pin that a scan reads expired entries + 1, not every buffered one).
    std::uint64_t timeout_scan_visits() const { return timeout_scan_visits_; }
    std::size_t buffered_pdus() const { return buffer_.size(); }
    std::uint32_t next_seq() const;  // as on the wire (mod 2^12 in a compact stream)
    // The stream's format: that of the first PDU accepted (nullopt before).
    std::optional<pdu_format> format() const { return format_; }
    // The AP's MAC session this stream follows (nullopt before a PDU carried one).
    std::optional<std::uint16_t> session() const { return session_; }
    const reassembler_stats& stats() const { return stats_; }
    const reassembler_params& params() const { return params_; }

  private:
    enum class loss_cause : std::uint8_t { reported, timeout, memory, restart };
    struct segment_ref {
        std::uint16_t packet_seq, packet_len, offset, seg_len;
        std::size_t data_pos;  // in Entry::data
    };
    struct tb_entry {
        bool lost = false;  // a loss report, not a PDU
        bool compact = false;
        time_ns arrival = 0;
        std::vector<std::uint8_t> data;  // the segments' data, back to back (compact: the
                                         // payload without its padding)
        // Standard: the segments. Compact: the packets starting in the PDU (packet_len 0:
        // its header is cut off; offset, packet_seq unused).
        std::vector<segment_ref> segs;
        std::size_t continuation = 0;  // compact: data[0, continuation) continues a packet
        bool no_start = false;         // compact: first = kCompactNoStart
    };
    struct partial_packet {
        std::uint16_t packet_seq = 0;
        std::uint16_t packet_len = 0;  // compact: 0 until its IP header is complete
        std::vector<std::uint8_t> data;
    };

    std::optional<std::uint64_t> unwrap(std::uint32_t seq) const;
    std::uint32_t window() const;  // params_.window, at most 2048 in a compact stream
    // Parses a PDU of either format into `e` and its sequence number; the error otherwise.
    std::optional<std::string> to_entry(const std::uint8_t* data, std::size_t len, tb_entry& e,
                                        std::uint32_t& seq, std::optional<std::uint16_t>& session);
    // A PDU named another session than session_: the AP restarted. Gives up everything
    // buffered and the packet in progress (dropped_restart) and expects sequence 0 again.
    void restart_session(delivered_packets& out);
    bool far_ahead(std::uint64_t u) const;
    void process(const tb_entry& e, delivered_packets& out);
    void process_compact(const tb_entry& e, delivered_packets& out, bool closes_run);
    void deliver_partial(delivered_packets& out);
    std::uint32_t seq_mask() const;
    void process_loss(loss_cause cause);
    void count_drop(loss_cause cause, std::uint64_t n);
    void account_gap(std::uint16_t packet_seq);
    void drop_partial(loss_cause cause);
    void drain(delivered_packets& out);
    void give_up_until(std::uint64_t target, loss_cause cause, delivered_packets& out);
    void enforce_timeout(time_ns now, delivered_packets& out);
    // How long the gap waits whose oldest later PDU arrived at `arrival` (timeout or held).
    time_ns timeout_at(time_ns arrival) const;
    // A PDU older than next_: true (counted in tbs_late and dropped_late*) if it was given up
    // and had not arrived late before.
    bool on_late(std::uint32_t seq, const tb_entry& e);
    void enforce_memory(delivered_packets& out);
    static std::size_t entry_cost(const tb_entry& e);
    // Adds or replaces buffer_[u], keeping by_arrival_ and held_bytes_ in step.
    void insert_entry(std::uint64_t u, tb_entry&& e);
    void erase_entry(std::map<std::uint64_t, tb_entry>::iterator it);

    reassembler_params params_;
    std::uint64_t next_;                        // unwrapped sequence number expected next
    std::map<std::uint64_t, tb_entry> buffer_;  // PDUs (or loss reports) beyond next_
    // (arrival, unwrapped seq) of every buffer_ entry: the oldest arrival is first.
    std::set<std::pair<time_ns, std::uint64_t>> by_arrival_;
    std::uint64_t timeout_scan_visits_ = 0;
    std::optional<partial_packet> partial_;
    std::uint16_t expected_packet_seq_;             // packet seq whose first byte is expected next
    loss_cause last_cause_ = loss_cause::reported;  // blamed for packets found missing by seq gaps
    bool loss_pending_ = false;                     // a TB was lost since the last packet start
    bool skipping_ = false;  // compact: discarding the rest of a packet already counted lost
    std::optional<pdu_format> format_;
    std::optional<std::uint16_t> session_;
    std::optional<std::uint16_t> retired_session_;  // the one the last restart replaced
    std::string* error_ = nullptr;                  // on_pdu's `error` during the call
    std::size_t held_bytes_ = 0;
    std::optional<time_ns> harq_pending_since_;
    // Runs of consecutive given-up PDUs [first, stop) of the last kLateHorizon PDUs, for
    // telling a late PDU from a duplicate and, in the compact format, which of its packets
    // were counted. state: per PDU, 0 not arrived, 1 arrived with a packet start, 2 arrived
    // without one (compact: first = kCompactNoStart).
    struct given_up_run {
        std::uint64_t first = 0, stop = 0;
        bool closed = false;          // the entry after the run has been processed
        bool tail_counted = false;    // compact: that entry's continuation was counted lost
        bool tail_ambiguous = false;  // that entry was a loss report
        std::vector<std::uint8_t> state;
    };
    static constexpr std::uint64_t kLateHorizon = 2048;
    static constexpr std::size_t kMaxRuns = 512;
    std::vector<given_up_run> runs_;  // oldest first
    bool run_open_ = false;           // runs_.back() is not closed yet
    reassembler_stats stats_;
};

}  // namespace oppsched::pdu
