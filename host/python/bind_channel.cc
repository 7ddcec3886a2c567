#include "bindings.h"

namespace oppsched::py {
void bind_channel(pybind11::module_& m) { (void)m; }
}  // namespace oppsched::py
