// queue_set: users -> queues (one each, or one shared FIFO).
#include "oppsched/queue.h"

#include <stdexcept>
#include <string>
#include <utility>

#include "oppsched/validation.h"

namespace oppsched::aqm {

queue_set::queue_set(const queue_set_params& config) : mode_(config.mode) {
    if (config.users == 0) throw_invalid("queue_set.users: 0 must be >= 1");
    validate(config.aqm);
    const std::size_t n = mode_ == queue_mode::shared ? 1 : config.users;
    queues_.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        aqm_params c = config.aqm;
        c.seed = config.aqm.seed + i;  // independent random streams per queue
        queues_.push_back(make_aqm(c));
        queues_.back()->set_drop_sink([this](dropped_packet&& d) { on_drop(std::move(d)); });
    }
    user_bytes_.assign(config.users, 0);
    user_packets_.assign(config.users, 0);
}

bool queue_set::enqueue(ip_packet packet, time_ns now) {
    if (packet.user >= users())
        throw std::out_of_range("packet.user: " + std::to_string(packet.user) + " >= users (" +
                                std::to_string(users()) + ")");
    const std::uint32_t user = packet.user;
    const std::size_t size = packet.size();
    // Count first: drops reported during enqueue (evictions) are then taken off consistently.
    // A rejected arrival is reported with a reason that removes_queued_packet() says was
    // never queued, so it is not taken off again.
    const bool ok = queues_[index_of(user)]->enqueue(std::move(packet), now);
    if (ok) {
        user_bytes_[user] += size;
        ++user_packets_[user];
    }
    return ok;
}

void queue_set::on_drop(dropped_packet&& d) {
    if (removes_queued_packet(d.reason)) count_out(d.packet);
    if (sink_) {
        sink_(std::move(d));
    } else {
        drops_.push_back(std::move(d));
    }
}

void queue_set::count_out(const ip_packet& p) {
    user_bytes_[p.user] -= p.size();
    --user_packets_[p.user];
}

const ip_packet* queue_set::head_of_line() const {
    if (pending_) return &*pending_;
    return queues_[0]->peek();
}

std::optional<ip_packet> queue_set::dequeue(std::uint32_t user, time_ns now) {
    if (user >= users())
        throw std::out_of_range("user: " + std::to_string(user) + " >= users (" +
                                std::to_string(users()) + ")");
    std::optional<ip_packet> p;
    if (mode_ == queue_mode::per_user) {
        p = queues_[user]->dequeue(now);
    } else {
        const ip_packet* h = head_of_line();
        if (h == nullptr || h->user != user) return std::nullopt;
        if (pending_) {
            p = std::move(pending_);
            pending_.reset();
        } else {
            p = queues_[0]->dequeue(now);
            if (p && p->user != user) {  // the AQM dropped the head: keep the new head here
                pending_ = std::move(p);
                return std::nullopt;
            }
        }
    }
    if (p) count_out(*p);
    return p;
}

bool queue_set::eligible(std::uint32_t user) const {
    if (mode_ == queue_mode::per_user) return has_backlog(user);
    const ip_packet* h = head_of_line();
    return h != nullptr && h->user == user;
}

void queue_set::backlogged_users(std::vector<std::uint32_t>& out) const {
    out.clear();
    for (std::uint32_t u = 0; u < user_packets_.size(); ++u)
        if (user_packets_[u] > 0) out.push_back(u);
}

void queue_set::eligible_users(std::vector<std::uint32_t>& out) const {
    if (mode_ == queue_mode::per_user) {
        backlogged_users(out);
        return;
    }
    out.clear();
    if (const ip_packet* h = head_of_line()) out.push_back(h->user);
}

void queue_set::eligible_mask(std::vector<bool>& out) const {
    out.assign(users(), false);
    if (mode_ == queue_mode::per_user) {
        for (std::size_t u = 0; u < users(); ++u) out[u] = user_packets_[u] > 0;
    } else if (const ip_packet* h = head_of_line()) {
        out[h->user] = true;
    }
}

std::size_t queue_set::total_bytes() const {
    std::size_t n = pending_ ? pending_->size() : 0;
    for (const auto& q : queues_) n += q->bytes();
    return n;
}

std::size_t queue_set::total_packets() const {
    std::size_t n = pending_ ? 1 : 0;
    for (const auto& q : queues_) n += q->packets();
    return n;
}

std::vector<dropped_packet> queue_set::take_drops() { return std::exchange(drops_, {}); }

}  // namespace oppsched::aqm
