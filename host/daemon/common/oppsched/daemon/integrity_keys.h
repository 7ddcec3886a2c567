// The run's integrity keys, read from a daemon's configuration (docs/security.md, "The air:
// forged and replayed TBs"). The apd (its `pdu` section) and each client (its top level)
// name the testbed key file and the run's id the same way; this is the one reader of both.
#pragma once

#include <optional>

#include "oppsched/daemon/config.h"
#include "oppsched/integrity.h"

namespace oppsched::daemon {

// The downlink key (the apd tags, the client checks) and the uplink key (a station tags, the
// apd's medium checks), both derived from the testbed key for one run (integrity::run_key).
struct integrity_keys {
    integrity::tag_key downlink{};
    integrity::tag_key uplink{};
};

// Reads `integrity_key_file` (a secret file of 2 x kKeyBytes hexadecimal digits,
// read_secret_hex_file) and `integrity_run_id` (32 hexadecimal digits) of `node`. None when
// there is no key file (no tag); a key file without a run id, an unreadable or malformed
// file, or a malformed run id fails (config_error naming the key under `node`).
std::optional<integrity_keys> read_integrity_keys(const config_node& node);

}  // namespace oppsched::daemon
