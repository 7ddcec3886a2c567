#include "oppsched/version.h"

namespace oppsched {
const char* version() { return "0.1.0"; }
}  // namespace oppsched
