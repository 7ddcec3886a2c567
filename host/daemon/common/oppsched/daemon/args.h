#pragma once
// The command line both daemons take: `--config FILE` (or --config=FILE), `--check`
// (validate the configuration and exit), `-h`/`--help`.
#include <string>

namespace oppsched::daemon {

struct daemon_args {
    std::string config;  // path of the YAML configuration
    bool check = false;  // validate and exit
    bool help = false;   // print usage and exit 0
    std::string error;   // non-empty: the command line is wrong (names the argument)
};

daemon_args parse_args(int argc, char** argv);

}  // namespace oppsched::daemon
