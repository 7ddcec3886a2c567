#pragma once
// lead_slots: the PHY sends slot_request n this many slots before slot n (docs/daemons.md,
// "Slot timing"): part of the PHY-MAC contract, beside wire.h. Its one default and one range:
// the parameters of the AP core, the slot clock and the shared medium and the PHY's slot_tx
// block default to it, ap_core, the medium and slot_tx check against them, the apd's field
// table reads with them (so `oppsched-apd --schema` prints them), and the PHY's
// and the experiment's schemas take them from that table (DAEMON_FIELDS in
// tools/oppsched/_generated.py), so no reader keeps a range of its own.
#include <cstdint>

namespace oppsched {

constexpr std::uint32_t kDefaultLeadSlots = 4;
// At least one slot: slot n's grant must be computable before n is on air (the PHY's
// slot_tx refuses 0). At most 1000: the medium keeps per-slot state that far back.
constexpr std::uint32_t kMinLeadSlots = 1;
constexpr std::uint32_t kMaxLeadSlots = 1000;

}  // namespace oppsched
