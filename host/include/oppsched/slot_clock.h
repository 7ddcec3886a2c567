#pragma once
// The AP's slot clock: PHY slot numbers mapped to an internal, monotonic slot count, and the
// cache of the last grants. HARQ and the scheduler run on the internal count, so that when
// the PHY restarts (on_phy_restart(), or a slot number that jumps back by more than
// restart_backjump_slots) the count continues at last + 1 and HARQ timers never run
// backwards. A request for a slot at or before the newest one answered is a duplicate when
// its grant is still cached (the same grant goes again, nothing is scheduled twice) and out
// of order otherwise. A request for slot n is late when a request for m >= n + lead_slots
// was seen before (docs/daemons.md "Slot timing"). O(1) per request.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "oppsched/lead_slots.h"
#include "oppsched/wire.h"

namespace oppsched::ap {

struct slot_clock_params {
    std::uint32_t lead_slots = kDefaultLeadSlots;  // the PHY's lead (late accounting)
    std::int64_t restart_backjump_slots = 1000;    // >= 1
    std::uint32_t grant_cache = 64;                // grants kept for duplicate requests, >= 1
};

class slot_clock final {
  public:
    // Above this no PHY produces a slot number: such a request is out of order.
    static constexpr std::uint64_t kMaxPhySlot =
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / 4);

    enum class verdict { fresh, duplicate, out_of_order };
    struct request {
        verdict what = verdict::out_of_order;
        std::int64_t internal = 0;  // the internal slot of the request
        bool late = false;
        bool backjump = false;      // its number jumped back: counted as a PHY restart
        std::uint64_t skipped = 0;  // fresh: internal slots jumped over since the last one
        const wire::slot_grant* grant = nullptr;  // duplicate: the grant sent for it
    };

    explicit slot_clock(const slot_clock_params& params);

    // Maps a PHY slot request; a fresh one becomes the newest slot answered.
    request on_request(std::uint64_t phy_slot);
    // The grant answered for internal slot `internal`, for a duplicate request of it.
    void remember(std::int64_t internal, const wire::slot_grant& grant);
    // The PHY restarted: the next request starts a new epoch at last + 1. false (nothing
    // changes) before the first request or when a restart is already pending.
    bool on_phy_restart();

    // The internal slot of a PHY slot number of the current epoch; nullopt before the first
    // request or for a number no PHY produces.
    std::optional<std::int64_t> internal_of(std::uint64_t phy_slot) const;
    bool started() const { return have_slot_; }
    bool restart_pending() const { return restart_pending_; }
    std::int64_t last_internal() const { return last_internal_; }  // newest slot answered

  private:
    struct cached_grant {
        std::int64_t slot = -1;
        wire::slot_grant grant;
    };

    slot_clock_params params_;
    bool have_slot_ = false;
    bool restart_pending_ = false;
    std::int64_t last_internal_ = 0;  // newest internal slot answered
    std::int64_t last_phy_ = 0;       // its PHY slot number
    std::int64_t offset_ = 0;         // internal = phy + offset
    std::int64_t newest_requested_ = 0;
    std::vector<cached_grant> cache_;  // ring by internal slot
};

}  // namespace oppsched::ap
