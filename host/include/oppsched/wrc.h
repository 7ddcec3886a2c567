#pragma once
// Weighted receiver-based rate control (WRC): Nandagopal et al., "Service Differentiation
// Through End-to-end Rate Control in Low Bandwidth Wireless Packet Networks", §III and the
// receiver's algorithm of Fig. 3, with the parameters of §IV.
//
//   rate_controller (receiver, one per flow): every data packet received in sequence gives a
//       sample of ratio = receive separation / the sender's advertised separation (Fig. 3
//       lines 5-9); at the end of every 350 ms epoch the samples' mean savg_ratio enters a
//       long-term average lavg_ratio over the last 6 epochs (new sample weight 0.125, lines
//       15-17) and
//           lavg_ratio < 1 + savg_ratio * send_packet_sep * alpha * w   (line 20)
//       means increase, rate <- rate + alpha * w and delta <- 0.1 (lines 22-23); otherwise
//       decrease, rate <- rate * (1 - delta) and delta doubles up to 0.5 (lines 25-26).
//       A gap in the sequence is a loss (line 3), classified by its per-packet separation
//       (§III-A.4, heuristic (a)): inside [mean - 2 mdev, mean + 2 mdev] of the measured
//       receive separation it is random (no reaction), outside it is congestion (the rate
//       is halved at once). The rate, with a sequence number, is fed back to the sender.
//   pacer (sender, one per flow): sends evenly spaced packets at the fed-back rate and
//       advertises its separation and the sequence number of the rate it is using.
//
// §III-A.3 also gives a weighted-decrease variant (rate <- rate + alpha, rate <- rate (1 -
// beta / w)); `differentiation::weighted_decrease` selects it. The experiments of §IV use
// weighted increase, the default.
//
// Choices (where the paper is ambiguous or silent), and why:
//  - Graded decrease cap. Fig. 3 line 26 prints delta <- max(2 delta, 0.5), which would make
//    every decrease after the first one 50 %. §III-B ("doubles the value of delta, subject to
//    a maximum of 50%") and §IV ("10% at first, then doubled to 20% and so on, subject to a
//    maximum of 50%") say min: delta <- min(2 delta, 0.5), giving 10, 20, 40, 50, 50 %.
//  - Long-term average. Fig. 3 says "exponential average of savg_ratio over last 6 epochs
//    with weight of 0.125 for new sample", and §III-B insists the history is limited "to a
//    fixed number of epochs rather than using exponential averaging". We keep the last 6
//    short-term averages s_0 (newest) .. s_5 and weigh s_j by 0.125 * 0.875^j, normalised
//    to sum 1: lavg = sum g (1-g)^j s_j / sum g (1-g)^j. The newest epoch then has weight
//    0.125 / (1 - 0.875^6) = 0.227, close to the 0.25 §V uses for "the computed average in
//    the current epoch"; an epoch older than 6 has no influence. Before 6 epochs exist the
//    normalisation runs over those there are (the first lavg is the first savg). Epochs
//    without samples are skipped (line 13: "return"): they enter nothing.
//  - send_packet_sep in line 20 is the mean of the separations the sender advertised in the
//    epoch's samples, so that savg_ratio * send_packet_sep is the average receive separation
//    the comment on line 21 says it measures.
//  - "Sender has started using the latest computed rate" (line 6): every fed-back rate has a
//    sequence number (rate_seq); the sender echoes the one it paces at in every packet, and
//    only packets echoing the latest one give samples. Comparing the advertised separation
//    with 1/rate instead would depend on rounding.
//  - Out of sequence (line 2) is a sequence number above the next expected one: packets
//    expected .. seq-1 are lost. A number below it (duplicate or reordered) is counted as
//    late and otherwise ignored. After a gap the receive time of the packet that revealed it
//    becomes prev_pkt_time (line 10 sits in the in-sequence branch in Fig. 3; keeping the
//    older time would make the next in-sequence sample span the lost packets).
//  - Loss classification mean and mean deviation: Jacobson's estimators (the "mean
//    deviation" of TCP's RTO, the paper's [15]) over every in-sequence receive separation:
//    mean += g (x - mean), mdev += h (|x - mean| - mdev), g = 1/8, h = 1/4, started at
//    mean = x, mdev = x/2 (RFC 6298's start). The band is closed; per_pktsep outside it on
//    either side is congestion, as printed ("otherwise"). Before the first separation
//    sample every loss is random ("the receiver initially predicts that all losses are
//    non-congestion losses").
//  - Congestion loss: "throttles the sending rate by half", at once (not at the epoch end),
//    and only when the packet that revealed the gap was sent at the latest rate (the same
//    test as line 6): losses of packets sent before the previous reduction reached the
//    sender would otherwise halve the rate again for the same congestion (TCP reacts once
//    per window for the same reason). delta is left unchanged. Not counted as an epoch
//    decision: the epoch's own decision still follows at its end.
//  - Rate floor min_rate_pps (default 1 packet/s). Fig. 3 has none, and repeated decreases
//    tend to 0, where an epoch would see no pair of packets and no decision would ever be
//    taken again; §II-B's LIMD floors its decrease at alpha, "typically 1 packet/sec". An
//    optional ceiling max_rate_pps (0: none) models a sender that has no more to send.
//  - The first packet of a flow starts its first epoch and sets the rate to the rate the
//    sender advertises (1 / its separation), clamped to [min, max]: the paper has no slow
//    start ("the startup is linear", §IV-B), so the sender's initial rate is its own choice.
//
// Cost: O(1) per packet; O(lavg_epochs) per epoch. No allocation after construction. Not
// thread-safe.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::wrc {

// §III-A.3: who carries the weight.
enum class differentiation {
    weighted_increase,  // rate <- rate + alpha w; rate <- rate (1 - delta) (Fig. 3, §IV)
    weighted_decrease,  // rate <- rate + alpha;   rate <- rate (1 - delta / w)
};
const char* to_string(differentiation d);
// nullopt for an unknown name ("weighted_increase", "weighted_decrease").
std::optional<differentiation> differentiation_from_string(const std::string& s);

struct rate_controller_params {
    // Rate weight w of the flow's service class (§II-A), > 0.
    double weight = 1.0;
    // Epoch of the receiver's periodic update, seconds: 350 ms (§IV).
    double epoch_s = 0.350;
    // alpha, packets/s per unit of weight added by one increase: §IV, "(0.1 * rate_weight)
    // packets/second with rate weight" (its equal-weight runs of §IV-A used 0.5).
    double alpha_pps = 0.1;
    // delta after an increase and at start: 10 % (Fig. 3 line 23, §IV).
    double delta_initial = 0.1;
    // Cap of the doubling delta: 50 % (§III-B, §IV). In (0, 1).
    double delta_max = 0.5;
    // Epochs in the long-term average (Fig. 3 line 16: 6) and the weight of the newest one
    // in the exponential average (line 17: 0.125). See "Long-term average" above.
    std::uint32_t lavg_epochs = 6;
    double lavg_weight = 0.125;
    // Half-width of the random-loss band in mean deviations: 2 (§III-A.4 (a)).
    double loss_band_deviations = 2.0;
    // Rate multiplier on a congestion loss: "throttles the sending rate by half" (§III-A.4).
    double congestion_loss_factor = 0.5;
    // A congestion loss revealed by a packet sent at an older rate (rate_seq behind the
    // latest): ignored (true, this testbed's addition: one reaction per rate, as TCP's one
    // per window), or acted on like any other (false: Fig. 3 and §III-A.4 as printed).
    bool ignore_stale_congestion = true;
    // Gains of the receive-separation mean and mean deviation (Jacobson's 1/8 and 1/4).
    double separation_gain = 0.125;
    double deviation_gain = 0.25;
    // Rate floor and ceiling, packets/s (not in Fig. 3; see Choices). max 0: no ceiling.
    double min_rate_pps = 1.0;
    double max_rate_pps = 0.0;
    differentiation mode = differentiation::weighted_increase;

    // Throws std::invalid_argument ("wrc.epoch_s: 0 not in (0, inf)") on a bad field.
    void validate() const;
};

// What the receiver reads off one data packet (wrc_packet.h decodes it).
struct data_sample {
    std::uint32_t seq = 0;       // congestion-control sequence number, +1 per packet
    double snd_sep_s = 0.0;      // hdr->snd_packetsep: the sender's separation, seconds, > 0
    std::uint32_t rate_seq = 0;  // the fed-back rate the sender was pacing at
};

enum class decision : std::uint8_t {
    none,             // an epoch without samples (Fig. 3 line 13): nothing changes
    increase,         // lines 22-23
    decrease,         // lines 25-26
    random_loss,      // a gap classified as channel error: nothing changes
    congestion_loss,  // a gap classified as congestion: rate halved
    // classified as congestion, but the packet was sent at an older rate: not acted on
    congestion_ignored,
};
const char* to_string(decision d);

// One epoch end or one loss event, for the receiver's trace.
struct rate_record {
    time_ns t = 0;
    std::uint64_t epoch = 0;  // index of the epoch this happened in (0 = the first)
    decision what = decision::none;
    std::uint32_t samples = 0;  // ratio samples of the epoch (epoch ends)
    double savg_ratio = 0.0;    // short-term average (epoch ends with samples)
    double lavg_ratio = 0.0;    // long-term average (epoch ends with samples)
    double threshold = 0.0;     // 1 + savg_ratio * send_packet_sep * alpha * w
    double rate_before_pps = 0.0;
    double rate_pps = 0.0;      // after
    double delta = 0.0;         // the delta applied (decrease), else the delta now in force
    std::uint32_t lost = 0;     // packets lost in the gap (loss events)
    double per_pktsep_s = 0.0;  // (loss events) the gap's per-packet separation
    double band_lo_s = 0.0, band_hi_s = 0.0;  // (loss events) the random-loss band
};

struct rate_controller_stats {
    std::uint64_t packets = 0;            // on_packet calls
    std::uint64_t invalid = 0;            // snd_sep_s not finite and > 0: ignored
    std::uint64_t in_sequence = 0;        // seq == expected
    std::uint64_t samples = 0;            // ratio samples taken (line 6 satisfied)
    std::uint64_t stale_rate = 0;         // in sequence but sent at an older rate (line 6 not)
    std::uint64_t gaps = 0;               // out-of-sequence arrivals (loss events)
    std::uint64_t lost = 0;               // packets missing in those gaps
    std::uint64_t late = 0;               // below the expected sequence number (ignored)
    std::uint64_t random_losses = 0;      // gaps classified as random
    std::uint64_t congestion_losses = 0;  // gaps classified as congestion, rate halved
    std::uint64_t congestion_stale = 0;   // classified as congestion, sent at an older rate
    std::uint64_t epochs = 0;             // epoch ends
    std::uint64_t empty_epochs = 0;       // of which without samples
    std::uint64_t increases = 0;
    std::uint64_t decreases = 0;
};

class rate_controller final {
  public:
    explicit rate_controller(const rate_controller_params& params = {});

    // A data packet received at `now`. Returns the epoch ends due at or before `now` (run
    // first, as on_timer would), then the loss event this packet revealed, if any. A
    // packet whose snd_sep_s is not finite and > 0 is counted as invalid and ignored.
    std::vector<rate_record> on_packet(time_ns now, const data_sample& pkt);
    // Epoch ends due at or before `now` (Fig. 3 line 12, update_timer_wakeup), oldest first;
    // empty before the first packet.
    std::vector<rate_record> on_timer(time_ns now);
    // When on_timer next has something to do; nullopt before the first packet.
    std::optional<time_ns> next_epoch_end() const;

    bool started() const { return started_; }
    // The rate to feed back, packets/s, and its sequence number (+1 at every change).
    double rate_pps() const { return rate_; }
    std::uint32_t rate_seq() const { return rate_seq_; }
    double delta() const { return delta_; }
    double lavg_ratio() const { return lavg_; }
    // Receive-separation estimators of the loss classification, seconds (0 before a sample).
    double separation_mean_s() const { return sep_mean_; }
    double separation_mdev_s() const { return sep_mdev_; }
    std::uint32_t expected_seq() const { return expected_; }
    std::uint64_t epoch() const { return epoch_; }
    const rate_controller_params& params() const { return params_; }
    const rate_controller_stats& stats() const { return stats_; }

  private:
    rate_record end_epoch(time_ns t);
    rate_record on_gap(time_ns now, const data_sample& pkt, std::uint32_t lost);
    void set_rate(double r);
    double lavg_of_history() const;

    rate_controller_params params_;
    rate_controller_stats stats_;
    bool started_ = false;
    double rate_ = 0.0;
    std::uint32_t rate_seq_ = 0;
    double delta_ = 0.0;
    std::uint32_t expected_ = 0;  // next in-sequence number
    time_ns prev_pkt_time_ = 0;
    time_ns epoch_end_ = 0;
    std::uint64_t epoch_ = 0;
    // This epoch's samples (lines 8-9) and the advertised separations beside them.
    double aggregate_ratio_ = 0.0;
    double aggregate_sep_s_ = 0.0;
    std::uint32_t num_samples_ = 0;
    std::deque<double> history_;  // the last lavg_epochs short-term averages, newest first
    double lavg_ = 0.0;
    bool has_sep_ = false;
    double sep_mean_ = 0.0, sep_mdev_ = 0.0;
};

// ---------------------------------------------------------------------------------------
// Sender: "the sender sends packets according to a recommended rate by the receiver, and
// enforces an inter-packet separation that is the inverse of the rate. The sender
// advertises the inter-packet separation in each packet" (§III-A).

struct pacer_params {
    double initial_rate_pps = 1.0;  // until the first feedback, > 0
    double min_rate_pps = 0.01;     // fed-back rates are clamped to [min, max]; > 0
    double max_rate_pps = 1e6;      // >= min
    // Throws std::invalid_argument ("wrc.pacer.initial_rate_pps: 0 not in (0, inf)").
    void validate() const;
};

struct pacer_stats {
    std::uint64_t sent = 0;
    std::uint64_t feedback = 0;        // on_feedback calls
    std::uint64_t feedback_stale = 0;  // rate_seq not newer than the one in use: ignored
    std::uint64_t rate_changes = 0;    // feedback adopted
    std::uint64_t late_sends = 0;      // on_sent more than one separation after its time
};

class pacer final {
  public:
    explicit pacer(const pacer_params& params = {});

    // The first packet may go at `now`.
    void start(time_ns now);
    // When the next packet is due.
    time_ns next_send() const { return next_; }
    // A packet was sent at `now` (>= next_send()). The next is due one separation after the
    // time this one was due, or at `now` if that is already past: after a stall one packet
    // goes at once and the rest stay spaced (no burst to catch up).
    void on_sent(time_ns now);
    // Feedback: adopt `rate_pps` if `rate_seq` is newer (serial arithmetic) than the one in
    // use. The next packet is then due one new separation after the previous one's time.
    // Returns whether it was adopted. A non-finite or non-positive rate is not adopted.
    bool on_feedback(double rate_pps, std::uint32_t rate_seq);

    double rate_pps() const { return rate_; }
    std::uint32_t rate_seq() const { return rate_seq_; }
    // The separation it advertises, seconds (1 / rate).
    double separation_s() const { return 1.0 / rate_; }
    const pacer_stats& stats() const { return stats_; }

  private:
    pacer_params params_;
    pacer_stats stats_;
    double rate_;
    std::uint32_t rate_seq_ = 0;
    time_ns last_due_ = 0;
    time_ns next_ = 0;
    bool started_ = false;
};

// Serial-number comparison (RFC 1982 for 32 bits): a - b as a signed difference.
constexpr std::int32_t seq_diff(std::uint32_t a, std::uint32_t b) {
    return static_cast<std::int32_t>(a - b);
}

}  // namespace oppsched::wrc
