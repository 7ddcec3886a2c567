// See integrity_keys.h.
#include "oppsched/daemon/integrity_keys.h"

#include <exception>
#include <stdexcept>
#include <string>

#include "oppsched/daemon/zmq_endpoint.h"

namespace oppsched::daemon {

std::optional<integrity_keys> read_integrity_keys(const config_node& node) {
    if (!node.has("integrity_key_file")) return std::nullopt;
    const std::string path = node.require<std::string>("integrity_key_file");
    integrity::tag_key testbed{};
    try {
        testbed = integrity::key_from_hex(read_secret_hex_file(path, integrity::kKeyBytes));
    } catch (const std::exception& e) {
        node.fail("integrity_key_file", e.what());
    }
    if (!node.has("integrity_run_id"))
        node.fail("integrity_run_id",
                  "required with integrity_key_file: the run's id (32 hexadecimal digits, "
                  "drawn per run), which binds the tag to the run");
    integrity::run_id run{};
    try {
        run = integrity::run_id_from_hex(node.require<std::string>("integrity_run_id"));
    } catch (const std::invalid_argument& e) {
        node.fail("integrity_run_id", e.what());
    }
    return integrity_keys{integrity::run_key(testbed, run, integrity::link_direction::downlink),
                          integrity::run_key(testbed, run, integrity::link_direction::uplink)};
}

}  // namespace oppsched::daemon
