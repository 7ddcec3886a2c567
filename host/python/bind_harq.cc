// Python: HarqEntity, HarqGrant, HarqEvent (see oppsched/harq.h).
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "oppsched/harq.h"

namespace oppsched::py {
namespace {

using namespace oppsched::harq;

const char* phase_name(process_phase p) {
    switch (p) {
        case process_phase::idle:
            return "idle";
        case process_phase::awaiting_feedback:
            return "awaiting_feedback";
        case process_phase::retx_pending:
            return "retx_pending";
    }
    return "?";
}

}  // namespace

void bind_harq(pybind11::module_& m) {
    namespace pb = pybind11;

    pb::class_<tx_grant>(m, "tx_grant", "One transmission: what the PHY control header carries.")
        .def_readonly("user", &tx_grant::user)
        .def_readonly("process", &tx_grant::process)
        .def_readonly("ndi", &tx_grant::ndi)
        .def_readonly("rv", &tx_grant::rv)
        .def_readonly("transmission", &tx_grant::transmission, "1 = first transmission")
        .def_readonly("unheard", &tx_grant::unheard,
                      "earlier transmissions the receiver never got (not in `transmission`)")
        .def_readonly("slot", &tx_grant::slot)
        .def_property_readonly("tb_id", [](const tx_grant& g) { return g.tb.id; })
        .def_property_readonly("bytes", [](const tx_grant& g) { return g.tb.bytes; })
        .def_property_readonly("is_retransmission", &tx_grant::is_retransmission)
        .def("__repr__", [](const tx_grant& g) {
            return "<HarqGrant user=" + std::to_string(g.user) +
                   " process=" + std::to_string(g.process) + " ndi=" + std::to_string(g.ndi) +
                   " rv=" + std::to_string(g.rv) + " tx=" + std::to_string(g.transmission) +
                   " tb=" + std::to_string(g.tb.id) + ">";
        });

    pb::class_<harq_event>(m, "harq_event",
                           "Outcome of feedback or of a timeout. kind: acked, nacked, "
                           "dropped_max_tx, timed_out, flushed, stale_feedback, not_received.")
        .def_property_readonly("kind", [](const harq_event& e) { return to_string(e.kind); })
        .def_readonly("user", &harq_event::user)
        .def_readonly("process", &harq_event::process)
        .def_readonly("transmissions", &harq_event::transmissions)
        .def_readonly("slot", &harq_event::slot)
        .def_property_readonly("tb_id", [](const harq_event& e) { return e.tb.id; })
        .def_property_readonly("bytes", [](const harq_event& e) { return e.tb.bytes; })
        .def("__repr__", [](const harq_event& e) {
            return std::string("<HarqEvent ") + to_string(e.kind) +
                   " user=" + std::to_string(e.user) + " process=" + std::to_string(e.process) +
                   " tb=" + std::to_string(e.tb.id) + ">";
        });

    pb::class_<harq_entity>(m, "harq_entity",
                            "AP HARQ entity: per user N stop-and-wait processes, NDI, RV "
                            "sequence, max transmissions, feedback delay and timeout (slots).")
        .def(pb::init([](std::uint32_t num_users, std::uint32_t num_processes,
                         std::uint32_t max_transmissions, std::vector<std::uint8_t> rv_sequence,
                         slot_t feedback_delay_slots, slot_t feedback_timeout_slots) {
                 harq_params c;
                 c.num_users = num_users;
                 c.num_processes = num_processes;
                 c.max_transmissions = max_transmissions;
                 c.rv_sequence = std::move(rv_sequence);
                 c.feedback_delay_slots = feedback_delay_slots;
                 c.feedback_timeout_slots = feedback_timeout_slots;
                 return harq_entity(c);
             }),
             pb::kw_only(), pb::arg("num_users") = 1, pb::arg("num_processes") = 8,
             pb::arg("max_transmissions") = 5,
             pb::arg("rv_sequence") = std::vector<std::uint8_t>{0, 2, 3, 1},
             pb::arg("feedback_delay_slots") = 4, pb::arg("feedback_timeout_slots") = 16)
        .def_property_readonly("num_users", &harq_entity::num_users)
        .def_property_readonly("num_processes",
                               [](const harq_entity& h) { return h.config().num_processes; })
        .def_property_readonly("max_transmissions",
                               [](const harq_entity& h) { return h.config().max_transmissions; })
        .def("set_num_users", &harq_entity::set_num_users, pb::arg("n"))
        .def("free_process", &harq_entity::free_process, pb::arg("user"), pb::arg("slot"),
             "Lowest free process of `user` at `slot`, or None.")
        .def(
            "new_transmission",
            [](harq_entity& h, std::uint32_t user, std::uint64_t tb_id, std::uint32_t bytes,
               slot_t slot) {
                return h.new_transmission(user, tb_ref{tb_id, bytes}, slot);
            },
            pb::arg("user"), pb::arg("tb_id"), pb::arg("bytes"), pb::arg("slot"))
        .def(
            "next_retransmission",
            [](const harq_entity& h, slot_t slot,
               std::optional<std::uint32_t> user) -> std::optional<std::pair<std::uint32_t, int>> {
                const auto r =
                    user ? h.next_retransmission(*user, slot) : h.next_retransmission(slot);
                if (!r) return std::nullopt;
                return std::make_pair(r->user, static_cast<int>(r->process));
            },
            pb::arg("slot"), pb::arg("user") = pb::none(),
            "(user, process) of the oldest retransmission due at `slot`, or None.")
        .def(
            "pending_retransmissions",
            [](const harq_entity& h, slot_t slot) {
                std::vector<retx_ref> out;
                h.pending_retransmissions(slot, out);
                std::vector<std::pair<std::uint32_t, int>> r;
                for (const auto& x : out) r.emplace_back(x.user, static_cast<int>(x.process));
                return r;
            },
            pb::arg("slot"))
        .def("retransmit", &harq_entity::retransmit, pb::arg("user"), pb::arg("process"),
             pb::arg("slot"))
        .def("on_feedback", &harq_entity::on_feedback, pb::arg("user"), pb::arg("process"),
             pb::arg("ndi"), pb::arg("ack"), pb::arg("slot"), pb::arg("tx_slot") = pb::none())
        .def("on_not_received", &harq_entity::on_not_received, pb::arg("user"), pb::arg("process"),
             pb::arg("tx_slot"), pb::arg("slot"),
             "The receiver never got the transmission of `tx_slot` (empty/late slot or header "
             "lost): undone, sent again with the same NDI and RV (not_received), or "
             "dropped_max_tx.")
        .def(
            "expire",
            [](harq_entity& h, slot_t slot) {
                std::vector<harq_event> out;
                h.expire(slot, out);
                return out;
            },
            pb::arg("slot"), "Timed-out TBs at `slot` (their processes are freed).")
        .def(
            "flush_user",
            [](harq_entity& h, std::uint32_t user, slot_t slot) {
                std::vector<harq_event> out;
                h.flush_user(user, slot, out);
                return out;
            },
            pb::arg("user"), pb::arg("slot"))
        .def(
            "process_state",
            [](const harq_entity& h, std::uint32_t user, std::uint8_t process) {
                const process_view v = h.process(user, process);
                pb::dict d;
                d["phase"] = phase_name(v.phase);
                d["ndi"] = v.ndi;
                d["transmissions"] = v.transmissions;
                d["unheard"] = v.unheard;
                d["tb_id"] = v.tb.id;
                d["bytes"] = v.tb.bytes;
                d["last_tx_slot"] = v.last_tx_slot;
                d["ready_slot"] = v.ready_slot;
                return d;
            },
            pb::arg("user"), pb::arg("process"))
        .def_property_readonly("in_flight", [](const harq_entity& h) { return h.in_flight(); })
        .def(
            "in_flight_of", [](const harq_entity& h, std::uint32_t u) { return h.in_flight(u); },
            pb::arg("user"))
        .def_property_readonly(
            "stats", [](const harq_entity& h) { return stats_to_dict(h.stats()); },
            "tb_sent, tx_attempts, acked, nacks, failed_final, timeouts, "
            "flushed, stale_feedback, not_received");
}

}  // namespace oppsched::py
