"""A full disk is never a silent hole (docs/testbed.md, "Reliability"): every trace a write
to which failed is named in summary.json's errors with what it lost, the files keep what
was written before (whole rows and records only), and the run still ends with a summary.
The daemons' writers are pinned by host/daemon/tests (test_common_io.cc, test_mac_capture.cc);
here the runner's side, and a real run on a small tmpfs that fills up."""

from __future__ import annotations

import json
import os
import resource
import signal
import struct
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest

from helpers import netns_prefix, require_real_testbed, small_testbed, write_experiment
from oppsched.experiments.testbed.readers import read_json
from oppsched.experiments.testbed.traces import capture_errors, pcap_records, write_errors

PCAP_HEAD = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 101)


def _pcap(path: Path, records: int, cut: int = 0) -> None:
    with open(path, "wb") as f:
        f.write(PCAP_HEAD)
        for k in range(records):
            f.write(struct.pack("<IIII", k, 0, 20, 20) + bytes(20))
        f.write(bytes(cut))


def test_each_daemon_trace_with_a_failed_write_is_named_with_its_counts(tmp_path):
    (tmp_path / "apd.stats.json").write_text(json.dumps({"traces": {
        "slots_rows": 900, "slots_errors": 2, "slots_rows_lost": 120,
        "packets_rows": 10, "packets_errors": 0, "packets_rows_lost": 0,
        "mac_pcap_errors": 1, "mac_pcap_lost": 7, "sync_errors": 3}}))
    (tmp_path / "apd.killed.stats.json").write_text(json.dumps({"traces": {
        "packets_errors": 1, "packets_rows_lost": 4}}))
    (tmp_path / "client.R1.stats.json").write_text(json.dumps({"traces": {
        "windows_errors": 1, "windows_rows_lost": 5, "events_errors": 0, "write_errors": 1}}))
    (tmp_path / "wrc.f2.recv.stats.json").write_text(json.dumps({"traces": {
        "epochs_errors": 4, "epochs_rows_lost": 9}}))
    (tmp_path / "run.json").write_text(json.dumps({"trace_write_errors": [
        {"file": "flow.f1.socket.csv", "errors": 2, "rows_lost": 2,
         "error": "[Errno 28] No space left on device"}]}))
    errs = write_errors(tmp_path, read_json)
    text = "\n".join(errs)
    assert ("slots.csv: 2 write(s) failed (a full or failing disk), 120 row(s) lost: the "
            "trace lacks them (apd.stats.json traces.slots_errors)") in errs
    assert "mac-ap.pcap: 1 write(s) failed (a full or failing disk), 7 record(s) lost" in text
    assert "apd.stats.json: 3 disk sync(s) of apd's traces or of its stats failed" in text
    assert "packets.killed.csv: 1 write(s) failed" in text and "4 row(s) lost" in text
    assert "windows.R1.csv: 1 write(s) failed (a full or failing disk), 5 row(s) lost" in text
    assert "wrc.f2.epochs.csv: 4 write(s) failed (a full or failing disk), 9 row(s) lost" in text
    assert "flow.f1.socket.csv: 2 write(s) failed, 2 row(s) lost" in text
    # A trace without failed writes is not named: the whole list is exactly these.
    assert len(errs) == 7, errs
    assert "packets.csv:" not in text.replace("packets.killed.csv", "")


def test_a_tcpdump_capture_that_lacks_packets_tcpdump_captured_is_an_error(tmp_path):
    (tmp_path / "logs").mkdir()
    # tcpdump ignores a failed write and exits 0: only its own count says what is missing.
    (tmp_path / "logs" / "tcpdump.wired.S1.log").write_text(
        "tcpdump: listening on eth0, link-type EN10MB (Ethernet)\n"
        "500 packets captured\n500 packets received by filter\n0 packets dropped by kernel\n")
    _pcap(tmp_path / "wired.S1.pcap", 312, cut=9)
    (tmp_path / "logs" / "tcpdump.client.R1.log").write_text("40 packets captured\n")
    _pcap(tmp_path / "client.R1.pcap", 40)
    assert pcap_records(tmp_path / "wired.S1.pcap") == (312, 9)
    assert capture_errors(tmp_path) == [
        "wired.S1.pcap: tcpdump captured 500 packets, the file holds 312 and a cut last record "
        "(9 bytes): 188 packet(s) lost, a write failed (a full or failing disk; "
        "logs/tcpdump.wired.S1.log)"]


@contextmanager
def _file_size_limit(nbytes: int):
    """A full disk without a filesystem of its own: writes past nbytes fail (EFBIG)."""
    old = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, old[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, old)
        signal.signal(signal.SIGXFSZ, handler)


def test_the_socket_trace_counts_rows_a_full_disk_lost_and_keeps_the_rest_whole(tmp_path):
    from oppsched.experiments.testbed.sampling import SocketSampler
    from oppsched.testbed.flows import SOCKET_COLUMNS

    class Plan:
        id, port, repeat, transport = "f1", 5201, None, "tcp"
        server_index = device_index = 0
        sender_in_client = False

    class Node:
        class ns:
            name = "r0"

    class Tb:
        servers = clients = [Node]

    s = SocketSampler(Tb, [Plan], tmp_path, 0.0)
    row = {"local_port": 5201, "peer_port": 40000, "bytes_received": 1448, "bytes_sent": 0}
    s._write("0.500", [row], {5201: Plan}, "poll")
    path = tmp_path / "flow.f1.socket.csv"
    size = path.stat().st_size
    with _file_size_limit(size + 10):  # less than a row
        s._write("1.000", [row, row], {5201: Plan}, "poll")
    s._write("1.500", [row], {5201: Plan}, "poll")
    s.close()
    assert s.errors_for_record() == [{"file": "flow.f1.socket.csv", "errors": 2,
                                      "rows_lost": 2, "error": s.write_errors[
                                          "flow.f1.socket.csv"]["error"]}]
    df = pd.read_csv(path)
    assert list(df.columns) == list(SOCKET_COLUMNS)
    assert list(df.t_s) == [0.5, 1.5]  # nothing written before lost, no torn row


def test_the_phy_slot_trace_counts_rows_a_full_disk_lost_and_keeps_the_rest_whole(tmp_path):
    from oppsched.rowtrace import RowTrace
    t = RowTrace(tmp_path / "phy_slots.csv", ["slot", "user"], buffer_bytes=1 << 20)
    t.row([0, 1])
    assert t.flush()
    with _file_size_limit(t.size + 2):  # part of a row fits, not two rows
        t.row([1, 0])
        t.row([2, 1])
        assert not t.flush()
    t.row([3, 0])
    t.close()
    assert t.counts("slots") == {"slots_rows": 4, "slots_errors": 1, "slots_rows_lost": 2}
    assert (tmp_path / "phy_slots.csv").read_text() == "slot,user\n0,1\n3,0\n"
    # The PHY's stats name it: the summary then does (phy.stats.json traces.slots_errors).
    (tmp_path / "phy.stats.json").write_text(json.dumps({"traces": t.counts("slots")}))
    assert write_errors(tmp_path, read_json)[0].startswith(
        "phy_slots.csv: 1 write(s) failed (a full or failing disk), 2 row(s) lost")


def test_a_transfer_program_that_lost_rows_says_so_and_the_summary_names_its_csv(
        tmp_path, capsys):
    from oppsched.testbed.transfers import CLIENT_COLUMNS, EXIT_ROWS_LOST, _Records
    rec = _Records(tmp_path / "transfers.f1.csv", CLIENT_COLUMNS)
    rec.add({"transfer": 0, "bytes": 100})
    with _file_size_limit(rec.t.size + 3):
        rec.add({"transfer": 1, "bytes": 100})
    rec.add({"transfer": 2, "bytes": 100})
    rec.close()
    assert rec.lost
    line = capsys.readouterr().err.strip()
    assert line == ("trace write errors: transfers.f1.csv: 1 write(s) failed, 1 row(s) lost "
                    "(a full or failing disk)")
    assert list(pd.read_csv(tmp_path / "transfers.f1.csv").transfer) == [0, 2]
    # The runner's records: the client exited with EXIT_ROWS_LOST, its log has the counts.
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "xfer-fetch.f1.log").write_text(line + "\n")
    (tmp_path / "run.json").write_text(json.dumps({"flows": [{"id": "f1", "repeat": {}}]}))
    (tmp_path / "processes.json").write_text(json.dumps([
        {"name": "xfer-fetch.f1", "exit_code": EXIT_ROWS_LOST},
        {"name": "xfer-serve.f1", "exit_code": 0}]))
    assert write_errors(tmp_path, read_json) == [
        "transfers.f1.csv: 1 write(s) failed, 1 row(s) lost (a full or failing disk; "
        "xfer-fetch.f1 exited with 3, logs/xfer-fetch.f1.log)"]


# ----------------------------------------------------------------------------------------
# A real run on a small tmpfs that fills up

FULL = small_testbed("full", 8, extra="""
    traces: {packets: true}
""")


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs of its own for the run (RESERVE_BYTES, the room the runner keeps for its end,
    and a few MiB)."""
    from oppsched.experiments.testbed.runfolder import RESERVE_BYTES
    mnt = tmp_path / "fs"
    mnt.mkdir()
    size = RESERVE_BYTES + (4 << 20)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(mnt)],
                   check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _running(mnt: Path) -> bool:
    for p in mnt.rglob("run.json"):
        try:
            if json.loads(p.read_text()).get("status") == "running":
                return True
        except (OSError, ValueError):
            pass
    return False


def _fill_once_running(mnt: Path, stop: threading.Event) -> None:
    """Once the flows run (run.json says so: the daemons and captures are up, the runner
    holds its reserve), fills what is left of the file system: from then on every write
    of the run fails, however fast its flows go."""
    while not stop.is_set():
        if _running(mnt):
            break
        time.sleep(0.05)
    else:
        return
    with open(mnt / "filler", "wb", buffering=0) as f:
        for chunk in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    f.write(bytes(chunk))
            except OSError:
                pass


def test_a_run_whose_disk_fills_up_ends_with_a_summary_naming_each_trace_that_lost_rows(
        tmp_path, small_tmpfs):
    require_real_testbed()
    from oppsched.run.runner import RunFailed, failed_dir, run_experiment
    exp = write_experiment(tmp_path, FULL)
    out = small_tmpfs / "out"
    stop = threading.Event()
    filler = threading.Thread(target=_fill_once_running, args=(small_tmpfs, stop), daemon=True)
    filler.start()
    try:
        with netns_prefix(), pytest.raises(RunFailed):
            run_experiment(exp, out)
    finally:
        stop.set()
        filler.join()
    assert (small_tmpfs / "filler").exists()  # the disk was full while the run went on
    run = failed_dir(out)
    s = json.loads((run / "summary.json").read_text())  # the run still ends with a summary
    errs = s["errors"]
    # Each trace that lost rows is named, with its count and where it comes from.
    apd = json.loads((run / "apd.stats.json").read_text())["traces"]
    lost_traces = [n for n in ("slots", "packets") if apd[f"{n}_errors"]]
    assert lost_traces, apd  # the disk filled while the apd wrote
    for n in lost_traces:
        msg = next((e for e in errs if e.startswith(f"{n}.csv: ")), None)
        assert msg is not None, errs
        assert f"{apd[n + '_errors']} write(s) failed" in msg
        assert f"{apd[n + '_rows_lost']} row(s) lost" in msg
        # What was written before is kept, whole: the file holds every row not counted lost,
        # and pandas reads it (no torn line).
        df = pd.read_csv(run / f"{n}.csv")
        assert len(df) == apd[f"{n}_rows"] - apd[f"{n}_rows_lost"], (n, apd)
    # tcpdump lost packets silently: the summary names its capture.
    assert any(".pcap: tcpdump captured" in e and "packet(s) lost" in e for e in errs), errs
    assert not list(run.glob("*.partial"))  # every trace finished under its own name
    assert not (run / ".space-reserve").exists()
