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

// A FIFO of packets that counts bytes and packets against QueueLimits. It never decides
// anything: callers check fits() before push(). O(1) push/pop (std::deque).
class PacketFifo final {
  public:
    explicit PacketFifo(QueueLimits limits = {}) : limits_(limits) {}

    // Would a packet of `size` bytes fit now?
    bool fits(std::size_t size) const {
        return (limits_.bytes == 0 || bytes_ + size <= limits_.bytes) &&
               (limits_.packets == 0 || q_.size() + 1 <= limits_.packets);
    }
    void push(Packet&& p) {  // precondition: fits(p.size())
        bytes_ += p.size();
        q_.push_back(std::move(p));
    }
    Packet pop() {  // precondition: !empty()
        Packet p = std::move(q_.front());
        q_.pop_front();
        bytes_ -= p.size();
        return p;
    }
    const Packet& front() const { return q_.front(); }
    bool empty() const { return q_.empty(); }
    std::size_t bytes() const { return bytes_; }
    std::size_t packets() const { return q_.size(); }
    const QueueLimits& limits() const { return limits_; }

  private:
    std::deque<Packet> q_;
    std::size_t bytes_ = 0;
    QueueLimits limits_;
};

enum class QueueMode : std::uint8_t {
    per_user,  // one AQM instance per user
    shared,    // one AQM instance for every user: a single FIFO with head-of-line blocking
};

struct QueueSetConfig {
    std::size_t users = 1;
    QueueMode mode = QueueMode::per_user;
    AqmConfig aqm{};  // used for every queue (per_user) or the one queue (shared)
};

// Maps users to queues. The scheduler asks which users have backlog (and, in shared mode,
// which user the head-of-line packet belongs to: only that user can be served); segmentation
// pulls whole packets of the scheduled user with dequeue(user, now).
//
// Per-user byte/packet counts are kept in both modes (the shared FIFO holds several users).
// Shared mode with a dequeue-time AQM (CoDel): if the AQM drops the head and hands out a
// packet of another user, that packet becomes the head of line held here (`pending`) until
// its user is served; it counts in total_bytes() but no longer against the AQM's limit.
class QueueSet final {
  public:
    // Throws std::invalid_argument for users == 0 or a bad AQM configuration.
    explicit QueueSet(const QueueSetConfig& config);
    QueueSet(const QueueSet&) = delete;
    QueueSet& operator=(const QueueSet&) = delete;

    std::size_t users() const { return user_bytes_.size(); }
    QueueMode mode() const { return mode_; }

    // Routes by packet.user (std::out_of_range if >= users()). Returns whether accepted.
    bool enqueue(Packet packet, time_ns now);
    // Next packet of `user`, or nothing. In shared mode only the head-of-line user is served.
    std::optional<Packet> dequeue(std::uint32_t user, time_ns now);

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
    Aqm& queue(std::size_t i) { return *queues_.at(i); }
    const Aqm& queue(std::size_t i) const { return *queues_.at(i); }
    Aqm& queue_of(std::uint32_t user) { return *queues_.at(index_of(user)); }

    // Every drop of every queue goes here (after the set's own bookkeeping).
    void set_drop_sink(DropSink sink) { sink_ = std::move(sink); }
    std::vector<Drop> take_drops();

  private:
    std::size_t index_of(std::uint32_t user) const {
        return mode_ == QueueMode::shared ? 0 : static_cast<std::size_t>(user);
    }
    void on_drop(Drop&& d);
    void count_out(const Packet& p);
    const Packet* head_of_line() const;

    QueueMode mode_;
    std::vector<std::unique_ptr<Aqm>> queues_;
    std::vector<std::size_t> user_bytes_;
    std::vector<std::size_t> user_packets_;
    std::optional<Packet> pending_;  // shared mode only, see above
    DropSink sink_;
    std::vector<Drop> drops_;
};

}  // namespace oppsched::aqm
