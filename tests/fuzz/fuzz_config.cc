// Fuzz target: the daemons' YAML configuration readers (host/daemon: apd_config.cc,
// client_config.cc, wrc_config.cc). The first input byte picks the reader (oppsched-apd,
// oppsched-client, oppsched-wrc send, oppsched-wrc recv), the rest is the YAML text.
// Invariant: whatever the text, a reader returns or throws std::invalid_argument (the
// project's config_error, naming the dotted field) or a yaml-cpp exception; any other
// exception, a crash or a sanitizer report is a bug.
#include <yaml-cpp/exceptions.h>

#include <stdexcept>
#include <string>

#include "apd_config.h"
#include "client_config.h"
#include "fuzz_util.h"
#include "oppsched/daemon/config.h"
#include "wrc_config.h"

using namespace oppsched;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
    try {
        const daemon::config_node root = daemon::config_node::parse(text, "fuzz.yaml");
        switch (data[0] % 4) {
            case 0:
                (void)apd::read_apd_config(root);
                break;
            case 1:
                (void)client::read_client_config(root);
                break;
            case 2:
                (void)wrc_daemon::read_sender_config(root);
                break;
            default:
                (void)wrc_daemon::read_receiver_config(root);
                break;
        }
    } catch (const std::invalid_argument& e) {
        FUZZ_CHECK(*e.what() != '\0', "an error says what is wrong");
    } catch (const YAML::Exception&) {
        // yaml-cpp's own: a syntax error (config_node::parse names file, line, column)
    }
    return 0;
}
