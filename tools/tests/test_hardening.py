"""The daemons hardened (docs/security.md "Seccomp", docs/testbed.md "Reliability"): real
testbed runs over the abstract PHY in which every daemon runs under its seccomp filter, a
SIGKILLed apd leaves its stats and traces up to its last flush, and a stopped client fires
the apd's client watchdog and fails the run naming it. The pieces on their own at the end."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pandas as pd
import pytest

from oppsched.run.runner import failed_dir, run_experiment
from helpers import netns_prefix, require_real_testbed, run_cli, small_testbed, write_experiment

DAEMONS = ("oppsched-apd", "oppsched-client", "oppsched-delay")

LIVE = small_testbed("live", 6, flows=("", "direction: up"), extra="""
    traces: {packets: true}
    capture: {mac: true, pcaps: true}
    clamp: {enabled: true}
""")


def _status(pid: int) -> dict:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = v.strip()
    return out


def _our_daemons() -> dict[int, tuple[str, int]]:
    """The daemons this process started (their parent is us: the wrappers exec them):
    pid -> (program, Seccomp mode)."""
    me = os.getpid()
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            exe = Path(os.readlink(f"/proc/{d}/exe")).name
            if exe not in DAEMONS:
                continue
            st = _status(int(d))
        except OSError:
            continue
        if int(st.get("PPid", -1)) == me:
            out[int(d)] = (exe, int(st.get("Seccomp", -1)))
    return out


def test_every_daemon_of_a_live_run_runs_under_its_seccomp_filter_and_the_run_succeeds(
        tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, LIVE)
    seen: dict[int, tuple[str, int]] = {}
    done = threading.Event()
    result = {}

    def run():
        try:
            with netns_prefix():
                result["runs"] = run_experiment(exp, tmp_path / "out")
        except BaseException as exc:  # noqa: BLE001 -- reported by the assertion below
            result["error"] = exc
        finally:
            done.set()

    t = threading.Thread(target=run)
    t.start()
    # The filter is installed once set up: a daemon's mode goes 0 -> 2 within its start-up.
    while not done.wait(0.2):
        for pid, (exe, mode) in _our_daemons().items():
            if mode == 2 or pid not in seen:
                seen[pid] = (exe, mode)
    t.join()
    assert "error" not in result, result.get("error")
    filtered = {exe for exe, mode in seen.values() if mode == 2}
    assert filtered == set(DAEMONS), seen
    # apd, two clients, and a delay stage per delayed link: each one ran filtered.
    assert sum(1 for exe, _ in seen.values() if exe == "oppsched-client") == 2, seen
    unfiltered = [(pid, exe) for pid, (exe, mode) in seen.items() if mode != 2]
    assert not unfiltered, seen
    out = tmp_path / "out"
    procs = {p["name"]: p for p in json.loads((out / "processes.json").read_text())}
    for n in ("apd", "client.R1", "client.R2"):
        assert procs[n]["exit_code"] == 0, procs[n]  # nothing its loop needs was refused
        assert "seccomp filter installed" in (out / "logs" / f"{n}.log").read_text()
    s = json.loads((out / "summary.json").read_text())
    assert all(f["bytes_received"] > 0 for f in s["flows"]), s["flows"]
    assert s["truncated_traces"] == [] and not s["errors"]
    # Every trace renamed from its partial name at the clean exit.
    assert not list(out.glob("*.partial"))
    for name in ("slots.csv", "packets.csv", "windows.R1.csv", "mac-ap.pcap",
                 "mac-client.R1.pcap", "client.R1.pcap", "wired.S1.pcap"):
        assert (out / name).stat().st_size > 0, name


CRASH = small_testbed("crash", 8, extra="""
    traces: {packets: true}
    capture: {mac: true}
    watchdog: {stats_period_s: 0.5}
    faults:
      signals: [{process: apd, signal: KILL, at_s: 4.0}]
""")


def test_a_sigkilled_apd_leaves_stats_and_traces_up_to_its_last_flush_and_the_summary_names_it(
        tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, CRASH)
    with netns_prefix(), pytest.raises(Exception, match="apd exited with -9"):
        run_experiment(exp, tmp_path / "out")
    failed = failed_dir(tmp_path / "out")
    s = json.loads((failed / "summary.json").read_text())
    assert any("apd exited with -9 (killed by SIGKILL)" in e for e in s["errors"]), s["errors"]
    truncated = {t["file"]: t for t in s["truncated_traces"]}
    assert {"slots.csv", "packets.csv", "mac-ap.pcap"} <= set(truncated), truncated
    assert not list(failed.glob("*.partial"))
    stats = json.loads((failed / "apd.stats.json").read_text())
    # Its last stats write came after the traces were synced: every row it counted is on
    # the disk, and the stats are recent (written every 0.5 s, killed at 4 s).
    assert stats["uptime_s"] > 2.0
    slots = pd.read_csv(failed / "slots.csv")
    assert len(slots) >= stats["traces"]["slots_rows"] > 100
    assert truncated["slots.csv"]["rows"] == len(slots)
    packets = pd.read_csv(failed / "packets.csv")
    assert len(packets) >= stats["traces"]["packets_rows"] > 0
    # The writers hand the kernel whole rows, but a SIGKILL can land inside one write(2) of a
    # 64 kB buffer (a regular-file write stops between pages on a fatal signal): then the
    # file ends mid-row. The runner cuts that row off and names it in the errors, never
    # silently; what it keeps ends with a whole row.
    for name, t in truncated.items():
        if t["cut_bytes"]:
            assert any(e.startswith(f"{name}: its writer died mid-line") and
                       f"({t['cut_bytes']} bytes)" in e for e in s["errors"]), (name, s["errors"])
        if name.endswith(".csv"):
            assert (failed / name).read_bytes().endswith(b"\n"), name


HUNG_CLIENT = small_testbed("hung_client", 8, flows=("", ""), extra="""
    capture: {mac: true}
    watchdog: {client_slots: 300}
    faults:
      signals: [{process: client.R2, signal: STOP, at_s: 2.0}]
""")


def test_a_stopped_client_fires_the_client_watchdog_and_the_run_fails_naming_it(tmp_path):
    require_real_testbed()
    exp = write_experiment(tmp_path, HUNG_CLIENT)
    with netns_prefix():
        r = run_cli("run", exp, "--out", tmp_path / "out", timeout=300)
    assert r.returncode == 1, r.stderr[-3000:]
    assert "client watchdog" in r.stderr and "R2" in r.stderr
    assert not (tmp_path / "out").exists()
    failed = failed_dir(tmp_path / "out")
    s = json.loads((failed / "summary.json").read_text())
    assert s["watchdog"]["client_fired"] == 1 and s["watchdog"]["client"] == "R2", s["watchdog"]
    assert s["watchdog"]["phy_fired"] == 0  # the PHY went on: the client alone was hung
    assert s["watchdog"]["client_silent_slots"] >= 300
    assert any("watchdog: client R2" in e for e in s["errors"]), s["errors"]
    procs = {p["name"]: p for p in json.loads((failed / "processes.json").read_text())}
    assert procs["apd"]["exit_code"] == 5
    # Traces kept: the apd's whole (it exited by itself), the stopped client's as of its
    # last flush (it was killed at teardown).
    assert (failed / "slots.csv").stat().st_size > 0
    assert "mac-client.R2.pcap" in {t["file"] for t in s["truncated_traces"]}
    assert not list(failed.glob("*.partial"))


# ----------------------------------------------------------------------------------------
# The pieces on their own (no root, no run)

def test_a_partial_trace_is_renamed_and_a_cut_last_line_is_removed_and_named(tmp_path):
    from oppsched.experiments.testbed.traces import recover_all, truncation_errors
    (tmp_path / "slots.csv.partial").write_bytes(b"slot,user\n1,0\n2,1\n3,")
    (tmp_path / "packets.csv.partial").write_bytes(b"t_ns,event\n5,enqueue\n")
    entries = {e["file"]: e for e in recover_all(tmp_path)}
    assert entries["slots.csv"] == {"file": "slots.csv", "from": "slots.csv.partial",
                                    "bytes": 18, "cut_bytes": 2, "rows": 2}
    assert entries["packets.csv"]["cut_bytes"] == 0 and entries["packets.csv"]["rows"] == 1
    assert (tmp_path / "slots.csv").read_bytes() == b"slot,user\n1,0\n2,1\n"
    assert not list(tmp_path.glob("*.partial"))
    (err,) = truncation_errors(list(entries.values()))
    assert err.startswith("slots.csv: its writer died mid-line") and "2 bytes" in err


def test_a_partial_pcap_is_cut_at_its_last_whole_record(tmp_path):
    import struct
    from oppsched.experiments.testbed.traces import recover
    head = struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, 147)
    rec = struct.pack("<IIII", 1, 2, 3, 3) + b"abc"
    (tmp_path / "m.pcap.partial").write_bytes(head + rec + rec[:10])
    e = recover(tmp_path / "m.pcap.partial", tmp_path / "m.pcap")
    assert e["cut_bytes"] == 10 and e["bytes"] == 24 + 19
    assert (tmp_path / "m.pcap").read_bytes() == head + rec


def test_a_daemon_killed_by_its_seccomp_filter_is_named_as_such():
    from oppsched.experiments.testbed.reliability import exit_meaning
    assert "seccomp allow-list" in exit_meaning("client.R1", -31)
    assert "seccomp allow-list" in exit_meaning("apd", 128 + 31)
    assert exit_meaning("apd", -9) == " (killed by SIGKILL)"
    assert "client watchdog" in exit_meaning("apd", 5)
    assert exit_meaning("client.R1", 0) == ""
