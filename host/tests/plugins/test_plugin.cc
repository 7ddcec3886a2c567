// The scheduler plugin of test_cpp_plugin.cc, built against oppsched/plugin_api.h alone as an
// out-of-tree plugin is. Round robin by the served() callback: select() picks the first
// candidate after the user last served (cyclically), so a policy that never hears served()
// keeps picking the same user. params.mode changes what select() answers:
//   rr (default), out_of_range (n_users: not an index), error (OPPSCHED_PLUGIN_ERROR),
//   none (OPPSCHED_NO_USER), slow (sleeps 5 ms, then answers as rr);
// params.refuse makes the constructor throw. Built four times (host/CMakeLists.txt): good,
// abi2 (reports ABI version 2), aqm (reports the AQM family), noentry (no entry point).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <thread>

#include "oppsched/plugin_api.h"

namespace {

class test_rr {
  public:
    test_rr(const oppsched::plugin_params& params, std::size_t num_users) : n_(num_users) {
        if (params.has("refuse")) throw std::invalid_argument("refuse: asked to refuse");
        mode_ = params.text("mode", "rr");
        if (mode_ != "rr" && mode_ != "out_of_range" && mode_ != "error" && mode_ != "none" &&
            mode_ != "slow")
            throw std::invalid_argument("mode: '" + mode_ +
                                        "' not one of rr, out_of_range, "
                                        "error, none, slow");
        last_ = static_cast<std::int64_t>(params.number("first", 0.0)) - 1;
    }

    std::int64_t select(std::int64_t, const oppsched_user_view* users, std::size_t n) {
        if (mode_ == "out_of_range") return static_cast<std::int64_t>(n);
        if (mode_ == "error") throw std::runtime_error("asked to fail");
        if (mode_ == "none") return OPPSCHED_NO_USER;
        if (mode_ == "slow") std::this_thread::sleep_for(std::chrono::milliseconds(5));
        for (std::size_t k = 0; k < n; ++k)
            if (static_cast<std::int64_t>(users[k].id) > last_) return static_cast<std::int64_t>(k);
        return 0;
    }
    void served(std::int64_t, std::int64_t user, std::uint64_t) {
        if (user != OPPSCHED_NO_USER) last_ = user;
    }
    void set_num_users(std::size_t n) { n_ = n; }

  private:
    std::size_t n_;
    std::string mode_;
    std::int64_t last_ = -1;
};

}  // namespace

#if defined(TEST_PLUGIN_VARIANT_good)
OPPSCHED_SCHEDULER_PLUGIN(test_rr, "test_rr")
#elif defined(TEST_PLUGIN_VARIANT_abi2) || defined(TEST_PLUGIN_VARIANT_aqm)
extern "C" __attribute__((visibility("default"))) const oppsched_plugin_v1* oppsched_plugin_entry(
    void) {
    using a = oppsched::plugin_detail::scheduler_adapter<test_rr>;
    static const oppsched_scheduler_v1 table = {&a::create, &a::destroy, &a::select, &a::served,
                                                &a::set_num_users};
#if defined(TEST_PLUGIN_VARIANT_abi2)
    static const oppsched_plugin_v1 plugin = {2u, OPPSCHED_FAMILY_SCHEDULER, "test_rr", &table,
                                              nullptr};
#else
    static const oppsched_plugin_v1 plugin = {OPPSCHED_PLUGIN_ABI_VERSION, OPPSCHED_FAMILY_AQM,
                                              "test_rr", &table, nullptr};
#endif
    return &plugin;
}
#else
// noentry: the class is compiled, no entry point exported.
extern "C" __attribute__((visibility("default"))) int oppsched_test_plugin_no_entry(void) {
    return 0;
}
#endif
