// A daemon's field table (see oppsched/daemon/field_table.h).
#include "oppsched/daemon/field_table.h"

#include <stdexcept>

namespace oppsched::daemon {

void check_section(const config_node& n, const field_spec& f) {
    if (n.path() != f.section)
        throw std::logic_error("field table: " + f.key() + " read from '" + n.path() + "'");
    if (f.zero_off)
        throw std::logic_error("field table: " + f.key() + ": zero_off in a YAML table");
}

}  // namespace oppsched::daemon
