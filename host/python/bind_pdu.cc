#include "bindings.h"

namespace oppsched::py {
void bind_pdu(pybind11::module_& m) { (void)m; }
}  // namespace oppsched::py
