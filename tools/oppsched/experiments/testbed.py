"""`kind: testbed` -- end to end: real Linux TCP, iperf3 and tcpdump through the MAC daemons
and a PHY, in network namespaces.

One run (docs/daemons.md, docs/wired.md):

    S_i netns  --wired path d_i/2 each way-->  AP netns: TUN radio0 <-> oppsched-apd
    (iperf3 sender, tcpdump eth0)                          | SlotGrant / SlotRequest (ZeroMQ)
                                                        PHY (abstract: slot-level channel)
                                                           | RxIndication per client
    R_j netns: TUN radio0 <-> oppsched-client  <-----------+
    (iperf3 receiver, tcpdump radio0)          uplink (ACKs, CQI, HARQ feedback) -> apd

`run()` builds that with oppsched.netns.Testbed (client_links="tun": persistent TUNs the
daemons attach to by name), writes apd.yaml / client.<dev>.yaml / phy.yaml
(oppsched.daemonconf), starts apd, clients and PHY and waits until packets cross the
radio (pings from every server to every client: proof that slots are granted and decoded),
starts the captures and the iperf3 flows at their times, and at the end stops everything in
order (flows, PHY, daemons with SIGTERM so they flush their traces, captures). Teardown of
every namespace, TUN and process is guaranteed by the Testbed/Session, also on failure or
Ctrl-C.

`analyze()` recomputes summary.json from the files of the run folder alone; `plot()` and
`compare_plots()` draw from them.

What a run folder holds: see docs/testbed.md.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from oppsched import daemonconf
from oppsched.config import ConfigError, Field, ListOf
from oppsched.daemonconf import PROFILES
from oppsched.flows import BASE_PORT, FlowPlan, iperf_seconds
from oppsched.metrics import jain_index
from oppsched.phy.radio import RADIO_AP, RADIO_CLIENT, check_radio_args, whole_hz

REPO = Path(__file__).resolve().parents[3]
TOOLS = REPO / "tools"
BUILD_ENV = "OPPSCHED_BUILD"
PHY_MODES = ("abstract", "sample", "uhd")
AQM_KINDS = ("droptail", "red", "rem", "reaqm", "avq", "codel", "pie", "spmaf", "las", "tlas")
MARKING_AQMS = ("red", "rem", "reaqm", "avq", "codel", "pie")  # aqm.h: these mark ECT packets
SCHEDULERS = ("pf", "glambda", "rr", "maxrate", "wpf")
MCS_TABLES = ("clamp", "evdo", "ofdm_provisional")  # the abstract PHY's presets
ERROR_MODELS = ("clamp", "threshold", "curves")
_NONE = type(None)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,23}")


def _name(s: str):
    return None if _NAME_RE.fullmatch(s) else "is not a plain name (1..24 of letters, digits, _ -)"


def _ecn(v):
    return None if v in ("auto", 0, 1, 2) else "is not auto, 0, 1 or 2"


def _mcs_table(v):
    if v is None or v in MCS_TABLES or str(v).endswith(".csv"):
        return None
    return f"is not {', '.join(MCS_TABLES)} or a path to a .csv table"


_TCP_OVERRIDES = {
    "sack": Field((bool, _NONE), None, doc="null: as tcp.sack"),
    "ecn": Field((int, _NONE), None, min=0, max=2, doc="null: as tcp.ecn"),
    "timestamps": Field((bool, _NONE), None),
    "window_scaling": Field((bool, _NONE), None),
}

SCHEMA = {
    "build_dir": Field(str, "", doc="build folder with host/daemon/oppsched-apd etc.; "
                       "'' = $OPPSCHED_BUILD, else <repo>/build"),
    "phy": {
        "mode": Field(str, "abstract", choices=PHY_MODES,
                      doc="abstract: slot-level PHY; sample: GNU Radio loopback; uhd: radios"),
        "profile": Field(str, "clamp", choices=tuple(PROFILES),
                         doc="clamp (seed 000: 3 ms slots, eq. 18 rates and errors) or evdo "
                             "(seed 002: 1.667 ms slots, EV-DO table)"),
        "fec": Field(str, "ldpc", choices=("ldpc", "conv"),
                     doc="payload FEC of modes sample/uhd: ldpc (802.11n QC-LDPC) or conv "
                         "(K=7 convolutional); picks the measured MCS table too"),
        "slot_s": Field((float, _NONE), None, min=1e-4, max=0.1, doc="null: the profile's"),
        "lead_slots": Field(int, 4, min=1, max=1000,
                            doc="SlotRequest n is sent this many slots before slot n"),
        "error_model": Field((str, _NONE), None, choices=(None,) + ERROR_MODELS,
                             doc="clamp: seed 000's end-of-slot rule (eq. 18); threshold: the "
                                 "MCS threshold at slot end; curves: BLER from link curves; "
                                 "null: the profile's"),
        "mcs_table": Field((str, _NONE), None, check=_mcs_table,
                           doc="clamp | evdo | ofdm_provisional | path to a CSV table "
                               "(name,min_snr_db,rate_bps); null: the profile's"),
        "link_curves": Field(str, "", doc="CSV mcs,snr_db,bler (error_model curves)"),
        "clamp_table": {
            "w0_hz": Field(float, 4.3e6, min=1.0, max=1e12, doc="W0 of eq. 18 (§V-D: 4.3 MHz)"),
            "cmax_bps": Field(float, 10e6, min=1.0, max=1e12, doc="C_max of eq. 18 (10 Mb/s)"),
            "levels": Field(int, 32, min=1, max=255, doc="eq. 18 rates quantised to this "
                            "many MCS (k C_max / levels)"),
        },
        "chase_combining": Field(bool, True, doc="HARQ retransmissions add their SNRs"),
        "slot_trace": Field(bool, False, doc="the PHY writes phy_slots.csv"),
        "uhd": {  # phy.mode uhd (python -m oppsched.phy.uhd): the AP radio; devices[].uhd
            "sample_rate": Field(float, 1e6, min=1e5, max=61.44e6, check=whole_hz,
                                 doc="every radio's complex sample rate"),
            "ap": RADIO_AP,
        },
    },
    "devices": ListOf({
        "name": Field(str, check=_name),
        "channel": {
            "mean_snr_db": Field(float, 6.020599913279624, min=-30.0, max=60.0,
                                 doc="seed 000: SNR_avg = 4 (6 dB)"),
            "doppler_hz": Field(float, 60.0, min=0.0, max=2000.0,
                                doc="seed 000: 60 Hz (10 m/s) or 0.6 Hz (0.1 m/s)"),
            "model": Field((str, _NONE), None, choices=(None, "clamp", "sum_of_sinusoids", "awgn",
                                                        "trace"),
                           doc="clamp: Jakes G=20 as seed 000 prints it; sum_of_sinusoids: "
                               "seed 002 eq. 4; awgn: constant SNR; trace: replay a CSV "
                               "time_s,snr_db; null: the profile's"),
            "trace": Field(str, "", doc="model trace: CSV time_s,snr_db"),
        },
        "uhd": RADIO_CLIENT,  # phy.mode uhd: this device's receiving radio
        "queue": {"limit_bytes": Field((int, _NONE), None, min=0,
                                       doc="this device's AP queue limit; null: "
                                           "queue.limit_bytes")},
        "tcp": _TCP_OVERRIDES,
    }, min_len=1),
    "servers": ListOf({
        "name": Field(str, check=_name),
        "rtt_ms": Field(float, min=0.0, max=60000.0, doc="d_i: round-trip propagation delay "
                        "of the wired path S_i--X (d_i/2 each way, seed 000 Table I)"),
        "rate_bps": Field(float, 100e6, min=0.0, max=1e12, doc="wired capacity (Table I: "
                          "100 Mb/s); 0 = unlimited"),
        "limit_bytes": Field(int, 0, min=0, doc="wired FIFO in front of rate_bps; 0 = unlimited"),
        "tcp": _TCP_OVERRIDES,
    }, min_len=1),
    "flows": ListOf({
        "id": Field(str, check=_name),
        "server": Field(str, doc="a servers[].name: the sender"),
        "device": Field(str, doc="a devices[].name: the receiver"),
        "family": Field(str, "ipv4", choices=("ipv4", "ipv6")),
        "start_s": Field(float, 0.0, min=0.0, doc="after the radio is up"),
        "stop_s": Field((float, _NONE), None, min=0.0, doc="null: duration_s (iperf3 runs "
                        "whole seconds: round(stop_s - start_s), at least 1)"),
        "bytes": Field((int, _NONE), None, min=1, doc="send this many bytes instead of a "
                       "duration (iperf3 -n); excludes stop_s"),
        "cc": Field((str, _NONE), None, doc="congestion control (iperf3 -C); null: "
                    "tcp.congestion_control"),
        "parallel": Field(int, 1, min=1, max=32, doc="parallel TCP streams (iperf3 -P)"),
    }, min_len=1),
    "queue": {
        "mode": Field(str, "per_user", choices=("per_user", "shared"),
                      doc="one AP queue per device, or one shared FIFO (head-of-line blocking)"),
        "limit_bytes": Field(int, 60000, min=0, doc="seed 000 §V-H: 60 KB TCP buffer; 0 = none"),
        "limit_packets": Field(int, 0, min=0, doc="0 = none"),
    },
    "aqm": {
        "kind": Field(str, "droptail", choices=AQM_KINDS),
        "ecn": Field(bool, True, doc="mark ECN-capable packets instead of dropping them"),
        "params": Field(dict, {}, doc="the kind's parameters (oppsched.mac.make_aqm names)"),
    },
    "clamp": {
        "enabled": Field(bool, False),
        "a_bytes": Field(float, 5500.0, min=0.0, doc="a, eq. 13 (router)"),
        "b": Field(float, 1.0, min=1e-6, max=1.5707963267948966, doc="b, eq. 7; stable iff "
                   "b < pi/2 (Theorem 1)"),
        "ema_rate_per_s": Field(float, 2.0, min=1e-6, doc="q(n) = exp(-2I) ... (§IV-A)"),
        "tau_bytes": Field(float, 500.0, min=1e-6, doc="tau, eq. 14 (client; Table II)"),
        "alpha_packets": Field(int, 1000, min=1, doc="alpha, eq. 15"),
        "beta": Field(float, 0.001, min=1e-9, max=0.999999, doc="beta, eq. 16"),
        "max_increase_bytes": Field(float, 10000.0, min=1.0, doc="Delta w clip (10 kB)"),
        "min_window_bytes": Field(float, 0.0, min=0.0, doc="0 = one MSS (clamp.h)"),
        "slow_start_threshold_bytes": Field(float, 0.0, min=0.0, doc="0 = none (the paper)"),
    },
    "scheduler": {
        "kind": Field(str, "pf", choices=SCHEDULERS),
        "alpha": Field(float, 0.03, min=1e-6, max=1.0, doc="EMA weight per slot (seed 000: 0.03)"),
        "lam": Field(float, 1.0, min=0.0, max=100.0, doc="glambda: lambda"),
        "weights": Field(list, [], doc="wpf: one weight per device"),
    },
    "link_adaptation": {
        "olla": Field(bool, True, doc="outer-loop offset driven by ACK/NACK (the paper's "
                      "adaptive backoff margin m, §V-B)"),
        "target_bler": Field(float, 0.1, min=1e-6, max=0.499, doc="OLLA's per-attempt target"),
    },
    "harq": {
        "max_transmissions": Field((int, _NONE), None, min=1, max=64,
                                   doc="null: seed 000's n (15 fast fading, 5 slow)"),
        "processes": Field(int, 8, min=1, max=16),
        "feedback_timeout_slots": Field(int, 16, min=2, max=10000),
    },
    "tcp": {
        "congestion_control": Field(str, "reno", check=lambda s: None if re.fullmatch(
            r"[a-z0-9_]{1,15}", s) else "is not a congestion control name",
            doc="reno: Linux reno is NewReno (RFC 6582) when SACK is off"),
        "sack": Field(bool, False, doc="off: mirror the paper's NewReno"),
        "ecn": Field((str, int), "auto", check=_ecn,
                     doc="auto: 1 (negotiate) where the AQM marks, else 0"),
        "timestamps": Field(bool, True),
        "window_scaling": Field(bool, True),
        "extra": Field(dict, {}, doc="more sysctls for every namespace"),
    },
    "uplink_delay_ms": Field(float, 1.0, min=0.0, max=10000.0, doc="seed 000 Table I: 1 ms"),
    "cqi": {"period_slots": Field(int, 1, min=1, max=100000)},
    "reassembly": {
        "timeout_ms": Field((float, _NONE), None, min=0.001, max=60000.0,
                            doc="a gap is given up after this; null: as long as HARQ may "
                                "still deliver it (max_transmissions x (lead_slots + 3) "
                                "slots + uplink delay)"),
        "window": Field((int, _NONE), None, min=1, max=1 << 20,
                        doc="PDUs held beyond a gap; null: at least the PDUs of that time"),
        "max_bytes": Field((int, _NONE), None, min=65535, doc="null: the client's default"),
    },
    "capture": {
        "pcaps": Field(bool, True, doc="tcpdump on each server's wired side and each client TUN"),
        "snaplen": Field(int, 128, min=96, max=65535),
        "ap": Field(bool, False, doc="also capture the AP's TUN (ap.pcap)"),
    },
    "traces": {"packets": Field(bool, False, doc="apd writes packets.csv (per-packet events)")},
    "topology": {
        "ipv4": Field(bool, True),
        "ipv6": Field(bool, True),
        "wired": Field(str, "auto", choices=("auto", "netem", "userspace")),
        "mtu": Field(int, 1500, min=576, max=9000),
        "rt_priority": Field(int, 10, min=0, max=99, doc="SCHED_FIFO of the delay stages"),
        "offloads": Field(bool, False),
    },
    "iperf": {"interval_s": Field(float, 0.5, min=0.1, max=60.0, doc="iperf3 -i")},
    "analysis": {"warmup_s": Field(float, 0.0, min=0.0,
                                   doc="goodput_steady_bps leaves out each flow's first seconds")},
    "timeouts": {
        "startup_s": Field(float, 30.0, min=1.0, doc="daemons and radio ready"),
        "grace_s": Field(float, 15.0, min=1.0, doc="after duration_s, for flows to end"),
    },
    "extra": {
        "apd": Field(dict, {}, doc="merged into apd.yaml"),
        "client": Field(dict, {}, doc="merged into every client.<dev>.yaml"),
        "phy": Field(dict, {}, doc="merged into phy.yaml"),
    },
}


class TestbedError(RuntimeError):
    """A run could not be done (missing program, daemon died, ...); the message says why."""

    __test__ = False


# ----------------------------------------------------------------------------------------
# Cross-field checks (runner.load_experiment calls check() on every resolved variant)


def check(cfg: dict) -> None:
    """Impossible combinations, each a ConfigError naming the field and the value."""
    def unique(kind, key):
        seen = {}
        for i, it in enumerate(cfg[kind]):
            if it[key] in seen:
                raise ConfigError(f"{kind}[{i}].{key}: {it[key]!r} repeats {kind}"
                                  f"[{seen[it[key]]}].{key}")
            seen[it[key]] = i
    unique("devices", "name")
    unique("servers", "name")
    unique("flows", "id")
    if len(cfg["devices"]) > 250 or len(cfg["servers"]) > 250:
        raise ConfigError("devices/servers: at most 250 each")
    if not (cfg["topology"]["ipv4"] or cfg["topology"]["ipv6"]):
        raise ConfigError("topology.ipv4/ipv6: both false; at least one family is needed")
    devs = {d["name"] for d in cfg["devices"]}
    srvs = {s["name"] for s in cfg["servers"]}
    dur = cfg["duration_s"]
    for i, f in enumerate(cfg["flows"]):
        p = f"flows[{i}]"
        if f["server"] not in srvs:
            raise ConfigError(f"{p}.server: {f['server']!r} is not a servers[].name "
                              f"({', '.join(sorted(srvs))})")
        if f["device"] not in devs:
            raise ConfigError(f"{p}.device: {f['device']!r} is not a devices[].name "
                              f"({', '.join(sorted(devs))})")
        if f["start_s"] >= dur:
            raise ConfigError(f"{p}.start_s: {f['start_s']!r} is not before duration_s ({dur:g})")
        if f["bytes"] is not None and f["stop_s"] is not None:
            raise ConfigError(f"{p}.stop_s: {f['stop_s']!r} with bytes {f['bytes']}: a flow "
                              "either sends a number of bytes or runs until stop_s, not both")
        if f["stop_s"] is not None:
            if f["stop_s"] <= f["start_s"]:
                raise ConfigError(f"{p}.stop_s: {f['stop_s']!r} is not after start_s "
                                  f"({f['start_s']:g})")
            if f["stop_s"] > dur + 1e-9:
                raise ConfigError(f"{p}.stop_s: {f['stop_s']!r} is after duration_s ({dur:g})")
        fam = f["family"]
        if not cfg["topology"][fam]:
            raise ConfigError(f"{p}.family: {fam!r} but topology.{fam} is false")
        if f["cc"] is not None and not re.fullmatch(r"[a-z0-9_]{1,15}", f["cc"]):
            raise ConfigError(f"{p}.cc: {f['cc']!r} is not a congestion control name")
    q = cfg["queue"]
    if q["limit_bytes"] == 0 and q["limit_packets"] == 0:
        raise ConfigError("queue.limit_bytes/limit_packets: both 0; the AP queue needs a limit "
                          "(the paper's CLAMP runs use 6 MB)")
    if q["mode"] == "shared":
        for i, d in enumerate(cfg["devices"]):
            if d["queue"]["limit_bytes"] is not None:
                raise ConfigError(f"devices[{i}].queue.limit_bytes: {d['queue']['limit_bytes']!r}"
                                  " with queue.mode shared: there is one queue, set "
                                  "queue.limit_bytes")
    s = cfg["scheduler"]
    if s["kind"] == "wpf":
        w = s["weights"]
        if len(w) != len(cfg["devices"]):
            raise ConfigError(f"scheduler.weights: {w!r} has {len(w)} entries, wpf needs one per "
                              f"device ({len(cfg['devices'])})")
        for k, x in enumerate(w):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not (
                    math.isfinite(x) and x > 0):
                raise ConfigError(f"scheduler.weights[{k}]: {x!r} is not a number > 0")
    elif s["weights"]:
        raise ConfigError(f"scheduler.weights: {s['weights']!r} is only for scheduler.kind wpf")
    a = cfg["aqm"]
    if a["kind"] == "droptail" and a["params"]:
        raise ConfigError(f"aqm.params: {a['params']!r}: drop-tail has no parameters")
    _check_aqm_params(cfg)
    if cfg["phy"]["mode"] in ("sample", "uhd"):
        # The blocks fix the numerology and decode for real: the apd must use the measured
        # OFDM table of the profile and the profile's slot.
        mode = cfg["phy"]["mode"]
        for key in ("slot_s", "mcs_table", "error_model"):
            if key == "slot_s" and cfg["phy"][key] is not None and abs(
                    cfg["phy"][key] - PROFILES[cfg["phy"]["profile"]]["slot_s"]) < 1e-9:
                continue  # the profile's own slot (fading.yaml states it): allowed
            if cfg["phy"][key] is not None:
                raise ConfigError(
                    f"phy.{key}: {cfg['phy'][key]!r} cannot be set with phy.mode {mode} (it "
                    "uses the profile's slot and measured MCS table, and real decoding)")
        if cfg["phy"]["link_curves"]:
            raise ConfigError(f"phy.link_curves: {cfg['phy']['link_curves']!r} cannot be set "
                              f"with phy.mode {mode} (real decoding)")
    if cfg["phy"]["mode"] == "uhd":
        _check_uhd(cfg)
    if cfg["phy"]["mcs_table"] and str(cfg["phy"]["mcs_table"]).endswith(".csv") and not Path(
            cfg["phy"]["mcs_table"]).is_file():
        raise ConfigError(f"phy.mcs_table: {cfg['phy']['mcs_table']!r}: no such file")
    if daemonconf.error_model(cfg) == "curves":
        lc = cfg["phy"]["link_curves"]
        if not lc:
            raise ConfigError("phy.link_curves: required with error_model curves (a CSV "
                              "mcs,snr_db,bler from `oppsched linkcurves`)")
        if not Path(lc).is_file():
            raise ConfigError(f"phy.link_curves: {lc!r}: no such file")
    elif cfg["phy"]["link_curves"]:
        raise ConfigError(f"phy.link_curves: {cfg['phy']['link_curves']!r} given but the error "
                          f"model is {daemonconf.error_model(cfg)!r}, not curves")
    for i, d in enumerate(cfg["devices"]):
        ch = d["channel"]
        model = daemonconf.channel_model(cfg, d)
        if model == "trace" and not ch["trace"]:
            raise ConfigError(f"devices[{i}].channel.trace: required with model trace "
                              "(a CSV time_s,snr_db)")
        if model == "trace" and not Path(ch["trace"]).is_file():
            raise ConfigError(f"devices[{i}].channel.trace: {ch['trace']!r}: no such file")
        if model != "trace" and ch["trace"]:
            raise ConfigError(f"devices[{i}].channel.trace: {ch['trace']!r} given but the model "
                              f"is {model!r}")
    hm = cfg["harq"]
    if hm["feedback_timeout_slots"] <= cfg["phy"]["lead_slots"]:
        raise ConfigError(f"harq.feedback_timeout_slots: {hm['feedback_timeout_slots']} is not "
                          f"more than phy.lead_slots ({cfg['phy']['lead_slots']}): feedback could "
                          "never arrive in time")
    for k, v in cfg["tcp"]["extra"].items():
        if not re.fullmatch(r"net\.[a-z0-9_.]+", str(k)):
            raise ConfigError(f"tcp.extra.{k}: not a net.* sysctl name")


def _check_uhd(cfg: dict) -> None:
    """phy.mode uhd: every radio named by its args, each radio a different device."""
    check_radio_args([("phy.uhd.ap", cfg["phy"]["uhd"]["ap"])] + [
        (f"devices[{i}].uhd", d["uhd"]) for i, d in enumerate(cfg["devices"])],
        " with phy.mode uhd")


def _check_aqm_params(cfg: dict) -> None:
    """AQM parameters through the C++ configuration check (oppsched.mac.make_aqm), the one
    place they are validated; skipped if the MAC bindings are not built."""
    a = cfg["aqm"]
    try:
        from oppsched import mac
        make = mac.make_aqm
    except (ImportError, AttributeError):
        return
    reserved = {"limit_bytes", "limit_packets", "ecn", "seed"} & set(a["params"])
    if reserved:
        raise ConfigError(f"aqm.params.{sorted(reserved)[0]}: set it in queue/aqm, not in params")
    try:
        make(a["kind"], limit_bytes=cfg["queue"]["limit_bytes"],
             limit_packets=cfg["queue"]["limit_packets"], ecn=a["ecn"], **a["params"])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"aqm.params: {exc}") from None


def resolved_ecn(cfg: dict) -> int:
    e = cfg["tcp"]["ecn"]
    if e == "auto":
        return 1 if (cfg["aqm"]["ecn"] and cfg["aqm"]["kind"] in MARKING_AQMS) else 0
    return int(e)


# ----------------------------------------------------------------------------------------
# Programs


def build_dir(cfg: dict) -> Path:
    return Path(cfg.get("build_dir") or os.environ.get(BUILD_ENV) or REPO / "build")


def find_programs(cfg: dict) -> dict:
    """Paths/argv prefixes of the programs of a run; TestbedError naming what is missing."""
    b = build_dir(cfg)
    out = {}
    missing = []
    for key, rel, target in (("apd", "host/daemon/oppsched-apd", "oppsched-apd"),
                             ("client", "host/daemon/oppsched-client", "oppsched-client")):
        p = b / rel
        if p.is_file() and os.access(p, os.X_OK):
            out[key] = p
        else:
            missing.append(f"{p} (cmake --build {b} --target {target})")
    delay = b / "host/delay/oppsched-delay"
    out["delay"] = delay if delay.is_file() else None
    mode = cfg["phy"]["mode"]
    if mode == "abstract":
        # An executable in the build folder first (docs/daemons.md names it
        # oppsched-phy-abstract), else the Python module (tools/oppsched/phy/abstract.py).
        exe = b / "host/phy/oppsched-phy-abstract"
        if exe.is_file() and os.access(exe, os.X_OK):
            out["phy"] = [str(exe)]
        elif (TOOLS / "oppsched/phy/abstract.py").is_file() or \
                importlib.util.find_spec("oppsched.phy.abstract") is not None:
            out["phy"] = [sys.executable, "-m", "oppsched.phy.abstract"]
        else:
            missing.append("the abstract PHY (tools/oppsched/phy/abstract.py, "
                           "python -m oppsched.phy.abstract)")
    elif mode == "sample":
        so = list((b / "python/gnuradio/oppsched").glob("oppsched_python*.so"))
        if so and (TOOLS / "oppsched/phy/loopback.py").is_file():
            out["phy"] = [sys.executable, "-m", "oppsched.phy.loopback"]
        else:
            missing.append(f"the sample PHY (gnuradio.oppsched in {b}/python: cmake --build "
                           f"{b}; tools/oppsched/phy/loopback.py)")
    elif mode == "uhd":
        # The radios themselves are looked for by the PHY when it starts (its first act).
        so = list((b / "python/gnuradio/oppsched").glob("oppsched_python*.so"))
        if so and (TOOLS / "oppsched/phy/uhd.py").is_file() and \
                importlib.util.find_spec("gnuradio.uhd") is not None:
            out["phy"] = [sys.executable, "-m", "oppsched.phy.uhd"]
        else:
            missing.append(f"the UHD PHY (gnuradio.oppsched in {b}/python: cmake --build "
                           f"{b}; gnuradio.uhd: apt-get install gr-uhd; "
                           "tools/oppsched/phy/uhd.py)")
    for tool in ("iperf3", "tcpdump"):
        if shutil.which(tool) is None and not (tool == "tcpdump" and not cfg["capture"]["pcaps"]):
            missing.append(f"{tool} (apt-get install {tool})")
    if missing:
        raise TestbedError("kind testbed: missing programs: " + "; ".join(missing)
                           + f". Build folder: {b} (set build_dir or ${BUILD_ENV})")
    return out


def programs_available(cfg: dict | None = None) -> tuple[bool, str]:
    """(True, "") when every program a default abstract-PHY run needs exists, else
    (False, why): for tests that skip (locally) or fail (CI) without them."""
    cfg = cfg or {"build_dir": "", "phy": {"mode": "abstract"}, "capture": {"pcaps": True}}
    try:
        find_programs(cfg)
    except TestbedError as exc:
        return False, str(exc)
    return True, ""


def phy_env(cfg: dict) -> dict:
    """PYTHONPATH for a Python PHY: this package and the build's extension modules."""
    parts = [str(TOOLS), str(build_dir(cfg) / "python")]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(parts)}


# ----------------------------------------------------------------------------------------
# Process bookkeeping: CPU seconds and exit codes

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float | None:
    """utime + stime of a live process (/proc/PID/stat fields 14 and 15), seconds."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def reap(proc) -> tuple[int, float] | None:
    """If `proc` (a netns.Proc we started) has exited, reaps it with wait4 and returns
    (exit code, CPU seconds from its rusage); None while it runs. Sets the Popen's
    returncode, so the Session sees it as finished."""
    if proc.popen.returncode is not None:
        return None
    try:
        pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if pid == 0:
        return None
    rc = os.waitstatus_to_exitcode(status)
    proc.popen.returncode = rc
    return rc, ru.ru_utime + ru.ru_stime


class ProcTable:
    """Every process of the run, with its role, CPU and exit code, for processes.json."""

    def __init__(self):
        self.rows: dict[str, dict] = {}
        self.procs: dict[str, object] = {}

    def add(self, proc, role: str) -> None:
        self.procs[proc.name] = proc
        self.rows[proc.name] = {"name": proc.name, "role": role, "pid": proc.pid,
                                "netns": proc.ns.name, "argv": proc.argv,
                                "log": str(proc.log_path) if proc.log_path else None,
                                "cpu_s_before_stop": None, "cpu_s": None, "exit_code": None,
                                "started_mono_s": time.monotonic(), "ended_mono_s": None}

    def poll(self, name: str) -> bool:
        """True if the process has ended (and is now recorded)."""
        r = reap(self.procs[name])
        if r is not None:
            self.rows[name]["exit_code"], self.rows[name]["cpu_s"] = r
            self.rows[name]["ended_mono_s"] = time.monotonic()
            if self.rows[name]["cpu_s_before_stop"] is None:
                self.rows[name]["cpu_s_before_stop"] = r[1]
            return True
        return self.procs[name].popen.returncode is not None

    def sample(self, name: str) -> None:
        """CPU now, before the process is stopped (the figure the report uses)."""
        c = proc_cpu_s(self.procs[name].pid)
        if c is not None and self.procs[name].popen.returncode is None:
            self.rows[name]["cpu_s_before_stop"] = c

    def stop(self, name: str, timeout: float, sig: int = signal.SIGTERM) -> int | None:
        """Samples CPU, sends `sig`, waits up to `timeout` s for a clean exit (reaping it
        with its rusage), then SIGKILL. Returns the exit code."""
        p = self.procs[name]
        if self.poll(name):
            return self.rows[name]["exit_code"]
        self.sample(name)
        try:
            os.kill(p.pid, sig)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.poll(name):
                return self.rows[name]["exit_code"]
            time.sleep(0.01)
        self.rows[name]["killed"] = True
        p.stop(0.5)  # SIGTERM + SIGKILL to the group, waits
        self.poll(name)
        if self.rows[name]["exit_code"] is None:
            self.rows[name]["exit_code"] = p.popen.returncode
            self.rows[name]["ended_mono_s"] = time.monotonic()
        return self.rows[name]["exit_code"]

    def check_alive(self, names) -> None:
        for n in names:
            if self.poll(n):
                p = self.procs[n]
                raise TestbedError(f"{n} exited with {self.rows[n]['exit_code']} during the run"
                                   + (f":\n{p.log_tail()}" if p.log_tail() else ""))

    def to_json(self) -> list[dict]:
        return list(self.rows.values())


# ----------------------------------------------------------------------------------------
# run()

OUTPUT_GLOBS = ("*.pcap", "flow.*.json", "slots.csv", "packets.csv", "windows.*.csv",
                "phy_slots.csv", "client.*.events.csv", "mcs_table.csv",
                "*.stats.json", "run.json", "processes.json", "apd.yaml", "client.*.yaml",
                "phy.yaml", "summary.json", "*.png")


def _clean(rundir: Path) -> None:
    for g in OUTPUT_GLOBS:
        for p in rundir.glob(g):
            p.unlink()
    for d in ("logs", "zmq", "netns"):
        shutil.rmtree(rundir / d, ignore_errors=True)


def flow_plans(cfg: dict, clients) -> list[FlowPlan]:
    """The iperf3 flows: ports BASE_PORT + index, addresses from the built topology."""
    srv_idx = {s["name"]: i for i, s in enumerate(cfg["servers"])}
    dev_idx = {d["name"]: j for j, d in enumerate(cfg["devices"])}
    plans = []
    for k, f in enumerate(cfg["flows"]):
        j = dev_idx[f["device"]]
        node = clients[j]
        addr = node.addr6 if f["family"] == "ipv6" else node.addr4
        stop = f["stop_s"] if f["stop_s"] is not None else cfg["duration_s"]
        plans.append(FlowPlan(
            id=f["id"], server=f["server"], server_index=srv_idx[f["server"]],
            device=f["device"], device_index=j, family=f["family"], dst_addr=addr,
            port=BASE_PORT + k, start_s=f["start_s"],
            seconds=None if f["bytes"] is not None else iperf_seconds(f["start_s"], stop),
            nbytes=f["bytes"], cc=f["cc"] or cfg["tcp"]["congestion_control"],
            parallel=f["parallel"], interval_s=cfg["iperf"]["interval_s"]))
    return plans


def topology(cfg: dict):
    from oppsched.netns import ClientSpec, ServerSpec, TcpSettings, Topology

    t = cfg["tcp"]
    tcp = TcpSettings(congestion_control=t["congestion_control"], sack=t["sack"],
                      ecn=resolved_ecn(cfg), timestamps=t["timestamps"],
                      window_scaling=t["window_scaling"],
                      extra=tuple((str(k), str(v)) for k, v in t["extra"].items()))
    tp = cfg["topology"]
    return Topology(
        servers=tuple(ServerSpec(s["name"], s["rtt_ms"], s["rate_bps"], s["limit_bytes"])
                      for s in cfg["servers"]),
        clients=tuple(ClientSpec(d["name"]) for d in cfg["devices"]),
        tcp=tcp, ipv4=tp["ipv4"], ipv6=tp["ipv6"], wired=tp["wired"], client_links="tun",
        offloads=tp["offloads"], rt_priority=tp["rt_priority"], mtu=tp["mtu"])


def _tcp_override_sysctls(over: dict) -> dict:
    m = {"sack": "net.ipv4.tcp_sack", "ecn": "net.ipv4.tcp_ecn",
         "timestamps": "net.ipv4.tcp_timestamps", "window_scaling": "net.ipv4.tcp_window_scaling"}
    return {m[k]: int(v) for k, v in over.items() if v is not None}


def _wait_files(paths, what: str, timeout: float, procs: ProcTable, alive) -> None:
    from oppsched.netns import wait_for

    def probe():
        procs.check_alive(alive)
        return all(Path(p).exists() for p in paths)
    wait_for(probe, timeout=timeout, what=what)


def _wait_log(proc, text: str, what: str, timeout: float) -> None:
    from oppsched.netns import wait_for

    def probe():
        proc.check_alive()
        try:
            return text in proc.log_path.read_text(errors="replace")
        except OSError:
            return False
    wait_for(probe, timeout=timeout, what=what)


def _wait_radio(tb, timeout: float, procs: ProcTable, alive) -> float:
    """Pings every client (each family) from every server until each has answered once:
    proof that slots are granted, decoded and acknowledged end to end, and it fills the
    servers' neighbour caches. Returns the seconds it took."""
    from concurrent.futures import ThreadPoolExecutor

    t0 = time.monotonic()
    addrs = [c.addr4 for c in tb.clients if c.addr4] + [c.addr6 for c in tb.clients if c.addr6]
    todo = {(i, a) for i in range(len(tb.servers)) for a in addrs}
    deadline = t0 + timeout
    while todo:
        procs.check_alive(alive)
        if time.monotonic() > deadline:
            pairs = ", ".join(f"{tb.servers[i].name} -> {a}" for i, a in sorted(todo))
            raise TestbedError(f"radio not ready after {timeout:g} s: no ping reply for {pairs} "
                               "(see logs/apd.log, logs/phy.log, logs/client.*.log)")
        by_srv: dict[int, list[str]] = {}
        for i, a in todo:
            by_srv.setdefault(i, []).append(a)
        with ThreadPoolExecutor(max_workers=len(by_srv)) as pool:
            res = list(pool.map(lambda kv: (kv[0], tb.servers[kv[0]].ns.ping_many(
                kv[1], count=1, timeout=1.0)), by_srv.items()))
        for i, r in res:
            for a, rtts in r.items():
                if rtts and rtts[0] is not None:
                    todo.discard((i, a))
    return time.monotonic() - t0


def _live_goodput(tb, plans, last: dict, now: float) -> dict[str, float]:
    """Goodput per flow since the previous call, from the senders' bytes_acked (ss -ti)."""
    from oppsched.flows import parse_ss_bytes_acked

    acked: dict[int, int] = {}
    for i in {p.server_index for p in plans}:
        cp = tb.servers[i].ns.run(["ss", "-Htin"], check=False, timeout=5)
        acked.update(parse_ss_bytes_acked(cp.stdout))
    out = {}
    for p in plans:
        if p.started_at_s is None:
            continue
        b = acked.get(p.port)
        prev_b, prev_t = last.get(p.id, (0, p.started_at_s))
        if b is None:
            continue
        if now > prev_t and b >= prev_b:
            out[p.id] = 8.0 * (b - prev_b) / (now - prev_t)
        last[p.id] = (b, now)
    return out


def _users(cfg: dict) -> list[daemonconf.User]:
    """Users as the Testbed addresses them (netns.client_addr): id j = client namespace r{j}."""
    from oppsched.netns import client_addr

    tp = cfg["topology"]
    return [daemonconf.User(j, d["name"], client_addr(j, False) if tp["ipv4"] else None,
                            client_addr(j, True) if tp["ipv6"] else None)
            for j, d in enumerate(cfg["devices"])]


class HostNs:
    """The root network namespace, for Session.spawn: the command runs as it is (the
    Session still owns the process: its group is stopped at teardown, and it carries the
    run's marker, which teardown's leftover sweep also kills)."""

    name = "root"

    def exec_argv(self, argv) -> list[str]:
        return [str(a) for a in argv]


def preflight(cfg: dict, progs: dict, files: dict) -> None:
    """Every program validates its file (`--check`: parse and validate, open nothing)
    before any namespace exists, so a bad value fails in a second with the program's own
    message naming the field (docs/daemons.md: exit status 2)."""
    jobs = [("oppsched-apd", [str(progs["apd"])], files["apd"], None)]
    jobs += [("oppsched-client", [str(progs["client"])], f, None)
             for k, f in files.items() if k.startswith("client.")]
    jobs.append(("phy", [str(a) for a in progs["phy"]], files["phy"], phy_env(cfg)))
    for name, argv, f, env in jobs:
        cp = subprocess.run([*argv, "--config", str(f), "--check"], capture_output=True,
                            text=True, timeout=60, stdin=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
        if cp.returncode != 0:
            msg = (cp.stderr.strip() or cp.stdout.strip()).splitlines()
            raise TestbedError(f"{name} rejects {Path(f).name} (exit {cp.returncode}): "
                               + (" | ".join(msg[-5:]) if msg else "no message"))


def run(cfg: dict, outdir: Path, progress) -> None:
    import tempfile

    from oppsched.netns import Testbed, ensure_congestion_control

    check(cfg)
    rundir = Path(outdir).resolve()
    rundir.mkdir(parents=True, exist_ok=True)
    _clean(rundir)
    (rundir / "logs").mkdir()
    progs = find_programs(cfg)
    topo = topology(cfg)
    timeouts = cfg["timeouts"]
    record = {"kind": "testbed", "status": "starting", "error": None, "t0_mono_ns": None,
              "t0_wall_s": None, "radio_ready_s": None, "programs": {k: str(v) for k, v in
                                                                     progs.items()},
              "host_changes": [], "flows": [], "testbed": None, "wired_stats": None}
    procs = ProcTable()

    def write_record():
        (rundir / "run.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
        (rundir / "processes.json").write_text(json.dumps(procs.to_json(), indent=1) + "\n")

    # The daemons' files first, checked by the daemons themselves, before anything is built.
    # ipc sockets live in RUN_DIR/zmq, or in a short scratch directory when that path is
    # too long for a Unix socket address.
    scratch = Path(tempfile.mkdtemp(prefix="oppsched-"))
    users = _users(cfg)
    lay = daemonconf.Layout.make(rundir, users, scratch=scratch)
    lay.zmq_dir.mkdir(parents=True, exist_ok=True)
    files = daemonconf.write_all(cfg, lay)
    record["endpoints"] = lay.endpoints
    try:
        preflight(cfg, progs, files)
    except BaseException as exc:
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {exc}"
        write_record()
        shutil.rmtree(scratch, ignore_errors=True)
        raise

    tb = Testbed(topo, prefix=os.environ.get("OPPSCHED_NETNS_PREFIX", "oppsched"),
                 workdir=rundir / "netns", delay_binary=progs["delay"])
    record["run_name"] = tb.name
    write_record()
    t_start = time.monotonic()
    plans: list[FlowPlan] = []
    try:
        with tb:
            record["testbed"] = tb.describe()
            for cc in {p_cc for p_cc in [f["cc"] for f in cfg["flows"]] if p_cc}:
                record["host_changes"] += ensure_congestion_control(cc)
            # Per-namespace TCP overrides (the Testbed applied cfg.tcp everywhere).
            for node, spec in list(zip(tb.servers, cfg["servers"])) + \
                    list(zip(tb.clients, cfg["devices"])):
                node.ns.sysctl(_tcp_override_sysctls(spec["tcp"]))
            for u, c in zip(users, tb.clients):
                if (u.addr4, u.addr6) != (c.addr4, c.addr6):
                    raise TestbedError(f"{c.name}: addressed {c.addr4}/{c.addr6}, the daemons "
                                       f"were configured for {u.addr4}/{u.addr6}")
                u.netns = c.ns.name
            for p in lay.zmq_dir.iterdir():
                p.unlink()
            plans = flow_plans(cfg, tb.clients)
            record["flows"] = [p.to_json() for p in plans]
            record["status"] = "starting daemons"
            write_record()
            logs = rundir / "logs"

            def spawn(ns, argv, name, role, env=None):
                p = tb.session.spawn(ns, argv, name=name, log=logs / f"{name}.log", env=env)
                procs.add(p, role)
                return p

            # 1. apd (binds phy_requests, phy_grants, uplink), 2. clients (bind rx_<id>),
            # 3. the PHY (connects to all; the clock master), each checked, not slept on.
            up = timeouts["startup_s"]
            spawn(tb.ap, [progs["apd"], "--config", files["apd"]], "apd", "apd")
            _wait_files([lay.ipc_path(n) for n in daemonconf.ZMQ_NAMES],
                        "oppsched-apd: endpoints bound", up, procs, ["apd"])
            daemons = ["apd"]
            for u, node in zip(users, tb.clients):
                spawn(node.ns, [progs["client"], "--config", files[f"client.{u.name}"]],
                      f"client.{u.name}", "client")
                daemons.append(f"client.{u.name}")
            _wait_files([lay.ipc_path(f"rx_{u.id}") for u in users],
                        "oppsched-client: rx endpoints bound", up, procs, daemons)
            # Over the air the radios are on the host's USB/Ethernet: the UHD PHY runs in
            # the root namespace (its ipc endpoints are files, reachable from any namespace).
            spawn(HostNs() if cfg["phy"]["mode"] == "uhd" else tb.ap,
                  [*progs["phy"], "--config", files["phy"]], "phy", "phy", env=phy_env(cfg))
            daemons.append("phy")
            record["radio_ready_s"] = _wait_radio(tb, up, procs, daemons)
            record["status"] = "radio up"
            write_record()

            # Captures: each server's wired side, each client's TUN (and the AP's TUN).
            caps = []
            if cfg["capture"]["pcaps"]:
                snap = str(cfg["capture"]["snaplen"])
                targets = [(n.ns, n.dev, f"wired.{n.name}") for n in tb.servers] + \
                          [(n.ns, n.dev, f"client.{n.name}") for n in tb.clients]
                if cfg["capture"]["ap"]:
                    targets.append((tb.ap, "radio0", "ap"))
                for ns, dev, stem in targets:
                    name = f"tcpdump.{stem}"
                    # -U --immediate-mode: every packet is in the file as soon as it is
                    # seen (nothing is lost in the capture ring when tcpdump is stopped);
                    # -Z root: the file is opened after privileges would be dropped.
                    caps.append(spawn(ns, ["tcpdump", "-i", dev, "-n", "-s", snap, "-U",
                                           "--immediate-mode", "-Z", "root",
                                           "-w", rundir / f"{stem}.pcap"], name, "tcpdump"))
                for c in caps:
                    _wait_log(c, "listening on", f"{c.name}: capturing", up)

            # iperf3 receivers in the client namespaces, one port per flow.
            for p in plans:
                rp = spawn(tb.clients[p.device_index].ns, p.receiver_argv(rundir),
                           f"iperf3-r.{p.id}", "iperf3-receiver")
                tb.clients[p.device_index].ns.wait_listening(p.port, timeout=up, proc=rp)

            # The flows, at their times after t0.
            record["status"] = "running"
            t0 = time.monotonic()
            record["t0_mono_ns"] = time.monotonic_ns()
            record["t0_wall_s"] = time.time()
            write_record()
            _schedule(cfg, tb, plans, procs, daemons, rundir, t0, progress, spawn)
            record["status"] = "stopping"
            # Stop in order: receivers (done by now), PHY, clients and apd (SIGTERM: they
            # finish the slot, write stats and traces, exit 0), captures, delay stages.
            for p in plans:
                procs.stop(f"iperf3-r.{p.id}", 5.0)
            for n in procs.rows:
                if procs.rows[n]["role"] in ("tcpdump",):
                    procs.sample(n)
            for link in tb.links:
                if link.proc is not None and link.proc.running():
                    record.setdefault("delay_cpu_s", {})[link.name] = proc_cpu_s(link.proc.pid)
            procs.stop("phy", 10.0)
            for u in users:
                procs.stop(f"client.{u.name}", 10.0)
            procs.stop("apd", 10.0)
            for c in caps:
                procs.stop(c.name, 5.0)
            record["wired_stats"] = None
            record["status"] = "done"
            for n in daemons:
                rc = procs.rows[n]["exit_code"]
                if rc not in (0, None):
                    record.setdefault("warnings", []).append(f"{n} exited with {rc}")
    except BaseException as exc:
        record["status"] = "failed"
        record["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        record["flows"] = [p.to_json() for p in plans] or record["flows"]
        record["wall_s"] = time.monotonic() - t_start
        record["wired_stats"] = tb.final_wired_stats or None
        record["teardown_errors"] = tb.session.teardown_errors
        write_record()
    if tb.session.teardown_errors:
        raise TestbedError("teardown incomplete: " + "; ".join(tb.session.teardown_errors))


def _schedule(cfg, tb, plans, procs: ProcTable, daemons, rundir, t0, progress, spawn) -> None:
    """Starts each flow's sender at t0 + start_s, watches the daemons, reports progress,
    and returns when every flow has ended (or duration_s + grace_s has passed)."""
    dur = cfg["duration_s"]
    grace = cfg["timeouts"]["grace_s"] + 3 * max(s["rtt_ms"] for s in cfg["servers"]) / 1e3
    pending = sorted(plans, key=lambda p: p.start_s)
    running: list[FlowPlan] = []
    every = max(1.0, min(5.0, dur / 10.0))
    next_report = every
    last_acked: dict = {}
    while True:
        now = time.monotonic() - t0
        while pending and pending[0].start_s <= now:
            p = pending.pop(0)
            spawn(tb.servers[p.server_index].ns, p.sender_argv(rundir), f"iperf3-s.{p.id}",
                  "iperf3-sender")
            p.started_at_s = now
            running.append(p)
        for p in list(running):
            if procs.poll(f"iperf3-s.{p.id}"):
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[f"iperf3-s.{p.id}"]["exit_code"]
                running.remove(p)
        procs.check_alive(daemons)
        if not pending and not running:
            break
        if now >= dur + grace:
            for p in running:
                procs.stop(f"iperf3-s.{p.id}", 3.0, signal.SIGINT)
                p.ended_at_s = time.monotonic() - t0
                p.exit_code = procs.rows[f"iperf3-s.{p.id}"]["exit_code"]
                p.extra["stopped"] = f"still running {grace:.0f} s after duration_s"
            break
        if now >= next_report:
            try:
                rates = _live_goodput(tb, plans, last_acked, now)
            except Exception:  # noqa: BLE001 -- progress is best effort
                rates = {}
            txt = ", ".join(f"{k} {v / 1e3:.0f}" for k, v in rates.items())
            progress(min(int(now), int(dur)), int(dur),
                     "s" + (f"; goodput kb/s: {txt}" if txt else ""))
            next_report += every
        nxt = min([pending[0].start_s] if pending else [now + 0.05])
        time.sleep(max(0.005, min(0.05, nxt - now)))


# ----------------------------------------------------------------------------------------
# analyze(): summary.json from the run folder's files alone


def _read_json(path: Path):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def read_slots(rundir: Path) -> pd.DataFrame | None:
    for name in ("slots.csv", "slots.csv.gz"):
        p = Path(rundir) / name
        if p.exists() and p.stat().st_size > 0:
            try:
                return pd.read_csv(p)
            except (ValueError, pd.errors.EmptyDataError):
                return None
    return None


def _col(df: pd.DataFrame, kind: str, user: dict) -> str | None:
    """Column `kind.<user>` of slots.csv: by name, else by numeric id."""
    for key in (f"{kind}.{user['name']}", f"{kind}.{user['id']}"):
        if key in df.columns:
            return key
    return None


def _truthy(s: pd.Series) -> pd.Series:
    if s.dtype == bool:
        return s
    return s.astype(str).str.lower().isin(("1", "true", "yes", "late"))


def _queue_delays_from_packets(rundir: Path, n_users: int) -> dict[int, float]:
    """Mean sojourn (ms) per user from packets.csv enqueue/dequeue pairs."""
    p = Path(rundir) / "packets.csv"
    if not p.exists():
        return {}
    try:
        df = pd.read_csv(p)
    except (ValueError, pd.errors.EmptyDataError):
        return {}
    if df.empty or not {"t_ns", "event", "user", "packet_id"} <= set(df.columns):
        return {}
    enq = df[df["event"] == "enqueue"][["packet_id", "user", "t_ns"]]
    deq = df[df["event"] == "dequeue"][["packet_id", "t_ns"]]
    m = enq.merge(deq, on="packet_id", suffixes=("_in", "_out"))
    out = {}
    for u, g in m.groupby("user"):
        out[int(u)] = float((g["t_ns_out"] - g["t_ns_in"]).mean() / 1e6)
    return out


def analyze(outdir: Path) -> dict:
    from oppsched.flows import intervals, sender_result

    rundir = Path(outdir)
    cfg = json.loads((rundir / "config.json").read_text())
    run = _read_json(rundir / "run.json") or {}
    procs = _read_json(rundir / "processes.json") or []
    warm = cfg["analysis"]["warmup_s"]
    plans = {f["id"]: f for f in run.get("flows", [])}
    dev_index = {d["name"]: j for j, d in enumerate(cfg["devices"])}
    users_cfg = [{"name": d["name"], "id": j} for j, d in enumerate(cfg["devices"])]

    # -- flows: iperf3 JSON (goodput, RTT), cross-checked against the client pcap
    pcaps: dict[str, pd.DataFrame | None] = {}
    flows = []
    for k, f in enumerate(cfg["flows"]):
        plan = plans.get(f["id"], {})
        snd = sender_result(rundir / f"flow.{f['id']}.sender.json",
                            rundir / f"flow.{f['id']}.receiver.json")
        rcv = intervals(rundir / f"flow.{f['id']}.receiver.json", plan.get("started_at_s") or 0.0)
        steady = None
        if not rcv.empty:
            after = rcv[rcv["t_s"] - rcv["seconds"] >= (plan.get("started_at_s") or 0.0) + warm]
            if after["seconds"].sum() > 0:
                steady = float(8 * after["bytes"].sum() / after["seconds"].sum())
        row = {"id": f["id"], "user": f["device"], "server": f["server"],
               "goodput_bps": snd["goodput_bps"] if snd["goodput_bps"] is not None else 0.0,
               "rtt_ms_mean": snd["rtt_ms_mean"], "rtt_ms_max": snd["rtt_ms_max"],
               "goodput_steady_bps": steady, "bytes_received": snd["bytes_received"],
               "seconds": snd["seconds"], "retransmits": snd["retransmits"],
               "streams": snd["streams"], "cc": plan.get("cc") or f["cc"]
               or cfg["tcp"]["congestion_control"], "family": f["family"],
               "port": plan.get("port", BASE_PORT + k), "started_at_s": plan.get("started_at_s"),
               "ended_at_s": plan.get("ended_at_s"), "exit_code": plan.get("exit_code"),
               "error": snd["error"], "goodput_source": snd["goodput_source"],
               "goodput_pcap_bps": None}
        pc = rundir / f"client.{f['device']}.pcap"
        if plan.get("dst_addr") and pc.exists() and pc.stat().st_size < 512e6 and snd["seconds"]:
            from oppsched import pcap

            if f["device"] not in pcaps:
                try:
                    pcaps[f["device"]] = pcap.read_tcp(pc)
                except (OSError, ValueError):
                    pcaps[f["device"]] = None
            df = pcaps[f["device"]]
            if df is not None:
                # what the receiver acknowledged (in order), as the capture shows it
                b = pcap.acked_bytes(df, plan["dst_addr"], row["port"])
                row["bytes_pcap"] = b
                row["goodput_pcap_bps"] = 8.0 * b / snd["seconds"]
        flows.append(row)

    # -- users and slots: slots.csv
    slots = read_slots(rundir)
    slot_s = daemonconf.slot_s(cfg)
    users = []
    slot_info = {"total": 0, "empty": 0, "late": 0}
    harq = {"tb_sent": 0, "tb_failed_final": 0}
    delays_pk = _queue_delays_from_packets(rundir, len(users_cfg))
    window = None
    if slots is not None and len(slots) and run.get("t0_mono_ns") and "t_ns" in slots:
        # The measured period: from t0 (flows scheduled) to the end of the last flow.
        ends = [f.get("ended_at_s") for f in run.get("flows", []) if f.get("ended_at_s")]
        if ends:
            lo = int(run["t0_mono_ns"])
            hi = lo + int(max(ends) * 1e9)
            window = (lo, hi)
            slots = slots[(slots["t_ns"] >= lo) & (slots["t_ns"] <= hi)].reset_index(drop=True)
    if slots is not None and len(slots):
        n = len(slots)
        span = n * slot_s
        user_col = slots["user"].astype(int)
        outcome = slots["outcome"].fillna("").astype(str) if "outcome" in slots else \
            pd.Series([""] * n)
        retx = slots["retx"].fillna(0).astype(int) if "retx" in slots else pd.Series(np.zeros(n))
        tb_bytes = slots["tb_bytes"].fillna(0).astype(float) if "tb_bytes" in slots else \
            pd.Series(np.zeros(n))
        late = int(_truthy(slots["late"]).sum()) if "late" in slots else 0
        slot_info = {"total": int(n), "empty": int((user_col < 0).sum()), "late": late,
                     "slot_s": slot_s, "seconds": span,
                     "window": "t0 to the end of the last flow" if window else "whole trace"}
        mac_bytes_total = float(tb_bytes[(user_col >= 0) & (outcome == "ack")].sum())
        sent = (user_col >= 0)
        harq = {"tb_sent": int((sent & (retx == 0)).sum()),
                "tb_failed_final": int((outcome == "dropped").sum()),
                "transmissions": int(sent.sum()),
                "retransmissions": int((sent & (retx > 0)).sum()),
                "acks": int((outcome == "ack").sum()), "nacks": int((outcome == "nack").sum()),
                "timeouts": int((outcome == "timeout").sum()),
                # sent, never received (slot empty on air or header lost), sent again
                "unheard": int((outcome == "unheard").sum())}
        harq["residual_loss"] = harq["tb_failed_final"] / harq["tb_sent"] if harq["tb_sent"] \
            else 0.0
        for u in users_cfg:
            mine = user_col == u["id"]
            ok = mine & (outcome == "ack")
            mac_bps = float(8 * tb_bytes[ok].sum() / span)
            new_bytes = float(tb_bytes[mine & (retx == 0)].sum())
            qc, cc_, pc_ = _col(slots, "queue", u), _col(slots, "cqi", u), _col(slots, "price", u)
            mean_q = float(slots[qc].mean()) if qc else None
            if u["id"] in delays_pk:
                delay, method = delays_pk[u["id"]], "packets.csv sojourn"
            elif mean_q is not None and new_bytes > 0:
                # Little's law: mean queue / mean service rate of new data
                delay, method = 1e3 * mean_q / (new_bytes / span), "little"
            else:
                delay, method = None, None
            mcs = slots["mcs"][mine] if "mcs" in slots else pd.Series(dtype=float)
            users.append({
                "name": u["name"], "id": u["id"],
                "slot_fraction": float(mine.sum() / n),
                "mac_throughput_bps": mac_bps,
                "mean_queue_bytes": mean_q,
                "mean_queue_delay_ms": delay, "queue_delay_method": method,
                "mean_cqi": float(slots[cc_].mean()) if cc_ else None,
                "mean_mcs": float(mcs.mean()) if len(mcs) else None,
                "mean_price_s": float(slots[pc_].mean()) if pc_ else None,
                "tb_sent": int((mine & (retx == 0)).sum()),
                "tb_failed_final": int((mine & (outcome == "dropped")).sum()),
            })
    else:
        for u in users_cfg:
            users.append({"name": u["name"], "id": u["id"], "slot_fraction": 0.0,
                          "mac_throughput_bps": 0.0, "mean_queue_bytes": None,
                          "mean_queue_delay_ms": None, "queue_delay_method": None})
    for u in users:
        u["goodput_bps"] = float(sum(f["goodput_bps"] for f in flows if f["user"] == u["name"]))
        u["flows"] = [f["id"] for f in flows if f["user"] == u["name"]]

    # -- the daemons' own counters, CPU
    stats = {}
    for name in ["apd", "phy"] + [f"client.{d['name']}" for d in cfg["devices"]]:
        s = _read_json(rundir / f"{name}.stats.json")
        if s is not None:
            stats[name] = s
    late_phy = _find_number(stats.get("phy"), ("late", "slots_late", "late_slots"))
    if late_phy is not None:
        slot_info["late_phy"] = int(late_phy)
    cpu, share = {}, {}
    for p in procs:
        c = p.get("cpu_s_before_stop")
        if c is None:
            c = p.get("cpu_s")
        cpu[p["name"]] = c
        if c is not None and p.get("ended_mono_s") and p.get("started_mono_s"):
            life = p["ended_mono_s"] - p["started_mono_s"]
            share[p["name"]] = c / life if life > 0 else None
    for name, c in (run.get("delay_cpu_s") or {}).items():
        cpu[f"delay.{name}"] = c
    wall = None
    if run.get("flows"):
        ends = [f.get("ended_at_s") for f in run["flows"] if f.get("ended_at_s") is not None]
        wall = max(ends) if ends else None

    agg_mac = float(sum(u["mac_throughput_bps"] for u in users))
    got = float(sum(f["bytes_received"] or 0 for f in flows))
    span = slot_info.get("seconds") or 0.0
    # Over the same period as the MAC figures: application bytes / MAC bytes delivered
    # (the rest is TCP/IP headers, pure ACK-less overhead, retransmitted and dropped data).
    agg_good = 8.0 * got / span if span else float(sum(f["goodput_bps"] for f in flows))
    mac_bytes = locals().get("mac_bytes_total") or 0.0
    summary = {
        "experiment": cfg["experiment"],
        "kind": "testbed",
        "variant": cfg.get("variant", ""),
        "duration_s": float(cfg["duration_s"]),
        "config": cfg,
        "flows": flows,
        "users": users,
        "jain_index_flows": jain_index(f["goodput_bps"] for f in flows),
        # Jain over goodput / fair share, the fair share of a flow being 1/(devices x flows
        # of its device): what a scheduler that serves devices equally can give. With flows
        # 3 and 4 of seed 000 on one device, plain Jain over flows is at most 0.9 even when
        # everything is as fair as it can be; this one is 1 then.
        "jain_index_flows_fair_share": _jain_fair_share(flows, cfg),
        "jain_index_users": jain_index(u["mac_throughput_bps"] for u in users),
        "aggregate_mac_throughput_bps": agg_mac,
        "aggregate_goodput_bps": agg_good,
        "goodput_mac_fraction": got / mac_bytes if mac_bytes > 0 else None,
        "slots": slot_info,
        "harq": harq,
        "cpu_s": cpu,
        "cpu_share": share,  # CPU seconds per second of the process's life (1.0 = a core)
        "run": {"status": run.get("status"), "error": run.get("error"),
                "run_name": run.get("run_name"), "radio_ready_s": run.get("radio_ready_s"),
                "wall_s": run.get("wall_s"), "flows_wall_s": wall,
                "warnings": run.get("warnings", []),
                "wired": (run.get("testbed") or {}).get("wired"),
                "host_changes": run.get("host_changes", [])},
        "daemon_stats": stats,
        "clamp": _clamp_summary(rundir, cfg),
    }
    return summary


def _jain_fair_share(flows: list[dict], cfg: dict) -> float:
    per_dev: dict[str, int] = {}
    for f in flows:
        per_dev[f["user"]] = per_dev.get(f["user"], 0) + 1
    return jain_index(f["goodput_bps"] * per_dev[f["user"]] for f in flows)


def _find_number(d, keys):
    """The first numeric value under one of `keys` anywhere in a nested stats dict."""
    if not isinstance(d, dict):
        return None
    for k, v in d.items():
        if k in keys and isinstance(v, (int, float)) and not isinstance(v, bool):
            return v
    for v in d.values():
        if isinstance(v, dict):
            r = _find_number(v, keys)
            if r is not None:
                return r
    return None


def _clamp_summary(rundir: Path, cfg: dict) -> dict | None:
    if not cfg["clamp"]["enabled"]:
        return None
    out = {}
    for d in cfg["devices"]:
        p = Path(rundir) / f"windows.{d['name']}.csv"
        try:
            w = pd.read_csv(p)
        except (OSError, ValueError, pd.errors.EmptyDataError):
            out[d["name"]] = None
            continue
        out[d["name"]] = {
            "rewritten_acks": int(len(w)),
            "mean_advertised_bytes": float(w["advertised_bytes"].mean()) if len(w) else None,
            "mean_w_bytes": float(w["w_bytes"].mean()) if len(w) and "w_bytes" in w else None,
            "os_limited_fraction": float((w["awnd_os_bytes"] <= w["advertised_bytes"]).mean())
            if len(w) and "awnd_os_bytes" in w else None,
        }
    return out


# ----------------------------------------------------------------------------------------
# Plots


def plot(outdir: Path, summary: dict) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from oppsched.flows import intervals

    rundir = Path(outdir)
    cfg = summary["config"]
    run = _read_json(rundir / "run.json") or {}
    plans = {f["id"]: f for f in run.get("flows", [])}
    t0_ns = run.get("t0_mono_ns")
    files = []

    # 1. goodput per flow over time (receiver intervals) and the sender's cwnd
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    any_iv = False
    for f in cfg["flows"]:
        off = (plans.get(f["id"]) or {}).get("started_at_s") or 0.0
        iv = intervals(rundir / f"flow.{f['id']}.receiver.json", off)
        if not iv.empty:
            axes[0].plot(iv["t_s"], iv["bps"] / 1e3, lw=1, label=f"{f['id']} ({f['device']})")
            any_iv = True
        sv = intervals(rundir / f"flow.{f['id']}.sender.json", off)
        if not sv.empty and "snd_cwnd" in sv:
            axes[1].plot(sv["t_s"], sv["snd_cwnd"] / 1e3, lw=1, label=f["id"])
    axes[0].set_ylabel("goodput (kb/s)")
    axes[0].set_title("per-flow goodput (iperf3 receiver intervals)")
    axes[1].set_ylabel("sender cwnd (kB)")
    axes[1].set_xlabel("time since t0 (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
        if any_iv:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(rundir / "goodput.png", dpi=110)
    plt.close(fig)
    files.append("goodput.png")

    slots = read_slots(rundir)
    if slots is not None and len(slots) and "t_ns" in slots:
        base = t0_ns if t0_ns is not None else int(slots["t_ns"].iloc[0])
        t = (slots["t_ns"] - base) / 1e9
        bins = np.floor(t / 0.1) * 0.1  # 100 ms averages keep the plots light
        users = [{"name": d["name"], "id": j} for j, d in enumerate(cfg["devices"])]
        # 2. queue per user
        fig, ax = plt.subplots(figsize=(9, 3.5))
        for u in users:
            c = _col(slots, "queue", u)
            if c:
                g = slots[c].groupby(bins).mean()
                ax.plot(g.index, g.values / 1e3, lw=1, label=u["name"])
        ax.set_ylabel("AP queue (kB)")
        ax.set_xlabel("time since t0 (s)")
        ax.set_title("queue per user (100 ms means)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(rundir / "queues.png", dpi=110)
        plt.close(fig)
        files.append("queues.png")
        # 3. CQI and MCS per user
        fig, axes = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
        for u in users:
            c = _col(slots, "cqi", u)
            if c:
                g = slots[c].groupby(bins).mean()
                axes[0].plot(g.index, g.values, lw=0.8, label=u["name"])
            if "mcs" in slots:
                mine = slots["user"] == u["id"]
                g = slots["mcs"][mine].groupby(bins[mine]).mean()
                axes[1].plot(g.index, g.values, ".", ms=2, label=u["name"])
        axes[0].set_ylabel("CQI: SNR dB\n(100 ms mean)")
        axes[1].set_ylabel("MCS when served")
        axes[1].set_xlabel("time since t0 (s)")
        for ax in axes:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(rundir / "cqi_mcs.png", dpi=110)
        plt.close(fig)
        files.append("cqi_mcs.png")

    # 4. CLAMP windows
    if cfg["clamp"]["enabled"]:
        fig, ax = plt.subplots(figsize=(9, 3.8))
        drew = False
        for d in cfg["devices"]:
            try:
                w = pd.read_csv(rundir / f"windows.{d['name']}.csv")
            except (OSError, ValueError, pd.errors.EmptyDataError):
                continue
            if w.empty:
                continue
            base = t0_ns if t0_ns is not None else int(w["t_ns"].iloc[0])
            by_port = {int(p["port"]): p["id"] for p in run.get("flows", [])}
            for fl, g in w.groupby("flow"):
                if len(g) < 20:  # iperf3's control connection: a handful of ACKs
                    continue
                port = fl.rsplit(":", 1)[-1]
                name = by_port.get(int(port), fl) if port.isdigit() else fl
                ax.plot((g["t_ns"] - base) / 1e9, g["advertised_bytes"] / 1e3, lw=0.8,
                        label=f"{name} ({d['name']}): AWND")
                drew = True
        ax.set_ylabel("advertised window (kB)")
        ax.set_xlabel("time since t0 (s)")
        ax.set_title("CLAMP windows (windows.<dev>.csv)")
        ax.grid(alpha=0.3)
        if drew:
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(rundir / "windows.png", dpi=110)
        plt.close(fig)
        files.append("windows.png")

    # 5. per-user bars
    users = summary["users"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.3))
    names = [u["name"] for u in users]
    axes[0].bar(names, [100 * u["slot_fraction"] for u in users])
    axes[0].set_ylabel("slots (%)")
    axes[1].bar(names, [u["mac_throughput_bps"] / 1e3 for u in users], label="MAC")
    axes[1].bar(names, [u["goodput_bps"] / 1e3 for u in users], width=0.5, label="TCP goodput")
    axes[1].set_ylabel("kb/s")
    axes[1].legend(fontsize=8)
    axes[2].bar(names, [u["mean_queue_delay_ms"] or 0 for u in users])
    axes[2].set_ylabel("mean queueing delay (ms)")
    fig.tight_layout()
    fig.savefig(rundir / "users.png", dpi=110)
    plt.close(fig)
    files.append("users.png")
    return files


def compare_plots(outdir: Path, runs) -> list[str]:
    """Across variants: per-flow goodput side by side, and Jain's index (flows, users)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [label for label, _, _ in runs]
    flow_ids = [f["id"] for f in runs[0][1]["flows"]]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 1.3]})
    width = 0.8 / max(1, len(runs))
    x = np.arange(len(flow_ids))
    for k, (label, s, _) in enumerate(runs):
        by_id = {f["id"]: f for f in s["flows"]}
        vals = [by_id[i]["goodput_bps"] / 1e3 if i in by_id else 0 for i in flow_ids]
        axes[0].bar(x + (k - (len(runs) - 1) / 2) * width, vals, width, label=label)
    cfg = runs[0][1]["config"]
    d_of = {s["name"]: s["rtt_ms"] for s in cfg["servers"]}
    labels_x = []
    for f in cfg["flows"]:
        if f["id"] in flow_ids:
            labels_x.append(f"{f['id']}\n{f['device']}, d = {d_of[f['server']]:g} ms")
    axes[0].set_xticks(x)
    axes[0].set_xticklabels(labels_x, fontsize=8)
    axes[0].set_ylabel("goodput (kb/s)")
    axes[0].set_title("per-flow goodput")
    axes[0].legend(fontsize=8)
    axes[0].grid(alpha=0.3, axis="y")
    xj = np.arange(3)
    for k, (label, s, _) in enumerate(runs):
        axes[1].bar(xj + (k - (len(runs) - 1) / 2) * width,
                    [s["jain_index_flows"], s.get("jain_index_flows_fair_share") or 0,
                     s["jain_index_users"]], width, label=label)
    axes[1].set_xticks(xj)
    axes[1].set_xticklabels(["flows", "flows /\nfair share", "users"], fontsize=8)
    axes[1].set_ylim(0, 1.05)
    axes[1].set_title("Jain's index")
    axes[1].grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(Path(outdir) / "compare_flows.png", dpi=110)
    plt.close(fig)
    return ["compare_flows.png"]
