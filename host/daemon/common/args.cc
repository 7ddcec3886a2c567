#include "oppsched/daemon/args.h"

namespace oppsched::daemon {

daemon_args parse_args(int argc, char** argv) {
    daemon_args r;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--config" && i + 1 < argc) {
            r.config = argv[++i];
        } else if (a.rfind("--config=", 0) == 0) {
            r.config = a.substr(9);
        } else if (a == "--check") {
            r.check = true;
        } else if (a == "--schema") {
            r.schema = true;
        } else if (a == "-h" || a == "--help") {
            r.help = true;
        } else {
            r.error = "unknown argument '" + a + "'";
            return r;
        }
    }
    if (!r.help && !r.schema && r.config.empty()) r.error = "--config FILE is required";
    return r;
}

}  // namespace oppsched::daemon
