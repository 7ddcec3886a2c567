// The AQM plugin of test_cpp_plugin.cc, built against oppsched/plugin_api.h alone. It accepts
// and sends everything except what params.mode asks for:
//   drop_every_3rd (DROP every third arrival), mark (MARK every arrival), error (every
//   answer OPPSCHED_PLUGIN_ERROR), invalid (enqueue answers SEND, dequeue ACCEPT: each the
//   other verb's word), drop_after_empty (DROP at dequeue the first packet after on_empty()).
// params.refuse makes the constructor throw.
#include <cstdint>
#include <stdexcept>
#include <string>

#include "oppsched/plugin_api.h"

namespace {

class test_aqm {
  public:
    explicit test_aqm(const oppsched::plugin_params& params) : mode_(params.text("mode", "")) {
        if (params.has("refuse")) throw std::invalid_argument("refuse: asked to refuse");
    }
    std::int32_t enqueue(const oppsched_packet_view&, const oppsched_queue_view&, double) {
        ++arrivals_;
        if (mode_ == "drop_every_3rd" && arrivals_ % 3 == 0) return OPPSCHED_AQM_DROP;
        if (mode_ == "mark") return OPPSCHED_AQM_MARK;
        if (mode_ == "error") throw std::runtime_error("asked to fail");
        if (mode_ == "invalid") return OPPSCHED_AQM_SEND;
        return OPPSCHED_AQM_ACCEPT;
    }
    std::int32_t dequeue(const oppsched_packet_view&, const oppsched_queue_view&, double) {
        if (mode_ == "error") return OPPSCHED_PLUGIN_ERROR;
        if (mode_ == "invalid") return OPPSCHED_AQM_ACCEPT;
        if (mode_ == "drop_after_empty" && was_empty_) {
            was_empty_ = false;
            return OPPSCHED_AQM_DROP;
        }
        return OPPSCHED_AQM_SEND;
    }
    void on_empty(const oppsched_queue_view&, double) { was_empty_ = true; }

  private:
    std::string mode_;
    std::uint64_t arrivals_ = 0;
    bool was_empty_ = false;
};

}  // namespace

OPPSCHED_AQM_PLUGIN(test_aqm, "test_aqm")
