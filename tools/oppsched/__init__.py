"""oppsched: a testbed for TCP over opportunistic scheduling and AQM on a wireless downlink.

Sub-modules:
    oppsched.mac  -- the MAC library (C++ via pybind11): schedulers, AQMs, CLAMP, HARQ, ...
    oppsched.cli  -- the `oppsched` command line
"""

__version__ = "0.1.0"
