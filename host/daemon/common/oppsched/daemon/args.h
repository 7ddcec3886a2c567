#pragma once
// The command line both daemons take: `--config FILE` (or --config=FILE), `--check`
// (validate the configuration and exit), `--schema` (print the field table as JSON and exit;
// no --config needed), `-h`/`--help`.
#include <string>

namespace oppsched::daemon {

struct daemon_args {
    std::string config;   // path of the YAML configuration
    bool check = false;   // validate and exit
    bool help = false;    // print usage and exit 0
    bool schema = false;  // print the field table (field_table.h) and exit 0
    std::string error;    // non-empty: the command line is wrong (names the argument)
};

daemon_args parse_args(int argc, char** argv);

}  // namespace oppsched::daemon
