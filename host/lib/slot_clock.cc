// The AP's slot clock and grant cache: see oppsched/slot_clock.h.
#include "oppsched/slot_clock.h"

#include <algorithm>

#include "oppsched/validation.h"

namespace oppsched::ap {

slot_clock::slot_clock(const slot_clock_params& params) : params_(params) {
    if (params_.restart_backjump_slots < 1)
        throw_invalid("restart_backjump_slots", params_.restart_backjump_slots, "not >= 1");
    if (params_.grant_cache < 1) throw_invalid("grant_cache", "0", "not >= 1");
    cache_.assign(params_.grant_cache, cached_grant{});
}

slot_clock::request slot_clock::on_request(std::uint64_t phy_slot) {
    request r;
    if (phy_slot > kMaxPhySlot) return r;
    const std::int64_t ps = static_cast<std::int64_t>(phy_slot);
    if (have_slot_ && !restart_pending_ && ps + params_.restart_backjump_slots < last_phy_) {
        r.backjump = true;
        restart_pending_ = true;
    }
    if (restart_pending_) {
        offset_ = last_internal_ + 1 - ps;
        newest_requested_ = last_internal_;
        restart_pending_ = false;
    }
    const std::int64_t s = ps + offset_;
    r.internal = s;
    if (have_slot_) {
        r.late = params_.lead_slots > 0 &&
                 newest_requested_ >= s + static_cast<std::int64_t>(params_.lead_slots);
        if (s <= last_internal_) {
            const cached_grant& c = cache_[static_cast<std::size_t>(s) % cache_.size()];
            if (c.slot == s) {
                r.what = verdict::duplicate;
                r.grant = &c.grant;
            }
            return r;
        }
        if (s > last_internal_ + 1) r.skipped = static_cast<std::uint64_t>(s - last_internal_ - 1);
    }
    r.what = verdict::fresh;
    have_slot_ = true;
    last_internal_ = s;
    last_phy_ = ps;
    newest_requested_ = std::max(newest_requested_, s);
    return r;
}

void slot_clock::remember(std::int64_t internal, const wire::slot_grant& grant) {
    cached_grant& c = cache_[static_cast<std::size_t>(internal) % cache_.size()];
    c.slot = internal;
    c.grant = grant;
}

bool slot_clock::on_phy_restart() {
    if (!have_slot_ || restart_pending_) return false;
    restart_pending_ = true;
    return true;
}

std::optional<std::int64_t> slot_clock::internal_of(std::uint64_t phy_slot) const {
    if (!have_slot_ || phy_slot > kMaxPhySlot) return std::nullopt;
    return static_cast<std::int64_t>(phy_slot) + offset_;
}

}  // namespace oppsched::ap
