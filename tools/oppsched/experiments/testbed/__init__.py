"""`kind: testbed` -- end to end: real Linux TCP, iperf3 and tcpdump through the MAC daemons
and a PHY, in network namespaces.

One run (docs/daemons.md, docs/wired.md):

    S_i netns  --wired path d_i/2 each way-->  AP netns: TUN radio0 <-> oppsched-apd
    (iperf3 sender, tcpdump eth0)                          | slot_grant / slot_request (ZeroMQ)
                                                        PHY (abstract: slot-level channel)
                                                           | rx_indication per client
    R_j netns: TUN radio0 <-> oppsched-client  <-----------+
    (iperf3 receiver, tcpdump radio0)          uplink (ACKs, CQI, HARQ feedback) -> apd

The modules, each depending only on those before it:

    schema         SCHEMA and check(): the experiment and its cross-field checks
    programs       the daemons, PHY and tools a run needs (find_programs), TestbedError
    topology       the namespaces, users, TCP overrides and flows of the resolved experiment
    processes      the processes' bookkeeping (CPU seconds, exit codes: processes.json)
    runfolder      the outputs a new run removes, the room kept for the end of a run
    startup        preflight() of every program's file, the readiness waits
    sampling       the receiving sockets' counts, the live goodput
    schedule       the flows at their times, the faults, the progress line
    orchestration  run(): start, readiness, flows, stop, teardown
    readers        reading the run folder's files (an unreadable one is a summary error)
    flowsummary    the flows' rows and checks, and the totals over them
    daemonsummary  the summary's sections from the daemons' records
    analysis       analyze(): summary.json from the run folder's files alone
    plots          plot() and compare_plots()

What a run folder holds: see docs/testbed.md.
"""

from importlib import import_module

from oppsched.experiments.testbed.programs import TestbedError, find_programs, programs_available
from oppsched.experiments.testbed.schema import SCHEMA, check, resolved_ecn

# Imported on first use (PEP 562): analysis and plots bring pandas and matplotlib, which
# `oppsched check` and `--help` do not need.
_LAZY = {"run": "orchestration", "analyze": "analysis", "plot": "plots",
         "compare_plots": "plots"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["SCHEMA", "check", "run", "analyze", "plot", "compare_plots", "TestbedError",
           "find_programs", "programs_available", "resolved_ecn"]
