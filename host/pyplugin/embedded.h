#pragma once
// Python plugins in a program that embeds the interpreter (the apd): nothing of pybind11 in
// this header, so the program's own code needs no Python headers. See python_plugin.h.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "oppsched/aqm.h"
#include "oppsched/sched.h"

namespace oppsched::pyplugin {

// The interpreter, started by the constructor (Python's own signal handlers not installed:
// the program keeps its signals) and finalised by the destructor; the constructing thread
// holds the GIL throughout, and every plugin call must come from it. One per process.
class embedded_interpreter {
  public:
    embedded_interpreter();
    ~embedded_interpreter();
    embedded_interpreter(const embedded_interpreter&) = delete;
    embedded_interpreter& operator=(const embedded_interpreter&) = delete;

  private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

struct embedded_scheduler_options {
    double alpha = sched::kDefaultAlpha;
    double slot_s = 1.667e-3;
    double budget_fraction = 0.5;
    std::function<void(const std::string&)> log;  // a plugin's first traceback of a method
};

// Loads the plugin (load_plugin: plugin_error, a std::invalid_argument, naming the file, the
// class and the reason; params_json is the plugin's params as a JSON object) and returns a
// factory of python_scheduler policies around that one instance (ap_core_params::
// scheduler_factory). Needs an embedded_interpreter alive for as long as the factory and
// its policies are.
std::function<std::unique_ptr<sched::scheduler_policy>(std::size_t)> load_python_scheduler(
    const std::string& file, const std::string& class_name, const std::string& params_json,
    const embedded_scheduler_options& options);

// Loads the AQM plugin's class (checked as load_plugin does, with one instance made) and
// returns a factory that makes one python_aqm per queue, each with its own instance
// (class(**params)) on a drop-tail FIFO of the queue's aqm_params (ap_core_params::
// aqm_factory). `log` gets each queue's first traceback of a method.
std::function<std::unique_ptr<aqm::queue_discipline>(const aqm::aqm_params&)> load_python_aqm(
    const std::string& file, const std::string& class_name, const std::string& params_json,
    std::function<void(const std::string&)> log);

}  // namespace oppsched::pyplugin
