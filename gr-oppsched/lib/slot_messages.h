#pragma once
// The per-slot messages the oppsched blocks exchange, as PMT dictionaries (gr-ieee802-11
// style: metadata travels as a dict), and their conversion to and from C++ structs. One
// definition for slot_tx, slot_rx and the ZeroMQ bridges, so the keys cannot drift apart.
// Private to the library (the Python side only ever sees the dicts).
//
//   request (slot_tx -> mac_grant_source):  {slot: u64, air_time_ns: long}
//   grant   (mac_grant_source -> slot_tx):  {slot: u64, empty: bool, uplink: bool, user, mcs,
//            harq_pid, ndi (bool or 0/1), rv, tb: u8vector}; `empty`, `uplink` (default false)
//            and `tb` optional: no tb or an empty tb is an empty slot; uplink: the TB is
//            station `user`'s transmission (slot_tx's uplink output)
//   rx      (slot_rx -> rx_indication_sink): rx_report (slot_receiver.h)
//
// Parsing never throws on bad input (any PMT may arrive on a message port): it returns an
// Error naming the key and what was wrong. Integers are accepted as PMT long or uint64.
#include <gnuradio/gr_complex.h>
#include <gnuradio/oppsched/slot_receiver.h>
#include <pmt/pmt.h>

#include <cstdint>
#include <string>
#include <vector>

#include "oppsched/common.h"
#include "oppsched/wire.h"

namespace gr {
namespace oppsched {
namespace slot_msg {

struct request {
    std::uint64_t slot = 0;
    std::int64_t air_time_ns = 0;
};

struct grant {
    std::uint64_t slot = 0;
    bool empty = true;
    bool uplink = false;  // station `user`'s uplink TB (wire.h slot_grant.uplink)
    std::uint16_t user = ::oppsched::wire::kUserNobody;
    std::uint8_t mcs = 0, harq_pid = 0, rv = 0;
    bool ndi = false;
    std::vector<std::uint8_t> tb;
};

pmt::pmt_t to_pmt(const request& r);
pmt::pmt_t to_pmt(const grant& g);
pmt::pmt_t to_pmt(const rx_report& r);

::oppsched::expected<request> request_from_pmt(const pmt::pmt_t& m);
//! Structural checks only (keys, types, ranges of the integer fields); the MCS/TB-size
//! consistency is the slot framer's to check (it knows the numerology).
::oppsched::expected<grant> grant_from_pmt(const pmt::pmt_t& m);
::oppsched::expected<rx_report> rx_from_pmt(const pmt::pmt_t& m);

//! The rx_indication the client agent receives for \p r (wire.h), its SNR the effective one
//! when \p effective. An error naming the field and the value, never undefined behaviour,
//! when a number does not fit its wire field: an SNR that is not finite or outside the f32
//! range, a cqi or combined count outside [0, 255].
::oppsched::expected<::oppsched::wire::rx_indication> to_rx_indication(const rx_report& r,
                                                                       bool effective);

}  // namespace slot_msg
}  // namespace oppsched
}  // namespace gr
