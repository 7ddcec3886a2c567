"""One time-aligned table of everything a testbed run recorded (docs/timeline.md).

`timeline(rundir)` reads a run folder's traces (the apd's slots.csv and packets.csv, the
clients' CLAMP windows and events, the PHY's slot trace and the receivers' rx reports, the
senders' tcp_info samples from iperf3, the receiving sockets' counts, the repeated
transfers, and the counters of every stats file) and returns one tidy table, one row per
(time, layer, entity, metric): `t_s` (seconds after the run's t0 on CLOCK_MONOTONIC, the
clock every daemon and the PHY stamp their traces with), `layer`, `entity`, `metric`,
`value`, `id`, `detail`, `source`. `write_timeline(rundir)` writes it as
`timeline.csv.gz`, which `pandas.read_csv` reads in one call; `oppsched run` writes it at
the end of every testbed run and `oppsched timeline DIR` for runs made before.

Clocks: the daemons' and the PHY's `t_ns` are CLOCK_MONOTONIC nanoseconds, made relative
with run.json's `t0_mono_ns`; the runner's socket samples and the transfers are already in
seconds after t0; iperf3's intervals are seconds after its own start, which run.json
records per flow (`started_at_s`, as oppsched tcpview reads them); an rx report names its
slot, whose start the apd's slot trace gives; counters at exit are put at the last slot.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched.config import ConfigError

FILENAME = "timeline.csv.gz"
COLUMNS = ["t_s", "layer", "entity", "metric", "value", "id", "detail", "source"]

# slots.csv's per-user columns (`<column>.<device>`): metric name and layer
_PER_USER = {"cqi": ("cqi", "mac"), "queue": ("queue_bytes", "mac"),
             "price": ("clamp_price_s", "clamp"), "aqm_price": ("aqm_price", "mac")}
_WINDOW_METRICS = {"price_s": "clamp_price_s", "w_bytes": "clamp_window_bytes",
                   "awnd_os_bytes": "os_window_bytes", "advertised_bytes": "advertised_window_bytes"}


class TimelineError(ConfigError):
    """A folder that is not a testbed run folder, or a trace that cannot be read (named)."""


def _frame(t_s, layer, entity, metric, value, id_=None, detail=None, source="") -> pd.DataFrame:
    n = len(t_s)
    return pd.DataFrame({
        "t_s": np.asarray(t_s, dtype=float),
        "layer": layer,
        "entity": entity if not isinstance(entity, str) else [entity] * n,
        "metric": metric if not isinstance(metric, str) else [metric] * n,
        "value": np.asarray(value, dtype=float),
        "id": pd.array(id_ if id_ is not None else [pd.NA] * n, dtype="Int64"),
        "detail": detail if detail is not None else [""] * n,
        "source": source,
    })


def _read_csv(path: Path, **kw) -> pd.DataFrame:
    try:
        return pd.read_csv(path, **kw)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise TimelineError(f"{path.name}: unreadable ({exc})") from None


def _changes(v: pd.Series) -> pd.Series:
    """The rows where v differs from the row before (the first one included): a value
    holds until the next row of its metric."""
    return v.ne(v.shift()) & v.notna()


def _slots(rundir: Path, t0: int, users: list[str], out: list) -> dict[int, float]:
    path = rundir / "slots.csv"
    if not path.exists():
        return {}
    s = _read_csv(path)
    if s.empty:
        return {}
    src = path.name
    s = s.sort_values("slot", kind="stable")
    t = (s["t_ns"].to_numpy(dtype=np.int64) - t0) / 1e9
    s = s.assign(_t=t)
    busy = s[s["user"] >= 0]
    names = np.array(users + ["?"])
    ent = names[np.where(busy["user"].to_numpy() < len(users), busy["user"].to_numpy(), -1)]
    outc = busy["outcome"].fillna("").astype(str).to_list()
    for col, metric in (("tb_bytes", "tb_bytes"), ("mcs", "mcs"), ("retx", "harq_retx")):
        out.append(_frame(busy["_t"], "mac", ent, metric, busy[col], busy["slot"], outc, src))
    empty = s[s["user"] < 0]
    out.append(_frame(empty["_t"], "mac", "", "empty_slot", np.ones(len(empty)), empty["slot"],
                      None, src))
    late = s[s["late"].fillna(0).astype(int) != 0]
    out.append(_frame(late["_t"], "mac", "", "late_slot", np.ones(len(late)), late["slot"],
                      None, src))
    for col in s.columns:
        base, dot, dev = col.partition(".")
        if not dot or base not in _PER_USER:
            continue
        metric, layer = _PER_USER[base]
        v = pd.to_numeric(s[col], errors="coerce")
        keep = _changes(v)
        out.append(_frame(s["_t"][keep], layer, dev, metric, v[keep], s["slot"][keep], None, src))
    return dict(zip(s["slot"].to_numpy().tolist(), t.tolist()))


def _packets(rundir: Path, t0: int, users: list[str], out: list) -> None:
    path = rundir / "packets.csv"
    if not path.exists():
        return
    p = _read_csv(path)
    if p.empty:
        return
    names = np.array(users + [""])
    u = p["user"].to_numpy()
    ent = names[np.where((u >= 0) & (u < len(users)), u, -1)]
    out.append(_frame((p["t_ns"].to_numpy(dtype=np.int64) - t0) / 1e9, "mac", ent,
                      ("packet_" + p["event"].astype(str) + "_bytes").to_list(), p["bytes"],
                      p["packet_id"], p["reason"].fillna("").astype(str).to_list(), path.name))


def _flow_of_port(run: dict) -> dict[int, str]:
    return {int(f["port"]): f["id"] for f in run.get("flows", []) if f.get("port")}


def _windows(rundir: Path, t0: int, users: list[str], run: dict, out: list) -> None:
    ports = _flow_of_port(run)

    def flow_id(tuple_: str) -> str:
        for end in tuple_.split(">"):
            port = end.rpartition(":")[2]
            if port.isdigit() and int(port) in ports:
                return ports[int(port)]
        return tuple_

    for dev in users:
        path = rundir / f"windows.{dev}.csv"
        if path.exists():
            w = _read_csv(path)
            if w.empty:
                continue
            t = (w["t_ns"].to_numpy(dtype=np.int64) - t0) / 1e9
            tuples = w["flow"].astype(str)
            ent = tuples.map(flow_id).to_list()
            for col, metric in _WINDOW_METRICS.items():
                if col in w:
                    out.append(_frame(t, "clamp", ent, metric, w[col], None, tuples.to_list(),
                                      path.name))
        path = rundir / f"client.{dev}.events.csv"
        if path.exists():
            e = _read_csv(path)
            if e.empty:
                continue
            out.append(_frame((e["t_ns"].to_numpy(dtype=np.int64) - t0) / 1e9, "clamp", dev,
                              ("clamp_" + e["event"].astype(str)).to_list(), np.ones(len(e)),
                              None, e["detail"].fillna("").astype(str).to_list(), path.name))


def _phy(rundir: Path, t0: int, users: list[str], slot_t: dict, out: list) -> None:
    path = rundir / "phy_slots.csv"
    if path.exists():
        s = _read_csv(path)
        if not s.empty:
            t = pd.Series((s["t_ns"].to_numpy(dtype=np.int64) - t0) / 1e9, index=s.index)
            for dev in users:
                col = f"snr_db.{dev}"
                if col in s:
                    out.append(_frame(t, "phy", dev, "snr_db", s[col], s.get("slot"), None,
                                      path.name))
            if "user" in s and "success" in s:
                busy = s[s["user"] >= 0]
                names = np.array(users + ["?"])
                u = busy["user"].to_numpy()
                ent = names[np.where(u < len(users), u, -1)]
                out.append(_frame(t[busy.index], "phy", ent, "tb_decoded", busy["success"],
                                  busy.get("slot"), None, path.name))
                if "eff_snr_db" in busy:
                    out.append(_frame(t[busy.index], "phy", ent, "effective_snr_db",
                                      busy["eff_snr_db"], busy.get("slot"), None, path.name))
    for dev in users:
        path = rundir / "iq" / f"{dev}.rx.csv"
        if not path.exists() or not slot_t:
            continue
        r = _read_csv(path)
        if r.empty:
            continue
        t = r["slot"].map(slot_t)
        r = r[t.notna()]
        t = t[t.notna()]
        src = f"iq/{path.name}"
        for col, metric in (("snr_db", "rx_snr_db"), ("cqi", "rx_cqi")):
            if col in r:
                out.append(_frame(t, "phy", dev, metric, r[col], r["slot"], None, src))
        if "addressed" in r and "crc_ok" in r:
            a = r[r["addressed"].astype(str).isin(["1", "True", "true"])]
            ok = a["crc_ok"].astype(str).isin(["1", "True", "true"]).astype(float)
            out.append(_frame(t[a.index], "phy", dev, "rx_crc_ok", ok, a["slot"], None, src))


def _tcp(rundir: Path, run: dict, out: list) -> None:
    from oppsched.analysis.tcp import TcpViewError, cwnd_trace

    for f in run.get("flows", []):
        fid = f["id"]
        if (rundir / f"flow.{fid}.sender.json").exists() and f.get("port"):
            try:
                cw = cwnd_trace(rundir, fid)
            except TcpViewError:
                cw = pd.DataFrame()
            for col in ("cwnd_bytes", "rtt_ms", "rttvar_ms", "retransmits"):
                if len(cw):
                    out.append(_frame(cw["t_s"], "tcp", fid, col, cw[col], None, None,
                                      f"flow.{fid}.sender.json"))
        path = rundir / f"flow.{fid}.socket.csv"
        if path.exists():
            sk = _read_csv(path)
            if not sk.empty:
                data = sk[(sk["event"] == "poll") & (sk["bytes_sent"] == 0)]
                total = data.groupby("t_s")["bytes_received"].sum()
                out.append(_frame(total.index, "tcp", fid, "received_bytes", total.to_numpy(),
                                  None, None, path.name))
        path = rundir / f"transfers.{fid}.csv"
        if path.exists():
            tr = _read_csv(path)
            if not tr.empty and {"end_s", "duration_s", "transfer"} <= set(tr):
                tr = tr[tr["end_s"].notna()]
                out.append(_frame(tr["end_s"], "tcp", fid, "transfer_duration_s",
                                  tr["duration_s"], tr["transfer"],
                                  tr.get("error", pd.Series([""] * len(tr))).fillna("")
                                  .astype(str).to_list(), path.name))


def _flatten(d, prefix: str, users: set[str], out_rows: list, entity: str = "") -> None:
    if isinstance(d, dict):
        for k, v in d.items():
            if k in users and not entity:
                _flatten(v, prefix, users, out_rows, k)
            else:
                _flatten(v, f"{prefix}.{k}" if prefix else str(k), users, out_rows, entity)
    elif isinstance(d, list):
        for i, v in enumerate(d):
            name = v.get("name") if isinstance(v, dict) else None
            if name in users and not entity:
                _flatten({k: x for k, x in v.items() if k not in ("name", "id")}, prefix,
                         users, out_rows, name)
            else:
                _flatten(v, f"{prefix}.{i}", users, out_rows, entity)
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        out_rows.append((entity, prefix, float(d)))


def _counters(rundir: Path, users: list[str], t_end: float, out: list) -> None:
    files = [("apd.stats.json", "mac"), ("phy.stats.json", "phy")] + \
        [(f"client.{d}.stats.json", "mac") for d in users]
    for name, layer in files:
        path = rundir / name
        if not path.exists():
            continue
        try:
            d = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise TimelineError(f"{name}: unreadable ({exc})") from None
        rows: list = []
        stem = name.removesuffix(".stats.json")
        _flatten(d, "", set(users), rows)
        if not rows:
            continue
        ent = [e or (stem.split(".", 1)[1] if stem.startswith("client.") else "") for e, _, _ in rows]
        out.append(_frame([t_end] * len(rows), layer, ent,
                          [f"counter.{stem.split('.')[0]}.{m}" for _, m, _ in rows],
                          [v for _, _, v in rows], None, ["at exit"] * len(rows), name))


def timeline(rundir) -> pd.DataFrame:
    """The run's traces on one clock, as one tidy table (module docstring; docs/timeline.md)."""
    rundir = Path(rundir)
    try:
        cfg = json.loads((rundir / "config.json").read_text())
        run = json.loads((rundir / "run.json").read_text())
    except FileNotFoundError as exc:
        raise TimelineError(f"{rundir}: not a run folder (no {Path(exc.filename).name})") \
            from None
    except json.JSONDecodeError as exc:
        raise TimelineError(f"{rundir}: config.json or run.json unreadable ({exc})") from None
    if cfg.get("kind") != "testbed":
        raise TimelineError(f"{rundir}: kind {cfg.get('kind')!r}: a timeline is made of a "
                            "testbed run's traces (kind: testbed)")
    t0 = run.get("t0_mono_ns")
    if t0 is None:
        raise TimelineError(f"{rundir}/run.json: t0_mono_ns is null (the run never started "
                            "its flows): nothing to align")
    t0 = int(t0)
    users = [d["name"] for d in cfg.get("devices", [])]
    out: list[pd.DataFrame] = []
    slot_t = _slots(rundir, t0, users, out)
    _packets(rundir, t0, users, out)
    _windows(rundir, t0, users, run, out)
    _phy(rundir, t0, users, slot_t, out)
    _tcp(rundir, run, out)
    t_end = max(slot_t.values()) if slot_t else float(cfg.get("duration_s", 0.0))
    _counters(rundir, users, t_end, out)
    out = [f for f in out if len(f)]
    if not out:
        return _frame([], "", "", "", []).astype({"layer": str, "entity": str,
                                                  "metric": str, "detail": str})
    df = pd.concat(out, ignore_index=True)
    return df.sort_values("t_s", kind="stable", ignore_index=True)[COLUMNS]


def write_timeline(rundir) -> Path:
    """Writes RUN/timeline.csv.gz (atomically: a reader sees the whole table or none)."""
    rundir = Path(rundir)
    df = timeline(rundir)
    path = rundir / FILENAME
    tmp = rundir / f".{FILENAME}.tmp"
    # level 1: a third of the time of level 6 for a few per cent more bytes; mtime 0: the
    # same traces give the same bytes
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1,
                                               mtime=0) as gz:
        df.to_csv(gz, index=False, float_format="%.9g")
    os.replace(tmp, path)
    return path


def run_folders(path) -> list[Path]:
    """The testbed run folders at PATH: PATH itself, its variants one level down, or every
    run of a sweep (any depth)."""
    path = Path(path)
    if (path / "config.json").exists() and (path / "run.json").exists():
        return [path]
    return sorted(p.parent for p in path.rglob("run.json") if (p.parent / "config.json").exists())


def _cmd(a) -> int:
    folders = run_folders(a.results)
    if not folders:
        raise TimelineError(f"{a.results}: no run folder here (config.json and run.json) or "
                            "below")
    for rd in folders:
        path = write_timeline(rd)
        print(f"oppsched timeline: {path}")
    return 0
