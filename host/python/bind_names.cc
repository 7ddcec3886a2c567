// Python: the names and defaults the C++ defines, so that Python reads them here instead of
// repeating them (one source for each): tools/oppsched/names.py takes its C++
// enumerations from these, and tools/tests/test_names.py checks that Python and C++ agree.
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "bindings.h"
#include "oppsched/ap_core.h"
#include "oppsched/aqm.h"
#include "oppsched/fading.h"
#include "oppsched/sched.h"

namespace oppsched::py {
namespace {

namespace pyb = pybind11;

// The kind() of every scheduler policy sched.h defines, in the variant's order.
template <std::size_t... I>
pyb::tuple scheduler_kinds(std::index_sequence<I...>) {
    pyb::list out;
    (
        [&out] {
            sched::scheduler_params c;
            c.policy = std::variant_alternative_t<I, sched::policy_params>{};
            if (auto* w = std::get_if<sched::weighted_pf_params>(&c.policy)) w->weights = {1.0};
            out.append(std::string(sched::make_scheduler(c)->kind()));
        }(),
        ...);
    return pyb::tuple(out);
}

}  // namespace

void bind_names(pybind11::module_& m) {
    m.attr("SCHEDULER_KINDS") =
        scheduler_kinds(std::make_index_sequence<std::variant_size_v<sched::policy_params>>{});

    pyb::list marking;
    for (std::size_t i = 0; i < aqm::kAqmKindCount; ++i) {
        const auto k = static_cast<aqm::aqm_kind>(i);
        if (aqm::marks_ecn(k)) marking.append(std::string(aqm::to_string(k)));
    }
    m.attr("MARKING_AQM_KINDS") = pyb::tuple(marking);

    m.attr("MCS_TABLE_NAMES") = pyb::tuple(pyb::cast(ap::mcs_table_names()));
    // ap_core.h's link_mode (the apd's link_adaptation.mode), in declaration order.
    m.attr("LINK_MODES") = pyb::make_tuple(std::string(ap::to_string(ap::link_mode::table)),
                                           std::string(ap::to_string(ap::link_mode::paper)));
    // ap_core.h's mu_c_mode (the apd's clamp.mu_c).
    m.attr("MU_C_MODES") =
        pyb::make_tuple(std::string(ap::to_string(ap::mu_c_mode::measured)),
                        std::string(ap::to_string(ap::mu_c_mode::all_backlogged)));
    const ap::shannon_table_params shannon;
    pyb::dict defaults;
    defaults["w0_hz"] = shannon.w0_hz;
    defaults["cmax_bps"] = shannon.cmax_bps;
    defaults["levels"] = shannon.levels;
    m.attr("SHANNON_TABLE_DEFAULTS") = defaults;

    // The models fading_channel(model=...) builds (bind_channel.cc), and G of Andrew & Hanly's
    // fading_channel.
    m.attr("FADING_MODELS") = pyb::make_tuple("jakes", "sum_of_sinusoids");
    m.attr("JAKES_GENERATORS") = channel::kClampGenerators;
}

}  // namespace oppsched::py
