#pragma once
// The AP's queues: a byte/packet-counted FIFO (the storage the FIFO AQMs use) and the queue
// set the daemon classifies into, either one queue per user (the opportunistic-scheduling
// downlink of Andrew & Hanly and Srinivasan & Baras) or a single FIFO shared by all users (the
// 802.11 AP of Wu, Gong & Williamson, where the head-of-line packet decides which station is served
// next).
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "oppsched/aqm.h"
#include "oppsched/packet.h"

namespace oppsched::aqm {

// A FIFO of packets that counts bytes and packets against queue_limits. It never decides
// anything: callers check fits() before push(). O(1) push/pop (std::deque).
class packet_fifo final {
  public:
    explicit packet_fifo(queue_limits limits = {}) : limits_(limits) {}

    // Would a packet of `size` bytes fit now?
    bool fits(std::size_t size) const {
        return (limits_.bytes == 0 || bytes_ + size <= limits_.bytes) &&
               (limits_.packets == 0 || q_.size() + 1 <= limits_.packets);
    }
    void push(ip_packet&& p) {  // precondition: fits(p.size())
        bytes_ += p.size();
        q_.push_back(std::move(p));
    }
    ip_packet pop() {  // precondition: !empty()
        ip_packet p = std::move(q_.front());
        q_.pop_front();
        bytes_ -= p.size();
        return p;
    }
    const ip_packet& front() const { return q_.front(); }
    bool empty() const { return q_.empty(); }
    std::size_t bytes() const { return bytes_; }
    std::size_t packets() const { return q_.size(); }
    const queue_limits& limits() const { return limits_; }

  private:
    std::deque<ip_packet> q_;
    std::size_t bytes_ = 0;
    queue_limits limits_;
};

enum class queue_mode : std::uint8_t {
    per_user,  // one AQM instance per user
    shared,    // one AQM instance for every user: a single FIFO with head-of-line blocking
};

struct queue_set_params {
    std::size_t users = 1;
    queue_mode mode = queue_mode::per_user;
    aqm_params aqm{};  // used for every queue (per_user) or the one queue (shared)
};

// Maps users to queues. The scheduler asks which users have backlog (and, in shared mode,
// which user the head-of-line packet belongs to: only that user can be served); segmentation
// pulls whole packets of the scheduled user with dequeue(user, now).
//
// Per-user byte/packet counts are kept in both modes (the shared FIFO holds several users).
// Shared mode with a dequeue-time AQM (CoDel): if the AQM drops the head and hands out a
// packet of another user, that packet becomes the head of line held here (`pending`) until
// its user is served; it counts in total_bytes() but no longer against the AQM's limit.
class queue_set final {
  public:
    // Throws std::invalid_argument for users == 0 or a bad AQM configuration.
    explicit queue_set(const queue_set_params& config);
    queue_set(const queue_set&) = delete;
    queue_set& operator=(const queue_set&) = delete;

    std::size_t users() const { return user_bytes_.size(); }
    queue_mode mode() const { return mode_; }

    // Routes by packet.user (std::out_of_range if >= users()). Returns whether accepted.
    bool enqueue(ip_packet packet, time_ns now);
    // Next packet of `user`, or nothing. In shared mode only the head-of-line user is served.
    std::optional<ip_packet> dequeue(std::uint32_t user, time_ns now);

    bool has_backlog(std::uint32_t user) const { return user_packets_.at(user) > 0; }
    // Can `user` be served now? per_user: it has backlog; shared: it owns the head of line.
    bool eligible(std::uint32_t user) const;
    // Users with backlog, ascending (clears `out` first; no allocation once it has capacity).
    void backlogged_users(std::vector<std::uint32_t>& out) const;
    // Users that can be served now, ascending.
    void eligible_users(std::vector<std::uint32_t>& out) const;
    // out[u] = eligible(u), sized users(): the form the scheduler policies take.
    void eligible_mask(std::vector<bool>& out) const;

    std::size_t bytes(std::uint32_t user) const { return user_bytes_.at(user); }
    std::size_t packets(std::uint32_t user) const { return user_packets_.at(user); }
    std::size_t total_bytes() const;
    std::size_t total_packets() const;

    std::size_t queue_count() const { return queues_.size(); }
    queue_discipline& queue(std::size_t i) { return *queues_.at(i); }
    const queue_discipline& queue(std::size_t i) const { return *queues_.at(i); }
    queue_discipline& queue_of(std::uint32_t user) { return *queues_.at(index_of(user)); }

    // Every drop of every queue goes here (after the set's own bookkeeping).
    void set_drop_sink(drop_sink sink) { sink_ = std::move(sink); }
    std::vector<dropped_packet> take_drops();

  private:
    std::size_t index_of(std::uint32_t user) const {
        return mode_ == queue_mode::shared ? 0 : static_cast<std::size_t>(user);
    }
    void on_drop(dropped_packet&& d);
    void count_out(const ip_packet& p);
    const ip_packet* head_of_line() const;

    queue_mode mode_;
    std::vector<std::unique_ptr<queue_discipline>> queues_;
    std::vector<std::size_t> user_bytes_;
    std::vector<std::size_t> user_packets_;
    std::optional<ip_packet> pending_;  // shared mode only, see above
    drop_sink sink_;
    std::vector<dropped_packet> drops_;
};

}  // namespace oppsched::aqm
