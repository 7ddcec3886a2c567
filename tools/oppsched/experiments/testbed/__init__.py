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

from oppsched.experiments.testbed.analysis import analyze
from oppsched.experiments.testbed.orchestration import run
from oppsched.experiments.testbed.plots import compare_plots, plot
from oppsched.experiments.testbed.programs import TestbedError, find_programs, programs_available
from oppsched.experiments.testbed.schema import SCHEMA, check, resolved_ecn

__all__ = ["SCHEMA", "check", "run", "analyze", "plot", "compare_plots", "TestbedError",
           "find_programs", "programs_available", "resolved_ecn"]
