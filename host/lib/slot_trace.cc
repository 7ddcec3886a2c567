// The AP's slots.csv rows: see oppsched/slot_trace.h.
#include "oppsched/slot_trace.h"

#include <utility>

namespace oppsched::ap {

slot_trace::slot_trace(std::uint32_t users, std::uint32_t processes)
    : processes_(processes), tx_row_(static_cast<std::size_t>(users) * processes, ~0ull) {}

void slot_trace::add_empty(slot_row&& row) { push(std::move(row), true); }

void slot_trace::add_transmission(slot_row&& row, std::uint32_t user, std::uint8_t process) {
    tx_row_[user * processes_ + process] = push(std::move(row), false);
}

std::uint64_t slot_trace::push(slot_row&& row, bool resolved) {
    pending_.push_back(pending_row{std::move(row), resolved});
    const std::uint64_t n = next_row_++;
    flush();
    return n;
}

void slot_trace::resolve(std::uint32_t user, std::uint8_t process, const char* outcome) {
    const std::uint64_t n = tx_row_[user * processes_ + process];
    if (n < pending_base_ || n >= pending_base_ + pending_.size()) return;
    pending_row& p = pending_[n - pending_base_];
    if (p.resolved) return;
    p.row.outcome = outcome;
    p.resolved = true;
    flush();
}

void slot_trace::flush() {
    constexpr std::size_t kMaxPending = 1 << 16;
    while (!pending_.empty() && (pending_.front().resolved || pending_.size() > kMaxPending)) {
        ready_.push_back(std::move(pending_.front().row));
        pending_.pop_front();
        ++pending_base_;
    }
}

std::vector<slot_row> slot_trace::take() {
    std::vector<slot_row> out;
    out.swap(ready_);
    return out;
}

std::vector<slot_row> slot_trace::take_all() {
    while (!pending_.empty()) {
        ready_.push_back(std::move(pending_.front().row));
        pending_.pop_front();
        ++pending_base_;
    }
    return take();
}

}  // namespace oppsched::ap
