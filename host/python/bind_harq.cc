#include "bindings.h"

namespace oppsched::py {
void bind_harq(pybind11::module_& m) { (void)m; }
}  // namespace oppsched::py
