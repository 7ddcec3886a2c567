// Python plugins in a program that embeds the interpreter: see embedded.h.
#include "embedded.h"

#include <pybind11/embed.h>

#include "python_plugin.h"

namespace oppsched::pyplugin {
namespace py = pybind11;

struct embedded_interpreter::impl {
    py::scoped_interpreter interpreter{false};  // no Python signal handlers
};

embedded_interpreter::embedded_interpreter() : impl_(std::make_unique<impl>()) {}
embedded_interpreter::~embedded_interpreter() = default;

namespace {

// Every Python object that exists now (the interpreter's modules, the plugin's class and
// instance, the views) moves out of the cyclic collector's way (gc.freeze): a full
// collection in the slot loop then scans only what the run itself allocated, not the whole
// heap (one such collection, over ~10^5 objects, held a decision 1.5 ms: a deadline miss).
// Called as each policy is made, so the last call covers them all.
void freeze_heap() { py::module_::import("gc").attr("freeze")(); }

}  // namespace

std::function<std::unique_ptr<sched::scheduler_policy>(std::size_t)> load_python_scheduler(
    const std::string& file, const std::string& class_name, const std::string& params_json,
    const embedded_scheduler_options& options) {
    python_scheduler_options opt;
    opt.alpha = options.alpha;
    opt.slot_s = options.slot_s;
    opt.budget_fraction = options.budget_fraction;
    opt.log = options.log;
    opt.validate();
    py::object params = py::module_::import("json").attr("loads")(params_json);
    if (!py::isinstance<py::dict>(params))
        throw plugin_error(file + ": class " + class_name + ": params: not a mapping");
    auto plugin = std::make_shared<py::object>(
        load_plugin(file, class_name, params.cast<py::dict>(), family::scheduler));
    return [plugin, opt](std::size_t n) {
        auto policy = make_python_scheduler(*plugin, n, opt);
        freeze_heap();
        return policy;
    };
}

std::function<std::unique_ptr<aqm::queue_discipline>(const aqm::aqm_params&)> load_python_aqm(
    const std::string& file, const std::string& class_name, const std::string& params_json,
    std::function<void(const std::string&)> log) {
    py::object params = py::module_::import("json").attr("loads")(params_json);
    if (!py::isinstance<py::dict>(params))
        throw plugin_error(file + ": class " + class_name + ": params: not a mapping");
    const py::dict kw = params.cast<py::dict>();
    py::object first = load_plugin(file, class_name, kw, family::aqm);
    auto cls = std::make_shared<py::object>(py::type::of(first));
    auto kwargs = std::make_shared<py::dict>(kw);
    return [cls, kwargs, file, class_name, log](const aqm::aqm_params& c) {
        py::object obj;
        try {
            obj = (*cls)(**(*kwargs));
        } catch (py::error_already_set& e) {
            throw plugin_error(file + ": class " + class_name + ": " + e.what());
        }
        auto discipline = std::unique_ptr<aqm::queue_discipline>(
            std::make_unique<python_aqm>(std::move(obj), c, log));
        freeze_heap();
        return discipline;
    };
}

}  // namespace oppsched::pyplugin
