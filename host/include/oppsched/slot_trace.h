#pragma once
// The AP's slots.csv rows (docs/daemons.md): one per slot granted, emitted in slot order once
// the outcome of the transmission it carried is known (ack, nack, dropped, unheard,
// timeout), an empty slot's at once. A row waits at most for its TB's feedback timeout, so
// the rows held stay few; beyond 65536 held rows the oldest leave unresolved (a guard
// against a misconfigured timeout). O(1) per row.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "oppsched/common.h"

namespace oppsched::ap {

// One row of slots.csv (docs/daemons.md). Per-user vectors are indexed by user id.
struct slot_row {
    std::uint64_t slot = 0;  // the PHY's slot number
    time_ns t_ns = 0;        // air time of the slot (slot_request::air_time_ns)
    int user = -1;           // -1: empty slot
    int mcs = -1;
    std::uint32_t tb_bytes = 0;
    int harq_pid = -1, rv = -1, ndi = -1;
    int retx = 0;         // transmissions of this TB before this one
    std::string outcome;  // ack, nack, timeout, dropped; "" for an empty slot (or unknown
                          // at exit)
    bool late = false;
    std::vector<double> cqi;           // latest SNR dB, NaN if none
    std::vector<std::uint64_t> queue;  // bytes queued (+ unsent rest of a split packet)
    std::vector<double> price;         // current CLAMP price s, NaN if none
    std::vector<double> aqm_price;     // the AQM's link price p (REM, REAQM), NaN for others
};

class slot_trace final {
  public:
    slot_trace(std::uint32_t users, std::uint32_t processes);

    // An empty slot's row: ready as soon as the rows before it are.
    void add_empty(slot_row&& row);
    // The row of a transmission on (user, process): waits for resolve().
    void add_transmission(slot_row&& row, std::uint32_t user, std::uint8_t process);
    // The outcome of the last transmission on (user, process); once only, later calls and
    // rows already emitted are left alone.
    void resolve(std::uint32_t user, std::uint8_t process, const char* outcome);

    // The rows ready, in slot order.
    std::vector<slot_row> take();
    // Every row, the unresolved ones with an empty outcome (at exit).
    std::vector<slot_row> take_all();

  private:
    struct pending_row {
        slot_row row;
        bool resolved = false;
    };
    std::uint64_t push(slot_row&& row, bool resolved);
    void flush();

    std::uint32_t processes_;
    std::deque<pending_row> pending_;  // rows in slot order, waiting for outcomes
    std::uint64_t pending_base_ = 0;   // row number of pending_.front()
    std::uint64_t next_row_ = 0;
    std::vector<std::uint64_t> tx_row_;  // per (user, process): row of the last transmission
    std::vector<slot_row> ready_;
};

}  // namespace oppsched::ap
