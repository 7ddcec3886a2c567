"""Installs oppsched's shims for UHD's MPM simulator (oppsched_mpm_shims) in every Python
process started with this folder on PYTHONPATH, then runs the sitecustomize this one
shadows (Debian's, if any). Imported under any other name (as part of the oppsched
package), it does nothing."""

import importlib.util
import os
import sys

if __name__ == "sitecustomize":
    import oppsched_mpm_shims

    oppsched_mpm_shims.install()

    _here = os.path.dirname(os.path.abspath(__file__))
    for _d in sys.path:
        if _d and os.path.abspath(_d) != _here:
            _f = os.path.join(_d, "sitecustomize.py")
            if os.path.isfile(_f):
                _spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", _f)
                _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
                break
