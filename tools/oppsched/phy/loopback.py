"""The sample-level PHY: the abstract PHY's role played by the real gr-oppsched blocks.

    python -m oppsched.phy.loopback --config phy.yaml [--check] [--set key=value ...]

One GNU Radio flowgraph (the same graph as flowgraphs/loopback.grc, for N users):

    mac_grant_source <-> slot_tx (realtime, continuous) -> channel_emulator_cc
        -> output u -> slot_rx(user_id = u) -> rx_indication_sink(rx_<u>)

slot_tx is the clock master (CLOCK_MONOTONIC, the apd's clock); mac_grant_source connects
to the apd's phy_requests / phy_grants; each rx_indication_sink to its client's rx_<id>.
The configuration is the abstract PHY's (docs/daemons.md, "Abstract PHY configuration"),
loaded and validated by oppsched.phy.common, plus a `sample:` section (profile, sample_rate,
t0_s, connect_wait_ms). Differences:

- slot_s is optional: 0 (the default) = the profile's numerology; else it must equal it.
- mcs_table defaults to the measured OFDM table of the profile
  measured at sample.sample_rate (experiments/linkcurves/awgn-<profile>-<rate>msps/
  mcs_table.csv: 1, 5 and 10 Msps) and must be given at any other rate (`oppsched run` derives one: daemonconf.block_mcs_table);
  its bytes per slot must be this PHY's TB sizes at the rate; the apd must use the same.
- error_model, link_curves, shannon, chase_combining, measurement and timing.spin_us are
  ignored: the blocks decode for real (HARQ combining in slot_rx).
- channel.model maps to the emulator's fading model: awgn -> none, jakes -> Jakes (Andrew &
  Hanly, CLAMP), sum_of_sinusoids -> Srinivasan & Baras, eq. 4, trace -> SNR trace replayed
  (no fading).

Uplink slots (the shared medium, apd medium.uplink_decode phy; docs/architecture.md,
"Shared medium"): with `uplink.enabled` slot_tx's second output (the stations' side of the
one slot clock: each uplink slot as its station sends it, the stations' sounding in the
others) feeds a second channel_emulator_cc (one Jakes channel per station, uplink.*: own
mean SNR, Doppler and seed), whose output u goes to an AP-side slot_rx(user_id = u) and an
rx_indication_sink on users[u].uplink_rx (the apd's phy_uplink_rx of that station):

    slot_tx -out1-> channel_emulator_cc(uplink) -> output u -> slot_rx(u) -> apd

Stats (phy.stats.json) from the blocks' getters at exit and on SIGUSR1; SIGTERM/SIGINT stop
the top block, write stats and exit 0. Configuration errors: exit 2, naming field and value.

The pieces the over-the-air PHY (oppsched.phy.uhd) shares with this one are functions here:
load_config (with a schema), connect_grants (the apd bridge), connect_rx (slot_rx and the
client bridge), tx_stats / user_stats and run_until_signal (signals, stats, max_slots).
"""

from __future__ import annotations

import copy
import logging
import signal
import sys
import threading
import time
from pathlib import Path

from gnuradio import gr, oppsched

from oppsched.config import ConfigError, Field
from oppsched.testbed.daemonconf import measured_mcs_table
from oppsched.linkmodel import table_mismatches
from oppsched.names import FECS, PROFILE_ALIASES, PROFILES
from oppsched.phy import common

log = logging.getLogger("oppsched.phy.loopback")


SCHEMA = copy.deepcopy(common.SCHEMA)
SCHEMA["slot_s"] = Field(float, 0.0, min=0.0, max=1.0)  # 0 = the profile's numerology
SCHEMA["mcs_table"] = Field(str, "")  # '' = the measured table of the profile
SCHEMA["sample"] = {
    "profile": Field(str, "evdo", choices=PROFILES, aliases=PROFILE_ALIASES),
    "fec": Field(str, "ldpc", choices=FECS),
    "sample_rate": Field(float, 1e6, min=1e5, max=100e6),
    "t0_s": Field(float, 0.5, min=0.0, max=60.0),
    "connect_wait_ms": Field(int, 1000, min=0, max=600_000),
    "report_effective_snr": Field(bool, True),
}
# Uplink slots through the blocks (the shared medium)
SCHEMA["uplink"] = {
    "enabled": Field(bool, False),
    "mean_snr_db": Field(float, 20.0, min=-100.0, max=100.0),
    "doppler_hz": Field(float, 0.6, min=0.0, max=1e5),
    "seed": Field(int, 1, min=0, max=2**63 - 1),
}
SCHEMA["users"] = copy.deepcopy(SCHEMA["users"])
SCHEMA["users"].schema["uplink_rx"] = Field(str, "", check=common._endpoint)
# IQ capture (oppsched.phy.iqcapture; docs/phy.md, "IQ capture and offline decode")
SCHEMA["capture"] = {
    "iq": Field(bool, False),
    "dir": Field(str, ""),  # '' = RUN_DIR/iq
    "iq_window_start_s": Field(float, 0.0, min=0.0, max=1e6),
    "iq_window_s": Field(float, 10.0, min=0.0, max=1e6),  # 0 = to the end of the run
    "iq_last_s": Field(float, 0.0, min=0.0, max=1e6),  # > 0: only the window's last s
    "iq_trigger": Field(str, "none", choices=("none", "failed")),
    "iq_margin_slots": Field(int, 1, min=0, max=100),
}

# slot_rx's parameters (its defaults), passed explicitly so that a recording's metadata
# names the receiver `oppsched decode` must rebuild.
RX_PARAMS = {"detection_threshold": 0.08, "ltf_threshold": 0.35, "missed_slots": 600,
             "noise_ema": 0.1}


def profile_slot_s(profile: str, sample_rate: float) -> float:
    tx = oppsched.slot_tx(profile, sample_rate, 3, 0.0, True, True)
    return tx.slot_duration()


def load_config(path: str | Path, overrides: list[str] | tuple = (),
                schema: dict | None = None, table: bool = True) -> dict:
    """Loads and validates phy.yaml against `schema` (default: SCHEMA; the UHD PHY passes
    its extension of it) and resolves the profile's slot and (unless `table` is False: the
    caller then calls check_mcs_table after its own checks) the MCS table."""
    cfg, base = common.read_config(path, overrides, SCHEMA if schema is None else schema)
    s = cfg["sample"]
    if not cfg["mcs_table"]:  # the table measured at this rate (check_mcs_table: if any)
        cfg["mcs_table"] = str(measured_mcs_table(s["profile"], s["fec"], s["sample_rate"]))
    if cfg["error_model"] == "curves" and not cfg["link_curves"]:
        cfg["error_model"] = "threshold"  # unused here: the blocks decode for real
    cfg = common.resolve(cfg, base)
    for u in cfg["users"]:
        if cfg["uplink"]["enabled"] and not u["uplink_rx"]:
            u["uplink_rx"] = f"ipc://{cfg['run_dir']}/zmq/uprx_{u['id']}"
    for i, u in enumerate(cfg["users"]):
        ch = u["channel"]
        if ch["model"] == "jakes" and ch["doppler_hz"] is None:
            raise ConfigError(f"users[{i}].channel.doppler_hz: required for model 'jakes'")
    try:
        slot = profile_slot_s(s["profile"], s["sample_rate"])
    except (ValueError, RuntimeError) as exc:
        raise ConfigError(f"sample.sample_rate: {s['sample_rate']!r}: {exc}") from None
    if cfg["slot_s"] and abs(cfg["slot_s"] - slot) > 1e-6:
        raise ConfigError(
            f"slot_s: {cfg['slot_s']!r} differs from profile {s['profile']!r}'s slot "
            f"{slot!r} s at {s['sample_rate']:g} Hz (leave it 0)"
        )
    cfg["slot_s"] = slot
    if cfg["cqi_ahead_slots"]:
        raise ConfigError(
            f"cqi_ahead_slots: {cfg['cqi_ahead_slots']!r}: only the abstract PHY can report an "
            "SNR ahead; this PHY measures the one it receives (leave it 0)"
        )
    if table:
        check_mcs_table(cfg)
    c = cfg["capture"]
    if c["iq_last_s"] and c["iq_trigger"] != "none":
        raise ConfigError(f"capture.iq_last_s: {c['iq_last_s']!r} with iq_trigger "
                          f"{c['iq_trigger']!r}: the last seconds are kept whole")
    return cfg


def check_mcs_table(cfg: dict) -> None:
    """Checks that the MCS table (mcs_table '' resolved by load_config to the one measured
    at sample.sample_rate) loads and gives the PHY's TB sizes at that rate (the apd uses the
    same one). ConfigError naming the field and the value."""
    s = cfg["sample"]
    path = measured_mcs_table(s["profile"], s["fec"], s["sample_rate"])
    if cfg["mcs_table"] == str(path) and not path.is_file():
        raise ConfigError(
            f"mcs_table: '' with sample.sample_rate {s['sample_rate']:g}: no table was "
            f"measured at this rate ({path}); name one for it (`oppsched run` writes one "
            "into the run folder: daemonconf.block_mcs_table)")
    bad = table_mismatches(common.load_mcs_table(cfg), s["profile"], s["sample_rate"], s["fec"])
    if bad:
        raise ConfigError(
            f"mcs_table: {cfg['mcs_table']!r} does not fit profile {s['profile']!r} at "
            f"sample.sample_rate {s['sample_rate']:g} ({s['fec']}): {bad[0]}"
            + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""))


def build_params(cfg: dict):
    s = cfg["sample"]
    users = cfg["users"]
    chans = [u["channel"] for u in users]
    return oppsched.emulator_params(
        sample_rate=s["sample_rate"],
        profile=s["profile"],
        num_users=len(users),
        mean_snr_db=[c["mean_snr_db"] for c in chans],
        fading=[c["model"] for c in chans],  # the emulator's names for the same models
        doppler_hz=[c["doppler_hz"] or 0.0 for c in chans],
        oscillators=[c["oscillators"] for c in chans],
        snr_trace=[c["trace"] for c in chans],
        trace_loop=[c["trace_loop"] for c in chans],
        seed=cfg["seed"],
    )


def build_uplink_params(cfg: dict):
    """The uplink emulator: one Jakes channel per station (uplink.*), seeded apart from the
    downlink's."""
    s, up = cfg["sample"], cfg["uplink"]
    n = len(cfg["users"])
    return oppsched.emulator_params(
        sample_rate=s["sample_rate"],
        profile=s["profile"],
        num_users=n,
        mean_snr_db=[up["mean_snr_db"]] * n,
        fading=["jakes"] * n,
        doppler_hz=[up["doppler_hz"]] * n,
        oscillators=[cfg["users"][0]["channel"]["oscillators"]] * n,
        snr_trace=[""] * n,
        trace_loop=[True] * n,
        seed=up["seed"],
    )


def connect_grants(tb, cfg: dict, tx):
    """A mac_grant_source on the apd's phy_requests/phy_grants, wired to slot_tx `tx`'s
    request/grant message ports in top block `tb`. Returns the bridge."""
    s, z = cfg["sample"], cfg["zmq"]
    grants = oppsched.mac_grant_source(
        cfg["endpoints"]["phy_requests"], cfg["endpoints"]["phy_grants"],
        z["hwm"], z["reconnect_ms"], s["connect_wait_ms"],
    )
    tb.msg_connect(tx, "request", grants, "request")
    tb.msg_connect(grants, "grant", tx, "grant")
    return grants


def connect_rx(tb, cfg: dict, user: dict, src, **rx_kw) -> tuple:
    """slot_rx(user_id) fed from `src` (a block or (block, port)) and its
    rx_indication_sink on the user's `rx` endpoint. `rx_kw` overrides slot_rx's
    parameters (RX_PARAMS; uplink=True for the AP's receiver of a station). Returns
    (slot_rx, sink)."""
    s, z = cfg["sample"], cfg["zmq"]
    rx = oppsched.slot_rx(s["profile"], s["sample_rate"], user["id"], fec=s["fec"],
                          **{**RX_PARAMS, **rx_kw})
    sink = oppsched.rx_indication_sink(
        user["rx"], z["hwm"], s["report_effective_snr"], z["reconnect_ms"],
        s["connect_wait_ms"],
    )
    tb.connect(src, rx)
    tb.msg_connect(rx, "rx", sink, "rx")
    return rx, sink


def tx_stats(tx, g) -> dict:
    """The AP side's counters (slot_tx `tx`, mac_grant_source `g`) for phy.stats.json."""
    return {
        "slots": tx.slots(),
        "empty": tx.empty(),
        "late": tx.late(),
        "tb_sent": tx.tb_sent(),
        "overruns": tx.overruns(),
        "grants": {
            "received": tx.grants_received(),
            "late": tx.grants_late(),
            "duplicate": tx.grants_duplicate(),
            "malformed": tx.grants_malformed() + g.grants_malformed(),
            "wrong_type": g.grants_wrong_type(),
            "overflow": tx.grants_overflow(),
            "seq_lost": g.grants_seq_lost(),
        },
        "requests": {"sent": g.requests_sent(), "dropped": g.requests_dropped()},
    }


def user_stats(u: dict, rx, sink) -> dict:
    """One client receiver's counters (slot_rx `rx`, rx_indication_sink `sink`)."""
    return {
        "id": u["id"],
        "name": u["name"],
        "slots_detected": rx.slots_detected(),
        "slots_missed": rx.slots_missed(),
        "headers_ok": rx.headers_ok(),
        "header_errors": rx.header_errors(),
        "addressed": rx.addressed(),
        "tb_ok": rx.tb_ok(),
        "tb_failed": rx.tb_failed(),
        "bler": rx.bler(),
        "last_snr_db": rx.last_snr_db(),
        "last_cqi": rx.last_cqi(),
        "other_direction": rx.other_direction(),
        "not_own": rx.not_own(),
        "indications_sent": sink.sent(),
        "indications_dropped": sink.dropped(),
    }


def run_until_signal(start, stop, write_stats, slots, max_slots: int) -> None:
    """The PHY process's life (docs/daemons.md, "Signals and lifetime"): installs the
    handlers, calls start(), writes stats on SIGUSR1, returns after SIGTERM/SIGINT or once
    slots() reaches max_slots (0 = never), always calling stop() then write_stats()."""
    stop_ev = threading.Event()
    dump = threading.Event()

    def on_signal(signum, _frame):
        (dump if signum == signal.SIGUSR1 else stop_ev).set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, on_signal)
    start()
    try:
        while not stop_ev.is_set():
            stop_ev.wait(0.1)
            if dump.is_set():
                dump.clear()
                write_stats()
            if max_slots and slots() >= max_slots:
                break
    finally:
        stop()
        write_stats()


class Loopback:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        s = cfg["sample"]
        self.tb = gr.top_block("oppsched_loopback")
        self.tx = oppsched.slot_tx(
            s["profile"], s["sample_rate"], cfg["lead_slots"], s["t0_s"], True, True,
            fec=s["fec"]
        )
        self.grants = connect_grants(self.tb, cfg, self.tx)
        self.emu = oppsched.channel_emulator_cc(build_params(cfg))
        self.tb.connect(self.tx, self.emu)
        self.rx, self.sinks = [], []
        for i, u in enumerate(cfg["users"]):
            rx, sink = connect_rx(self.tb, cfg, u, (self.emu, i))
            self.rx.append(rx)
            self.sinks.append(sink)
        # The stations' side: slot_tx output 1 -> uplink channels -> the AP's receivers.
        self.up_emu, self.up_rx, self.up_sinks = None, [], []
        if cfg["uplink"]["enabled"]:
            self.up_emu = oppsched.channel_emulator_cc(build_uplink_params(cfg))
            self.tb.connect((self.tx, 1), self.up_emu)
            for i, u in enumerate(cfg["users"]):
                rx, sink = connect_rx(self.tb, cfg, {**u, "rx": u["uplink_rx"]},
                                      (self.up_emu, i), uplink=True)
                self.up_rx.append(rx)
                self.up_sinks.append(sink)
        self.iq = []
        if cfg["capture"]["iq"]:
            from oppsched.phy import iqcapture

            for i, (u, rx) in enumerate(zip(cfg["users"], self.rx)):
                ch = u["channel"]
                self.iq.append(iqcapture.attach_rx(
                    self.tb, cfg, u, (self.emu, i), rx, RX_PARAMS,
                    f"oppsched sample PHY: the input of user {u['name']}'s receiver (id "
                    f"{u['id']}), after the channel emulator ({ch['model']}, mean SNR "
                    f"{ch['mean_snr_db']} dB)",
                    "software: gr-oppsched channel_emulator_cc"))

    def start(self) -> None:
        if self.iq:
            from oppsched.phy import iqcapture

            iqcapture.set_t0(self.iq, time.time() + self.cfg["sample"]["t0_s"])
        self.tb.start()

    def stop(self) -> None:
        self.tb.stop()
        self.tb.wait()
        if self.iq:
            from oppsched.phy import iqcapture

            self.iq_stats = iqcapture.close_all(self.iq)

    def stats(self) -> dict:
        return {
            "mode": "sample",
            "profile": self.cfg["sample"]["profile"],
            "fec": self.cfg["sample"]["fec"],
            "sample_rate": self.cfg["sample"]["sample_rate"],
            "slot_s": self.cfg["slot_s"],
            **tx_stats(self.tx, self.grants),
            "users": [user_stats(u, rx, sink)
                      for u, rx, sink in zip(self.cfg["users"], self.rx, self.sinks)],
            **({"uplink": {"tb_sent": self.tx.uplink_tb_sent(),
                           "receivers": [user_stats(u, rx, sink) for u, rx, sink in
                                         zip(self.cfg["users"], self.up_rx, self.up_sinks)]}}
               if self.up_emu is not None else {}),
            **({"iq": getattr(self, "iq_stats", None) or [r.core.stats() for r in self.iq]}
               if self.iq else {}),
        }

    def write_stats(self) -> None:
        common.write_json_atomic(Path(self.cfg["traces"]["stats"]), self.stats())


def main(argv: list[str] | None = None) -> int:
    args = common.parse_args(
        argv, "python -m oppsched.phy.loopback",
        "Sample-level PHY: slot_tx -> channel emulator -> slot_rx per user, bridged to "
        "oppsched-apd and the client agents over ZeroMQ.",
        "phy.yaml (abstract PHY keys + sample:)", "validate the configuration, exit",
        "phy-loopback")
    try:
        cfg = load_config(args.config, args.set)
        params = build_params(cfg)
    except (ConfigError, ValueError) as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{args.config}: ok ({len(cfg['users'])} users, profile "
              f"{cfg['sample']['profile']}, slot {cfg['slot_s'] * 1e3:g} ms, "
              f"mcs_table {cfg['mcs_table']})")
        return 0
    del params
    common.set_rt_priority(cfg["timing"]["rt_priority"])
    lb = Loopback(cfg)

    def start():
        lb.start()
        log.info("running: %d users, profile %s, %g Hz, slot %.3f ms, lead %d",
                 len(cfg["users"]), cfg["sample"]["profile"], cfg["sample"]["sample_rate"],
                 cfg["slot_s"] * 1e3, cfg["lead_slots"])

    run_until_signal(start, lb.stop, lb.write_stats, lb.tx.slots, cfg["max_slots"])
    st = lb.stats()
    log.info("stopped after %d slots (%d empty, %d late)", st["slots"], st["empty"], st["late"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
