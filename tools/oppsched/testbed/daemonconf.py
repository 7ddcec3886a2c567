"""The configuration files of a testbed run's processes, generated in ONE place.

`oppsched run` (kind testbed) writes, into the run folder:

    apd.yaml            oppsched-apd          (docs/daemons.md, "oppsched-apd configuration")
    client.<dev>.yaml   oppsched-client, one per device ("oppsched-client configuration")
    phy.yaml            the PHY               ("Abstract PHY configuration")

from the resolved experiment (oppsched.experiments.testbed.schema) and the run's layout (paths,
ZeroMQ endpoints, addresses). An experiment key a daemon takes unchanged is not copied here
by hand: the layout marks its place MAPPED and fill() (oppsched.testbed.daemon_keys) writes
the value of the key that DAEMON_KEYS maps onto it. Every daemon validates its file strictly
(unknown keys are errors), so the shapes here follow those sections exactly; `extra.apd`,
`extra.client` and `extra.phy` in the experiment are deep-merged last, for a knob the
experiment schema does not model yet.
"""

from __future__ import annotations

import copy
import math
import os
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from oppsched import mac, names, paths, plugin, registry
from oppsched.names import SHANNON_TABLE_DEFAULTS
from oppsched.testbed.daemon_keys import MAPPED, fill

# Andrew & Hanly, CLAMP, §V-D: n = 5 link-layer attempts in the slow-fading scenario (0.6 Hz),
# 15 in the fast-fading one (60 Hz). Between the two we take the fast value from 10 Hz up.
CLAMP_ATTEMPTS_SLOW = names.CLAMP_ATTEMPTS_SLOW_FADING
CLAMP_ATTEMPTS_FAST = names.CLAMP_ATTEMPTS_FAST_FADING
FAST_FADING_HZ = 10.0
# The compact PDU format's largest reordering window (12-bit sequence numbers, pdu.h).
COMPACT_MAX_WINDOW = names.PDU_COMPACT_MAX_WINDOW

# The PHY profiles (docs/architecture.md, "The PHY": 1.667 ms EV-DO; 3 ms, Andrew & Hanly's
# slot), one per numerology profile (gr-oppsched's numerology.h, through oppsched.names). Values
# a profile implies when the experiment leaves them null.
PROFILES = {
    "3ms": {"slot_s": names.PROFILE_SLOT_S["3ms"], "mcs_table": "shannon",
            "error_model": "end_of_slot", "channel_model": "jakes"},
    "evdo": {"slot_s": names.PROFILE_SLOT_S["evdo"], "mcs_table": "evdo",
             "error_model": "threshold", "channel_model": "sum_of_sinusoids"},
}

ZMQ_NAMES = ("phy_requests", "phy_grants", "uplink")
# sun_path holds 108 bytes; leave room for "ipc://" parsing and the longest name.
_IPC_MAX = 100


@dataclass
class User:
    """A client device as the daemons see it: numeric id (the wire `user`), name, addresses."""
    id: int
    name: str
    addr4: str | None
    addr6: str | None
    netns: str = ""


# security.curve: one lab link per client, the AP's end .1 and the client's .2 of
# 10.253.<index>.0/30, the apd's uplink for that client on the AP's end.
LAB_UPLINK_PORT = 5600


def lab_addresses(index: int) -> tuple[str, str]:
    """(AP end, client end) of user `index`'s lab link, without prefix length (/30)."""
    if not 0 <= index < 256:
        raise ValueError(f"lab link of user {index}: at most 256 users")
    return f"10.253.{index}.1", f"10.253.{index}.2"


@dataclass
class Layout:
    """Where a run's files and sockets are."""
    rundir: Path
    zmq_dir: Path
    users: list[User]
    ap_netns: str = ""
    tun: str = "radio0"
    endpoints: dict[str, str] = field(default_factory=dict)
    mcs_table: str = ""  # a CSV both the apd and the PHY read, when the run writes one
    scheduler_plugin: str = ""  # scheduler.kind python/plugin: the plugin's copy in the run folder
    aqm_plugin: str = ""  # aqm.kind python/plugin: the same

    @classmethod
    def make(cls, rundir: Path, users: list[User], scratch: Path | None = None,
             ap_netns: str = "") -> "Layout":
        """ipc endpoints under RUN_DIR/zmq (docs/daemons.md); if that path is too long for
        a Unix socket address, under `scratch`/zmq instead (a short per-run directory)."""
        rundir = Path(rundir).resolve()
        zmq_dir = rundir / "zmq"
        longest = max([len(n) for n in ZMQ_NAMES] + [len(f"uplink_{u.id}") for u in users]) + 1
        if len(str(zmq_dir)) + longest > _IPC_MAX:
            if scratch is None:
                raise ValueError(f"{zmq_dir}: too long for ipc:// socket paths and no scratch "
                                 "directory given")
            zmq_dir = Path(scratch).resolve() / "zmq"
        lay = cls(rundir, zmq_dir, users, ap_netns)
        for n in ZMQ_NAMES:
            lay.endpoints[n] = f"ipc://{zmq_dir}/{n}"
        for u in users:
            lay.endpoints[f"rx_{u.id}"] = f"ipc://{zmq_dir}/rx_{u.id}"
            # Each client's own uplink endpoint: the apd drops a message on it that names
            # another user (docs/daemons.md, "Uplink identity").
            lay.endpoints[f"uplink_{u.id}"] = f"ipc://{zmq_dir}/uplink_{u.id}"
            # The sample PHY's AP-side receiver for station u -> the apd (shared medium).
            lay.endpoints[f"uprx_{u.id}"] = f"ipc://{zmq_dir}/uprx_{u.id}"
            # The apd -> station u's uplink grants (medium.station_queue client).
            lay.endpoints[f"grants_{u.id}"] = f"ipc://{zmq_dir}/grants_{u.id}"
        return lay

    keys_dir: Path | None = None  # RUN_DIR/keys (keys.install) when the run uses keys
    # The run's id (32 hexadecimal digits, drawn afresh for every Layout, that is every run):
    # the apd and the clients derive the integrity tag's keys from it and the testbed key, so
    # a TB recorded in another run never passes (host/include/oppsched/integrity.h).
    integrity_run_id: str = field(default_factory=lambda: secrets.token_hex(16))
    curve: bool = False  # security.curve: the uplinks are tcp:// lab-link endpoints

    def use_curve(self) -> None:
        """security.curve: each user's uplink on its lab link (lab_addresses), CURVE."""
        self.curve = True
        for u in self.users:
            ap_addr, _ = lab_addresses(u.id)
            self.endpoints[f"uplink_{u.id}"] = f"tcp://{ap_addr}:{LAB_UPLINK_PORT}"

    def ipc_path(self, name: str) -> Path:
        return self.zmq_dir / name

    def bound_ipc_paths(self, names: list[str]) -> list[Path]:
        """The socket files of those endpoints that are ipc:// (what a start waits for)."""
        return [self.ipc_path(n) for n in names if self.endpoints[n].startswith("ipc://")]

    def path(self, name: str) -> str:
        return str(self.rundir / name)


# ----------------------------------------------------------------------------------------
# Resolved values that depend on several fields


def _msps(sample_rate: float) -> str:
    return f"{sample_rate / 1e6:g}msps"


def measured_mcs_table(profile: str, fec: str = "ldpc", sample_rate: float = 1e6) -> Path:
    """The OFDM MCS table of a profile and payload FEC measured at `sample_rate`: what
    phy.mode sample's blocks achieve at BLER 0.1 (experiments/linkcurves/awgn-<profile>-
    <rate>msps for LDPC, experiments/linkcurves/conv/awgn-<profile>-<rate>msps for the
    convolutional code; `oppsched linkcurves`). The file exists for the rates in
    measured_rates() only."""
    base = paths.experiments_dir() / "linkcurves"
    if fec == "conv":
        base = base / "conv"
    return base / f"awgn-{profile}-{_msps(sample_rate)}" / "mcs_table.csv"


def measured_rates(profile: str, fec: str = "ldpc") -> list[float]:
    """The sample rates (Hz) with a measured table of the profile and FEC, ascending."""
    base = measured_mcs_table(profile, fec).parent.parent
    out = []
    for d in base.glob(f"awgn-{profile}-*msps"):
        try:
            rate = float(d.name[len(f"awgn-{profile}-"):-len("msps")]) * 1e6
        except ValueError:
            continue
        if (d / "mcs_table.csv").is_file():
            out.append(rate)
    return sorted(out)


def mcs_table_source(profile: str, fec: str, sample_rate: float) -> tuple[Path, float]:
    """(measured table, its rate) whose SNR thresholds hold at `sample_rate`: the one
    measured at that rate; else the one at the lowest measured rate above it (a TB at a
    higher rate has more LDPC codewords, any of which fails it, so its thresholds are the
    same or higher: an upper bound); above the highest measured rate, the highest
    (thresholds then a little low: docs/phy.md, "Sample rate")."""
    rates = measured_rates(profile, fec) or [1e6]
    above = [r for r in rates if r >= sample_rate]
    rate = above[0] if above else rates[-1]
    return measured_mcs_table(profile, fec, rate), rate


# The PHY modes that run the gr-oppsched blocks (the profile's numerology, real decoding).
BLOCK_MODES = ("sample", "uhd")


def slot_s(cfg: dict) -> float:
    """phy.mode sample/uhd: always the profile's numerology (slot_tx's slot: 1.667 / 3 ms)."""
    if cfg["phy"]["mode"] in BLOCK_MODES:
        return PROFILES[cfg["phy"]["profile"]]["slot_s"]
    return cfg["phy"]["slot_s"] or PROFILES[cfg["phy"]["profile"]]["slot_s"]


def block_sample_rate(cfg: dict) -> float:
    """The complex sample rate of the blocks: phy.sample.sample_rate (mode sample) or
    phy.uhd.sample_rate (mode uhd)."""
    p = cfg["phy"]
    return float(p["uhd"]["sample_rate"] if p["mode"] == "uhd" else p["sample"]["sample_rate"])


def block_mcs_table(cfg: dict) -> str | None:
    """phy.mode sample/uhd at a rate with no measured table: the CSV text of the profile's
    MCS table at the blocks' rate (linkmodel.table_at_rate: the SNR thresholds of
    mcs_table_source, the TB sizes at this rate), which write_all puts into the run folder
    as mcs_table.csv for both the apd and the PHY. None when the rate has a measured table
    (that table itself, mcs_table())."""
    if cfg["phy"]["mode"] not in BLOCK_MODES:
        return None
    from oppsched import linkmodel  # the PHY bindings; only the block modes need them

    p = cfg["phy"]
    rate = block_sample_rate(cfg)
    src, src_rate = mcs_table_source(p["profile"], p["fec"], rate)
    if src_rate == rate:
        return None
    return linkmodel.table_at_rate(src, p["profile"], rate, p["fec"], src_rate)


def mcs_table(cfg: dict) -> str:
    """A preset name, or the absolute path of a CSV table (phy.mode sample: the measured
    OFDM table of the profile; uhd too; at another sample rate write_all writes the run
    folder's mcs_table.csv, block_mcs_table)."""
    if cfg["phy"]["mode"] in BLOCK_MODES:
        return str(mcs_table_source(cfg["phy"]["profile"], cfg["phy"]["fec"],
                                    block_sample_rate(cfg))[0])
    t = cfg["phy"]["mcs_table"] or PROFILES[cfg["phy"]["profile"]]["mcs_table"]
    return str(paths.data_file(t)) if t.endswith(".csv") else t


def error_model(cfg: dict) -> str:
    return cfg["phy"]["error_model"] or PROFILES[cfg["phy"]["profile"]]["error_model"]


def channel_model(cfg: dict, dev: dict) -> str:
    return dev["channel"]["model"] or PROFILES[cfg["phy"]["profile"]]["channel_model"]


def max_transmissions(cfg: dict) -> int:
    """harq.max_transmissions, or the n of Andrew & Hanly, CLAMP, §V-D: 15 with fast fading,
    5 with slow."""
    n = cfg["harq"]["max_transmissions"]
    if n is not None:
        return n
    fastest = max(d["channel"]["doppler_hz"] for d in cfg["devices"])
    return CLAMP_ATTEMPTS_FAST if fastest >= FAST_FADING_HZ else CLAMP_ATTEMPTS_SLOW


def device_limit_bytes(cfg: dict, dev: dict) -> int:
    v = dev["queue"]["limit_bytes"]
    return cfg["queue"]["limit_bytes"] if v is None else v


# The longest the client holds a gap while a TB it NACKed may still be retransmitted, with
# scheduler.harq_first false (reassembly.held_timeout_ms null): a safety bound, reached only
# when the AP drops a NACKed TB without the client seeing it (its feedback timed out, a flush)
# and does not use that HARQ process again. Three times the longest wait of a retransmission
# for the scheduler seen in the Srinivasan & Baras set-up (640 ms, PF alpha 0.001, 15 s).
HELD_TIMEOUT_MS = 2000.0


def reassembly(cfg: dict) -> dict:
    """The client's reassembly settings. A gap in the PDU sequence is a TB still in HARQ
    (or lost after max_transmissions, Andrew & Hanly, CLAMP, §V-B: "all packets which would
    have been completed by that transmission are dropped"); giving up earlier delivers later
    packets past it, which TCP takes for losses (duplicate ACKs, halved windows) although nothing
    was lost, and the TB, when HARQ gets it through, arrives too late (reassembly.tbs_late).
    With retransmissions first (scheduler.harq_first true) every transmission costs at most
    one HARQ round trip, lead_slots + 3 slots (the request lead, the slot on air, its feedback
    and the next grant), plus the uplink delay: the timeout waits that long for each of
    max_transmissions.

    With harq_first false a retransmission waits for the scheduler to choose its user again,
    which at a small PF alpha takes hundreds of ms (640 ms seen at alpha 0.001): no timeout
    derived from HARQ's timing covers it, and no loss report reaches the client (the AP tells
    it nothing of the TBs it drops). So the client follows HARQ itself (client_core.h): a TB
    it NACKed is pending until it decodes, the AP sends a new TB on its process (new NDI), or
    it has been NACKed max_transmissions times (the AP dropped it); while one such TB predates
    the PDU waiting behind a gap, the gap is held for held_timeout_ms (HELD_TIMEOUT_MS, a
    safety bound), otherwise given up after timeout_ms as before."""
    r = cfg["reassembly"]
    s = slot_s(cfg)
    rtt_slots = cfg["phy"]["lead_slots"] + 3
    harq_s = max_transmissions(cfg) * rtt_slots * s + cfg["uplink_delay_ms"] / 1e3
    out = {"timeout_ms": r["timeout_ms"] if r["timeout_ms"] is not None
           else round(1e3 * harq_s, 3),
           "window": r["window"] if r["window"] is not None
           else max(64, 2 * max_transmissions(cfg) * rtt_slots)}
    held = r["held_timeout_ms"]
    if held is None:
        held = 0.0 if cfg["scheduler"]["harq_first"] else HELD_TIMEOUT_MS
    if held:
        out["held_timeout_ms"] = max(float(held), float(out["timeout_ms"]))
        out["harq_max_transmissions"] = max_transmissions(cfg)
    if cfg["pdu"]["format"] == "compact":  # 12-bit sequence numbers (pdu.h): 2048 at most
        out["window"] = min(out["window"], COMPACT_MAX_WINDOW)
    return out


def user_seed(cfg: dict, index: int) -> int:
    """One independent seed per user's channel (and the PHY's error draws), from the run seed."""
    return int(cfg["seed"]) * 1000 + 17 * index + 1


def deep_merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (extra or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _scheduler(cfg: dict, lay: Layout) -> dict:
    s = cfg["scheduler"]
    # the kind's parameters by their registered names, as the apd reads them (sched.h)
    out = {"kind": s["kind"], **copy.deepcopy(registry.scheduler_params(s)),
           "harq_first": MAPPED}
    if s["kind"] == plugin.PYTHON_KIND:
        out["file"] = lay.scheduler_plugin or str(Path(s["file"]).resolve())
    if s["kind"] == plugin.CPP_KIND:
        out["library"] = lay.scheduler_plugin or str(Path(s["library"]).resolve())
    return out


def priority_dscp(cfg: dict) -> int | None:
    """aqm.priority_dscp, null resolved: tcp.spm_marking.dscp when the senders mark, else
    None (no packet is high priority)."""
    d = cfg["aqm"].get("priority_dscp")
    if d is not None:
        return int(d)
    m = cfg["tcp"].get("spm_marking", {})
    return int(m["dscp"]) if m.get("enabled") else None


def _aqm(cfg: dict, lay: Layout) -> dict:
    a = cfg["aqm"]
    out = {"kind": a["kind"], "ecn": MAPPED, "spare_handshake": MAPPED,
           "mark_not_ect": MAPPED,
           "params": dict(a["params"]),
           "priority_dscp": priority_dscp(cfg)}
    if a["kind"] == plugin.PYTHON_KIND:
        out["file"] = lay.aqm_plugin or str(Path(a["file"]).resolve())
        out["class"] = a["class"]
    if a["kind"] == plugin.CPP_KIND:
        out["library"] = lay.aqm_plugin or str(Path(a["library"]).resolve())
    return out


# ----------------------------------------------------------------------------------------
# The three files


def chase_combining(cfg: dict) -> bool:
    """phy.chase_combining, null resolved: on, except in link_adaptation.mode paper."""
    c = cfg["phy"]["chase_combining"]
    return (cfg["link_adaptation"]["mode"] != "paper") if c is None else bool(c)


def cqi_ahead_slots(cfg: dict) -> int:
    """How far ahead the abstract PHY reports the SNR in link_adaptation.mode paper: far
    enough that the report for slot n has reached the apd when it answers slot_request(n),
    sent lead_slots before the slot. The report of slot k leaves the PHY at the end of slot
    k, reaches the client at once and the apd after the uplink delay, so the one for slot n
    (sent in slot n - ahead) is there by the start of slot n - lead_slots when ahead >=
    lead_slots + 1 + the uplink delay in whole slots; one slot more absorbs jitter. 0 in
    mode table (the report is the slot's own SNR)."""
    if cfg["link_adaptation"]["mode"] != "paper":
        return 0
    uplink_slots = math.ceil(cfg["uplink_delay_ms"] * 1e-3 / slot_s(cfg) - 1e-9)
    return cfg["phy"]["lead_slots"] + 2 + uplink_slots


def _link_adaptation(cfg: dict, lay: Layout) -> dict:
    la = cfg["link_adaptation"]
    out = {"table": lay.mcs_table or mcs_table(cfg), "mode": MAPPED, "olla": MAPPED,
           "target_bler": MAPPED}
    if la["mode"] == "paper":
        t = cfg["phy"]["shannon_table"]
        out["shannon"] = {"w0_hz": t["w0_hz"], "cmax_bps": t["cmax_bps"], "levels": t["levels"]}
        out["paper"] = {**la["paper"], "cqi_ahead_slots": cqi_ahead_slots(cfg)}
    return out


def _mac_pcap(cfg: dict, lay: Layout, name: str) -> dict:
    """The daemons' MAC capture keys (capture.mac): none when it is off."""
    cap = cfg["capture"]
    if not cap.get("mac"):
        return {}
    return {"mac_pcap": lay.path(name), "mac_pcap_max_bytes": MAPPED}


def keys_dir(lay: Layout) -> Path:
    """Where the daemons read the run's keys: RUN_DIR/keys unless keys.install said otherwise
    (the runner installs them before it writes the daemons' files)."""
    return lay.keys_dir if lay.keys_dir is not None else lay.rundir / "keys"


def apd_config(cfg: dict, lay: Layout) -> dict:
    users = []
    for u in lay.users:
        addrs = [a for a in (u.addr4, u.addr6) if a]
        entry = {"id": u.id, "name": u.name, "addresses": addrs,
                 "uplink": lay.endpoints[f"uplink_{u.id}"],
                 "queue_limit_bytes": MAPPED}  # null: left out, queue.limit_bytes applies
        if lay.curve:
            entry["curve_public_key_file"] = str(keys_dir(lay) / f"{u.name}.public")
        if uplink_through_phy(cfg):
            entry["phy_uplink_rx"] = lay.endpoints[f"uprx_{u.id}"]
        if station_queue_at_client(cfg):
            entry["grants"] = lay.endpoints[f"grants_{u.id}"]
        users.append(entry)
    conf = {
        "tun": lay.tun,
        "slot_s": slot_s(cfg),
        "lead_slots": MAPPED,
        "endpoints": {n: lay.endpoints[n] for n in ZMQ_NAMES},
        "users": users,
        "queue": {"mode": MAPPED, "limit_bytes": MAPPED, "limit_packets": MAPPED},
        "aqm": _aqm(cfg, lay),
        "scheduler": _scheduler(cfg, lay),
        "harq": {"processes": MAPPED, "max_transmissions": max_transmissions(cfg),
                 "feedback_timeout_slots": MAPPED},
        "link_adaptation": _link_adaptation(cfg, lay),
        "pdu": {"format": MAPPED},
        "clamp": {"enabled": MAPPED, "a_bytes": MAPPED, "b": MAPPED, "ema_rate_per_s": MAPPED,
                  "mu_c": MAPPED},
        "traces": {"slots": lay.path("slots.csv"),
                   "packets": lay.path("packets.csv") if cfg["traces"]["packets"] else "",
                   "stats": lay.path("apd.stats.json"),
                   **_mac_pcap(cfg, lay, "mac-ap.pcap")},
        "seed": int(cfg["seed"]),
    }
    if lay.curve:
        conf["curve"] = {"secret_key_file": str(keys_dir(lay) / "apd.secret")}
    if cfg["pdu"].get("integrity_tag"):
        conf["pdu"]["integrity_key_file"] = str(keys_dir(lay) / "integrity.key")
        conf["pdu"]["integrity_run_id"] = lay.integrity_run_id
    md = cfg.get("medium", {}).get("mode", "none")
    if md != "none":
        conf["medium"] = _medium(cfg)
        conf["traces"]["medium"] = lay.path("medium.csv")
    if "watchdog" in cfg:  # testbed experiments (docs/testbed.md "Reliability")
        conf.update(watchdog_slots=MAPPED, client_watchdog_slots=MAPPED, stats_period_s=MAPPED)
    if "security" in cfg:
        conf["seccomp"] = MAPPED
    return deep_merge(fill(conf, cfg, "apd"), cfg["extra"]["apd"])


def uplink_through_phy(cfg: dict) -> bool:
    """Whether uplink slots go through the PHY's blocks (medium.mode != none with
    phy.mode sample, or uhd: over the air): the apd's medium.uplink_decode phy. The
    abstract PHY's runs keep the apd's threshold model (uplink_decode model)."""
    return cfg.get("medium", {}).get("mode", "none") != "none" and \
        cfg["phy"]["mode"] in BLOCK_MODES


def station_queue_at_client(cfg: dict) -> bool:
    """Whether each client daemon holds its station's uplink queue (medium.station_queue
    client, with a medium): buffer status reports up, uplink grants down."""
    m = cfg.get("medium", {})
    return m.get("mode", "none") != "none" and m.get("station_queue", "ap") == "client"


def uplink_channel(cfg: dict) -> tuple[float, float]:
    """The uplink channels' (mean SNR dB, Doppler Hz): medium.uplink_*, null resolved to
    the mean of the devices' downlink statistics."""
    m = cfg["medium"]
    chans = [d["channel"] for d in cfg["devices"]]
    snr = m["uplink_mean_snr_db"]
    if snr is None:
        snr = sum(c["mean_snr_db"] for c in chans) / len(chans)
    dop = m["uplink_doppler_hz"]
    if dop is None:
        dop = sum(c["doppler_hz"] for c in chans) / len(chans)
    return float(snr), float(dop)


def _medium(cfg: dict) -> dict:
    """The apd's `medium` section: the uplink channels default to the devices' downlink
    statistics (their mean)."""
    snr, dop = uplink_channel(cfg)
    return {"mode": MAPPED, "station_buffer_packets": MAPPED,
            "uplink_mean_snr_db": snr, "uplink_doppler_hz": dop,
            "max_transmissions": max_transmissions(cfg),
            "uplink_decode": "phy" if uplink_through_phy(cfg) else "model",
            "station_queue": MAPPED}


def client_config(cfg: dict, lay: Layout, user: User) -> dict:
    conf = {
        "user": user.id,
        "name": user.name,
        "tun": lay.tun,
        "endpoints": {"rx": lay.endpoints[f"rx_{user.id}"],
                      "uplink": lay.endpoints[f"uplink_{user.id}"]},
        "uplink_delay_ms": MAPPED,
        "cqi": {"period_slots": MAPPED},
        "reassembly": {**reassembly(cfg), "max_bytes": MAPPED},  # null: the client's default
        # its own draws per device, apart from the channel's (user_seed)
        "residual_loss": {"probability": MAPPED, "seed": user_seed(cfg, user.id) + 7},
        "clamp": {k: MAPPED for k in ("enabled", "tau_bytes", "alpha_packets", "beta",
                                      "max_increase_bytes", "min_window_bytes",
                                      "slow_start_threshold_bytes", "mu_min_span_s")},
        "traces": {"windows": lay.path(f"windows.{user.name}.csv")
                   if cfg["clamp"]["enabled"] else "",
                   "stats": lay.path(f"client.{user.name}.stats.json"),
                   **_mac_pcap(cfg, lay, f"mac-client.{user.name}.pcap")},
    }
    if lay.curve:
        conf["curve"] = {"secret_key_file": str(keys_dir(lay) / f"{user.name}.secret"),
                         "server_public_key_file": str(keys_dir(lay) / "apd.public")}
    if station_queue_at_client(cfg):
        conf["endpoints"]["grants"] = lay.endpoints[f"grants_{user.id}"]
        conf["station"] = {"enabled": True, "buffer_packets": MAPPED, "pdu_format": MAPPED,
                           "status_period_ms": MAPPED}
    if cfg["pdu"].get("integrity_tag"):
        conf["integrity_key_file"] = str(keys_dir(lay) / "integrity.key")
        conf["integrity_run_id"] = lay.integrity_run_id
    if "security" in cfg:
        conf["seccomp"] = MAPPED
    return deep_merge(fill(conf, cfg, "client"), cfg["extra"]["client"])


def phy_config(cfg: dict, lay: Layout) -> dict:
    """phy.yaml of the abstract PHY (python -m oppsched.phy.abstract; docs/daemons.md,
    "Abstract PHY configuration")."""
    p = cfg["phy"]
    users = []
    for u, dev in zip(lay.users, cfg["devices"]):
        ch = dev["channel"]
        channel = {"model": channel_model(cfg, dev), "mean_snr_db": ch["mean_snr_db"],
                   "doppler_hz": ch["doppler_hz"], "seed": user_seed(cfg, u.id)}
        if ch.get("trace"):
            channel["trace"] = str(paths.data_file(ch["trace"]))
        users.append({"id": u.id, "name": u.name, "rx": lay.endpoints[f"rx_{u.id}"],
                      "channel": channel})
    conf = {
        "slot_s": slot_s(cfg),
        "lead_slots": p["lead_slots"],
        "seed": int(cfg["seed"]),
        "run_dir": str(lay.rundir),
        "endpoints": {"phy_requests": lay.endpoints["phy_requests"],
                      "phy_grants": lay.endpoints["phy_grants"]},
        "users": users,
        "error_model": error_model(cfg),
        "mcs_table": lay.mcs_table or mcs_table(cfg),
        "shannon": dict(p["shannon_table"]),
        "chase_combining": chase_combining(cfg),
        "cqi_ahead_slots": cqi_ahead_slots(cfg),
        "traces": {"stats": lay.path("phy.stats.json"),
                   "slots": lay.path("phy_slots.csv") if p["slot_trace"] else ""},
    }
    if p["link_curves"]:
        conf["link_curves"] = str(paths.data_file(p["link_curves"]))
    if p["mode"] in BLOCK_MODES:
        # python -m oppsched.phy.loopback: the same keys plus `sample:`; the blocks decode
        # for real, so the error model and link curves do not apply.
        conf["sample"] = {"profile": p["profile"], "fec": p["fec"],
                          "sample_rate": block_sample_rate(cfg)}
        conf["error_model"] = "threshold"
        conf.pop("link_curves", None)
        if uplink_through_phy(cfg):
            # the shared medium's uplink slots through the blocks (loopback.py, "Uplink")
            snr, dop = uplink_channel(cfg)
            conf["uplink"] = {"enabled": True, "mean_snr_db": snr, "doppler_hz": dop,
                              "seed": int(cfg["seed"]) * 1000 + 500}
            for pu, u in zip(users, lay.users):
                pu["uplink_rx"] = lay.endpoints[f"uprx_{u.id}"]
        c = cfg["capture"]
        if c["iq"]:  # oppsched.phy.iqcapture
            conf["capture"] = {"iq": True, "dir": lay.path("iq"),
                               **{k: c[k] for k in ("iq_window_start_s", "iq_window_s",
                                                    "iq_last_s", "iq_trigger",
                                                    "iq_margin_slots")}}
    if p["mode"] == "uhd":
        # python -m oppsched.phy.uhd: the loopback's file plus the radios; `origin` makes
        # the PHY's messages name the experiment's fields (phy.uhd.ap.args, ...).
        # Each radio names its device profile (its own, else phy.uhd.device).
        u = p["uhd"]
        conf["uhd"] = {"ap": {**u["ap"], "device": u["ap"]["device"] or u["device"],
                              "origin": "phy.uhd.ap"}}
        for i, (pu, dev) in enumerate(zip(users, cfg["devices"])):
            pu["uhd"] = {**dev["uhd"], "device": dev["uhd"]["device"] or u["device"],
                         "origin": f"devices[{i}].uhd"}
    return deep_merge(conf, cfg["extra"]["phy"])


def write_all(cfg: dict, lay: Layout) -> dict[str, Path]:
    """Writes apd.yaml, client.<dev>.yaml and phy.yaml into the run folder; returns
    {"apd": path, "client.<dev>": path, "phy": path}."""
    out = {}
    if mcs_table(cfg) == "shannon" and cfg["phy"]["mode"] not in BLOCK_MODES and \
            cfg["phy"]["shannon_table"] != SHANNON_TABLE_DEFAULTS:
        # The apd's `shannon` preset is eq. 18 at the paper's W0 and C_max; other values go
        # to both through one CSV, so that grant.mcs means the same rate on both sides.
        t = cfg["phy"]["shannon_table"]
        path = lay.rundir / "mcs_table.csv"
        path.write_text(mac.mcs_table.shannon(t["w0_hz"], t["cmax_bps"], t["levels"]).to_csv())
        lay.mcs_table = str(path)
    block_table = block_mcs_table(cfg)
    if block_table is not None:
        # the blocks at another rate than the measured table's: its thresholds with this
        # rate's TB sizes, one file the apd and the PHY both read (the PHY checks the sizes)
        path = lay.rundir / "mcs_table.csv"
        path.write_text(block_table)
        lay.mcs_table = str(path)

    def dump(name: str, data: dict) -> Path:
        path = lay.rundir / name
        tmp = path.with_suffix(".tmp")
        tmp.write_text("# written by oppsched run (tools/oppsched/testbed/daemonconf.py)\n"
                       + yaml.safe_dump(data, sort_keys=False, default_flow_style=False))
        os.replace(tmp, path)
        return path

    for section in ("scheduler", "aqm"):
        kind = cfg[section]["kind"]
        if kind not in plugin.PLUGIN_KINDS:
            continue
        # The plugin runs from a copy in the run folder: the record of what ran, readable by
        # the apd's user whatever the original's folder allows (docs/extending.md). A
        # library's copy is plugin.<name>.so.
        src = Path(cfg[section]["library" if kind == plugin.CPP_KIND else "file"])
        name = src.name if kind == plugin.PYTHON_KIND or src.suffix == ".so" else f"{src.name}.so"
        path = lay.rundir / f"plugin.{name}"
        shutil.copyfile(src, path)
        path.chmod(0o755 if kind == plugin.CPP_KIND else 0o644)
        setattr(lay, f"{section}_plugin", str(path))
    out["apd"] = dump("apd.yaml", apd_config(cfg, lay))
    for u in lay.users:
        out[f"client.{u.name}"] = dump(f"client.{u.name}.yaml", client_config(cfg, lay, u))
    out["phy"] = dump("phy.yaml", phy_config(cfg, lay))
    return out
