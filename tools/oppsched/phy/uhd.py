"""The over-the-air PHY: the loopback's AP TX and client RX flowgraphs on USRPs.

    python -m oppsched.phy.uhd --config phy.yaml [--check] [--set key=value ...]

One process, one GNU Radio top block per radio (the graphs of flowgraphs/ap_tx_uhd.grc and
flowgraphs/client_rx_uhd.grc):

    AP:          mac_grant_source <-> slot_tx (burst mode) -> backoff -> uhd.usrp_sink
                                                                            (uhd.ap)
    client u:    uhd.usrp_source (users[u].uhd) -> slot_rx(user_id = u) -> rx_indication_sink

With uplink slots (uplink.enabled: the shared medium over the air, TDD; flowgraphs/
tdd_uhd.grc), every radio both sends and receives, each in its own slots:

    slot_tx out 0 -> slot_gate(-1) -> backoff -> uhd.usrp_sink (uhd.ap)    the AP's slots
    slot_tx out 1 -> slot_gate(u) -> backoff -> uhd.usrp_sink (users[u].uhd)  station u's
    uhd.usrp_source (uhd.ap) -> slot_rx(u, uplink, own slots only) -> rx_indication_sink
                                                                   (users[u].uplink_rx)

The station's TB reaches its radio's framer through the apd (its uplink grant to the PHY,
as with the sample PHY): every radio hangs off this one host. The AP's radio is silent in
uplink slots and a station's sends only its own. Each radio's second direction has its own
gain and port (uhd.ap.rx_gain_db / rx_antenna, users[u].uhd.tx_gain_db / tx_antenna), and
every radio must take its time from a common PPS (time_source external, gpsdo or mimo):
the device times are set at one PPS edge, so a station's burst leaves at the AP's
tx_time. The clients' receivers then report no missed slots (the AP is silent in uplink
slots: a missing slot is no fade), and the AP's receivers only their station's slots.
uplink.mean_snr_db / doppler_hz (the emulator's) do not apply.

backoff: each transmitting radio's samples scaled by 10^(-tx_backoff_db/20) (10 dB by
default): slot_tx's OFDM has unit mean power and UHD's fc32 full scale is 1.0, so unscaled
a third of the I and Q values would clip in the radio's conversion to sc16.
The daemon-facing side is the loopback's, built by the same functions
(oppsched.phy.loopback: connect_grants, connect_rx, tx_stats, user_stats,
run_until_signal): the same ZeroMQ endpoints and messages (phy_requests / phy_grants to
the apd, rx_<id> to each client), the same phy.stats.json (at exit and on SIGUSR1), the
same lifetime (SIGTERM/SIGINT: stop, write stats, exit 0). The file is the loopback's
(abstract PHY keys + `sample:`; sample.t0_s is not used) plus `uhd.ap` and `users[i].uhd`
(RADIO_AP / RADIO_CLIENT below).

Slot clock. The AP radio paces the stream. At start the AP device's time is set to a whole
second T of the host's CLOCK_MONOTONIC (set_time_now; with an external or GPSDO time
source at the next PPS), so the air times the apd sees are on its own clock, as with the
loopback; slot n is a timed burst (tx_time, tx_sob, tx_eob from slot_tx in burst mode) at
device time T + uhd.ap.start_delay_s + n T_slot. start_delay_s (the lead) must cover what
follows the time setting: building the AP graph and starting every flowgraph. The client
radios need no time: slot_rx finds the slots by their preamble.

Device profiles. Every radio names its profile (`device`: firmware/profiles/<name>.yaml,
oppsched.phy.devices); load_config refuses a sample rate, frequency, gain, antenna or clock/time
source outside it (exit 2 naming the field and the value) before any radio is opened. The
AP profile's tx_lead_s sets how far slot_tx runs ahead of the radio: its output buffer holds
at least tx_lead_s x sample rate samples (tx_buffer_samples), so that every timed burst
reaches UHD at least that long before its tx_time.

Order of work: configuration (exit 2 naming field and value), then, before anything else is
created, uhd.find_devices with every radio's args: a radio missing (or args matching more
than one device) is exit 1 with "<field>.args '<args>': no UHD device found". A field is
named by the radio's `origin` (the runner sets it to the experiment's field, e.g.
phy.uhd.ap / devices[0].uhd; by default its key in this file).
"""

from __future__ import annotations

import copy
import logging
import math
import sys
import time
from pathlib import Path

from gnuradio import gr, oppsched

from oppsched.phy import devices
from oppsched.config import ConfigError, Field, ListOf
from oppsched.phy import loopback
from oppsched.phy.common import parse_args, set_rt_priority, write_json_atomic
from oppsched.phy.radio import (RADIO_AP, RADIO_CLIENT, SECOND_DIRECTION, check_common_time,
                                check_radio_args, whole_hz)

log = logging.getLogger("oppsched.phy.uhd")

# slot_tx's output buffer in burst mode: generation stays close to air time (ap_tx_uhd.grc).
TX_MAX_OUTPUT_BUFFER = 4096

_ORIGIN = {"origin": Field(str, "", doc="the field named in messages; '' = its key here")}

SCHEMA = copy.deepcopy(loopback.SCHEMA)
SCHEMA["users"] = ListOf({**SCHEMA["users"].schema, "uhd": {**RADIO_CLIENT, **_ORIGIN}},
                         min_len=SCHEMA["users"].min_len)
SCHEMA["uhd"] = {"ap": {**RADIO_AP, **_ORIGIN}}


class RadioError(RuntimeError):
    """A radio is missing or cannot be set up; the message names the field and the args."""


def radios(cfg: dict) -> list[tuple[str, dict]]:
    """(field named in messages, settings) of every radio: the AP, then each user's."""
    return [(cfg["uhd"]["ap"]["origin"], cfg["uhd"]["ap"])] + [
        (u["uhd"]["origin"], u["uhd"]) for u in cfg["users"]]


def load_config(path: str | Path, overrides: list[str] | tuple = ()) -> dict:
    """The loopback's configuration (same loader) plus the radios; ConfigError naming the
    field and value."""
    cfg = loopback.load_config(path, overrides, schema=SCHEMA, table=False)
    fs = cfg["sample"]["sample_rate"]
    if whole_hz(fs):
        raise ConfigError(f"sample.sample_rate: {fs!r} {whole_hz(fs)}")
    ap = cfg["uhd"]["ap"]
    ap["origin"] = ap["origin"] or "uhd.ap"
    for i, u in enumerate(cfg["users"]):
        r = u["uhd"]
        r["origin"] = r["origin"] or f"users[{i}].uhd"
        if r["freq_hz"] is None:
            r["freq_hz"] = ap["freq_hz"]
    check_radio_args(radios(cfg))
    if cfg["uplink"]["enabled"]:
        check_common_time(radios(cfg), " with uplink.enabled")
    check_profiles(cfg)
    loopback.check_mcs_table(cfg)  # after the radios: a rate no radio has comes first
    return cfg


def check_profiles(cfg: dict) -> None:
    """Every radio names its device profile (firmware/profiles) and its settings are within
    it: sample rate, frequency, gain, antenna, clock and time source. ConfigError naming
    the field and the value; no radio is opened before this passes."""
    fs = cfg["sample"]["sample_rate"]
    for i, (origin, r) in enumerate(radios(cfg)):
        if not r["device"]:
            raise ConfigError(f"{origin}.device: required (the radio's profile, one of "
                              f"{', '.join(devices.profiles())}: firmware/profiles)")
        p = devices.profile(r["device"], f"{origin}.device")
        check = devices.check_radio_both_ways if cfg["uplink"]["enabled"] else devices.check_radio
        check(p, r, fs, "tx" if i == 0 else "rx", origin)


def ap_profile(cfg: dict) -> dict:
    """The AP radio's device profile."""
    return devices.profile(cfg["uhd"]["ap"]["device"], f"{cfg['uhd']['ap']['origin']}.device")


# ----------------------------------------------------------------------------------------
# Devices


def find_devices(args: str) -> list[str]:
    """uhd.find_devices(args) as strings. GNU Radio 3.10.5's pythonised find_devices calls
    a find_devices_raw its module does not have; the binding underneath is uhd.find."""
    from gnuradio import uhd

    addr = uhd.device_addr(args)
    try:
        found = list(uhd.find_devices(addr))
    except AttributeError:
        found = list(uhd.find(addr))
    return [a.to_string() for a in found]


def check_radios(cfg: dict, find=find_devices) -> None:
    """Every radio's args must match exactly one device; RadioError naming the field."""
    for origin, r in radios(cfg):
        found = find(r["args"])
        if not found:
            raise RadioError(f"{origin}.args {r['args']!r}: no UHD device found "
                             f"(uhd_find_devices --args '{r['args']}' lists what UHD sees)")
        if len(found) > 1:
            raise RadioError(f"{origin}.args {r['args']!r}: {len(found)} UHD devices match "
                             f"({'; '.join(found)}); add serial=... to pick one")


def configure_radio(usrp, origin: str, r: dict, fs: float,
                    keys: tuple[str, str] = ("gain_db", "antenna")) -> None:
    """Clock/time source, sample rate (checked), frequency, gain, antenna, bandwidth.
    `keys`: the (gain, antenna) settings of this direction (SECOND_DIRECTION for a radio's
    second one)."""
    if r["clock_source"]:
        usrp.set_clock_source(r["clock_source"], 0)
    if r["time_source"]:
        usrp.set_time_source(r["time_source"], 0)
    usrp.set_samp_rate(fs)
    got = usrp.get_samp_rate()
    if abs(got - fs) > 1e-9 * fs:
        raise RadioError(f"{origin}.args {r['args']!r}: the device runs at {got!r} Hz, not "
                         f"sample.sample_rate {fs!r} (set master_clock_rate in the args)")
    usrp.set_center_freq(r["freq_hz"], 0)
    usrp.set_gain(r[keys[0]], 0)
    usrp.set_antenna(r[keys[1]], 0)
    if r["bandwidth_hz"]:
        usrp.set_bandwidth(r["bandwidth_hz"], 0)


def set_device_time(usrp, r: dict, clock=time.monotonic, sleep=time.sleep) -> int:
    """Sets the device time to a whole second T of `clock` (CLOCK_MONOTONIC: the apd's
    clock) and returns T: at once (internal), or at the next PPS (external, gpsdo), which
    leaves the device time within one second of the host's."""
    from gnuradio import uhd

    if r["time_source"] in ("external", "gpsdo"):
        return set_common_time([usrp], clock, sleep)
    t = int(math.floor(clock()))
    usrp.set_time_now(uhd.time_spec(float(t)), uhd.ALL_MBOARDS)
    return t


def set_common_time(usrps: list, clock=time.monotonic, sleep=time.sleep) -> int:
    """Sets every radio's device time to the same whole second T of `clock` at the next
    PPS edge (their common time source: uplink slots over the air) and returns T. All
    set_time_next_pps calls go out within the same second, before the edge."""
    from gnuradio import uhd

    t = int(math.floor(clock())) + 1
    for usrp in usrps:
        usrp.set_time_next_pps(uhd.time_spec(float(t)))
    sleep(1.2)  # the PPS edge has passed: the device time is T + (time since the edge)
    return t


def ap_t0_s(cfg: dict, device_time_s: int) -> float:
    """Device time of slot 0's first sample: the time set plus the lead. Exact for leads
    with a short binary fraction; else within one double ulp of T (1e-12 s at 1e4 s)."""
    return float(device_time_s) + cfg["uhd"]["ap"]["start_delay_s"]


# ----------------------------------------------------------------------------------------
# Flowgraphs, up to the radio endpoints (tools/tests/test_phy_uhd.py runs them with test
# sinks and sources in place of the USRPs)


def build_ap_tx(tb, cfg: dict, device_time_s: int, sink, station_sinks=None):
    """mac_grant_source <-> slot_tx in burst mode -> `sink` (uhd.usrp_sink on air).

    slot_tx tags slot n's first sample with tx_time = ap_t0_s + n T_slot (UHD's
    (full seconds, fraction) pair, computed in integer samples) and tx_sob, its last with
    tx_eob: one timed burst per slot. Returns (slot_tx, mac_grant_source, gates).

    With uplink slots (`station_sinks`: one sink per user, users[u]'s radio) output 0 goes
    through slot_gate(-1) to `sink` and output 1 through slot_gate(u) to station u's sink:
    each radio sends its own slots only; `gates` is [AP's gate, station gates...]."""
    s = cfg["sample"]
    tx = oppsched.slot_tx(s["profile"], s["sample_rate"], cfg["lead_slots"],
                          ap_t0_s(cfg, device_time_s), False, False, fec=s["fec"])
    buf = tx_buffer_samples(cfg)
    tx.set_max_output_buffer(buf)
    grants = loopback.connect_grants(tb, cfg, tx)
    ap = cfg["uhd"]["ap"]["tx_backoff_db"]
    if station_sinks is None:
        tb.connect(tx, backoff(ap, buf), sink)
        return tx, grants, []
    gates = [oppsched.slot_gate(-1)] + [oppsched.slot_gate(u["id"]) for u in cfg["users"]]
    for g in gates:
        g.set_max_output_buffer(buf)  # each burst stays as close to its tx_time as without
    tb.connect((tx, 0), gates[0], backoff(ap, buf), sink)
    for u, g, snk in zip(cfg["users"], gates[1:], station_sinks):
        tb.connect((tx, 1), g, backoff(u["uhd"]["tx_backoff_db"], buf), snk)
    return tx, grants, gates


def backoff(db: float, buf: int):
    """A radio's TX backoff (RADIO_AP / RADIO_CLIENT tx_backoff_db): the samples scaled by
    10^(-db/20) on their way to its usrp_sink, the burst tags kept (a sync block: tx_time,
    tx_sob and tx_eob stay on their samples), its output buffer as small as slot_tx's."""
    from gnuradio import blocks

    m = blocks.multiply_const_cc(10 ** (-db / 20))
    m.set_max_output_buffer(buf)
    return m


# The AP's receiver of each station over the air: its own slots, no missed-slot reports
UPLINK_RX = {"uplink": True, "own_slots_only": True}
# A client's receiver with uplink slots over the air: the AP is silent in them, so a slot
# not found is no fade (the CQI of the last slot found stands, as in TDD)
TDD_CLIENT_RX = {"missed_slots": 0}


def build_ap_rx(tb, cfg: dict, source) -> tuple[list, list]:
    """Uplink slots over the air: `source` (the AP radio's uhd.usrp_source) -> one
    slot_rx(u, uplink, own slots only) per station -> rx_indication_sink on
    users[u].uplink_rx (the apd's phy_uplink_rx). Returns (receivers, sinks)."""
    rxs, sinks = [], []
    for u in cfg["users"]:
        rx, sink = loopback.connect_rx(tb, cfg, {**u, "rx": u["uplink_rx"]}, source,
                                       **UPLINK_RX)
        rxs.append(rx)
        sinks.append(sink)
    return rxs, sinks


def tx_buffer_samples(cfg: dict) -> int:
    """slot_tx's output buffer: TX_MAX_OUTPUT_BUFFER, or more if the AP radio's profile
    needs its timed bursts further ahead of their tx_time (tx_lead_s x sample rate); with
    uplink slots the largest of every transmitting radio's."""
    fs = cfg["sample"]["sample_rate"]
    profiles = [ap_profile(cfg)]
    if cfg["uplink"]["enabled"]:
        profiles += [devices.profile(u["uhd"]["device"], f"{u['uhd']['origin']}.device")
                     for u in cfg["users"]]
    return max(devices.tx_buffer_samples(p, fs, TX_MAX_OUTPUT_BUFFER) for p in profiles)


def capture_client_iq(tb, cfg: dict, user: dict, source, rx):
    """capture.iq: what the user's radio `source` receives (slot_rx `rx`'s input), with
    rx's reports as annotations (oppsched.phy.iqcapture)."""
    from oppsched.phy import iqcapture

    r = user["uhd"]
    return iqcapture.attach_rx(
        tb, cfg, user, source, rx, loopback.RX_PARAMS,
        f"oppsched over-the-air PHY: what user {user['name']}'s radio (id {user['id']}) "
        f"receives at {r['freq_hz']:g} Hz, gain {r['gain_db']:g} dB",
        f"USRP {r['device']} ({r['args']}), antenna {r['antenna']}", r["freq_hz"])


def capture_ap_iq(tb, cfg: dict, tx):
    """capture.iq: what the AP sends (slot_tx `tx`'s bursts, or its slot_gate's with uplink
    slots, as the usrp_sink gets them), one annotation per slot from the `slot` tags. The
    AP's uplink reception is not recorded."""
    from oppsched.phy import iqcapture

    ap = cfg["uhd"]["ap"]
    return iqcapture.attach_tx(
        tb, cfg, tx, f"oppsched over-the-air PHY: the AP's transmission (bursts, one per "
        f"slot, back to back in the file) at {ap['freq_hz']:g} Hz",
        f"USRP {ap['device']} ({ap['args']}), antenna {ap['antenna']}", ap["freq_hz"])


def build_client_rx(tb, cfg: dict, user: dict, source):
    """`source` (uhd.usrp_source on air) -> slot_rx(user id) -> rx_indication_sink on the
    user's rx endpoint (with uplink slots: no missed-slot reports). Returns (slot_rx,
    sink)."""
    return loopback.connect_rx(tb, cfg, user, source,
                               **(TDD_CLIENT_RX if cfg["uplink"]["enabled"] else {}))


class UhdPhy:
    """The radios and their flowgraphs. Client radios first (their set-up takes seconds
    and must not eat the AP's lead), the AP's device time last, just before start().
    With uplink slots every radio also opens its second direction (the AP an RX stream, a
    station a TX stream, on the same device) and all device times are set at one PPS."""

    def __init__(self, cfg: dict):
        from gnuradio import uhd

        self.cfg = cfg
        up = cfg["uplink"]["enabled"]
        fs = cfg["sample"]["sample_rate"]
        stream = uhd.stream_args(cpu_format="fc32", channels=[0])
        self.rx_tbs, self.rx, self.sinks = [], [], []
        self.station_tx = []  # with uplink slots: each station radio's usrp_sink
        self.iq = []  # capture.iq recorders
        for u in cfg["users"]:
            r = u["uhd"]
            tb = gr.top_block(f"oppsched_uhd_rx_{u['id']}")
            src = _open(lambda r=r: uhd.usrp_source(r["args"], stream), r)
            configure_radio(src, r["origin"], r, fs)
            if up:
                snk = _open(lambda r=r: uhd.usrp_sink(r["args"], stream, ""), r)
                configure_radio(snk, r["origin"], r, fs, SECOND_DIRECTION["tx"])
                self.station_tx.append(snk)
            rx, sink = build_client_rx(tb, cfg, u, src)
            if cfg["capture"]["iq"]:
                self.iq.append(capture_client_iq(tb, cfg, u, src, rx))
            self.rx_tbs.append(tb)
            self.rx.append(rx)
            self.sinks.append(sink)
        ap = cfg["uhd"]["ap"]
        self.tb = gr.top_block("oppsched_uhd_ap")
        self.usrp_tx = _open(lambda: uhd.usrp_sink(ap["args"], stream, ""), ap)
        configure_radio(self.usrp_tx, ap["origin"], ap, fs)
        self.usrp_rx = None
        if up:
            self.usrp_rx = _open(lambda: uhd.usrp_source(ap["args"], stream), ap)
            configure_radio(self.usrp_rx, ap["origin"], ap, fs, SECOND_DIRECTION["rx"])
            self.device_time_s = set_common_time([self.usrp_tx] + self.station_tx)
        else:
            self.device_time_s = set_device_time(self.usrp_tx, ap)
        self.t0_s = ap_t0_s(cfg, self.device_time_s)
        self.tx, self.grants, self.gates = build_ap_tx(
            self.tb, cfg, self.device_time_s, self.usrp_tx, self.station_tx if up else None)
        self.up_rx, self.up_sinks = build_ap_rx(self.tb, cfg, self.usrp_rx) if up else ([], [])
        if cfg["capture"]["iq"]:
            # what the AP's radio is given: with uplink slots its gate's bursts
            self.iq.append(capture_ap_iq(self.tb, cfg, self.gates[0] if up else self.tx))

    def start(self) -> None:
        from oppsched.phy import iqcapture

        iqcapture.set_t0(self.iq, time.time())  # the streams start now (RX) / at t0 (TX)
        # The AP's first: gr-uhd takes a radio's streamer when its graph starts, and UHD's
        # device simulator (one device for both ends) fails to set up a TX streamer once an
        # RX stream runs ("Timed out getting recv buff for management transaction"). Its
        # bursts wait for their tx_time, so the order costs the receivers nothing.
        self.tb.start()
        for tb in self.rx_tbs:
            tb.start()

    def stop(self) -> None:
        from oppsched.phy import iqcapture

        self.tb.stop()
        self.tb.wait()
        for tb in self.rx_tbs:
            tb.stop()
            tb.wait()
        self.iq_stats = iqcapture.close_all(self.iq)

    def stats(self) -> dict:
        c = self.cfg
        return {
            "mode": "uhd",
            "profile": c["sample"]["profile"],
            "fec": c["sample"]["fec"],
            "sample_rate": c["sample"]["sample_rate"],
            "slot_s": c["slot_s"],
            "device_time_s": self.device_time_s,
            "t0_s": self.t0_s,
            "radios": {origin: r["args"] for origin, r in radios(c)},
            "devices": {origin: r["device"] for origin, r in radios(c)},
            "tx_lead_s": ap_profile(c)["tx_lead_s"],
            "tx_buffer_samples": tx_buffer_samples(c),
            **loopback.tx_stats(self.tx, self.grants),
            "users": [loopback.user_stats(u, rx, sink)
                      for u, rx, sink in zip(c["users"], self.rx, self.sinks)],
            **({"uplink": uplink_stats(c, self.tx, self.gates, self.up_rx, self.up_sinks)}
               if self.gates else {}),
            **({"iq": getattr(self, "iq_stats", None) or [r.core.stats() for r in self.iq]}
               if self.iq else {}),
        }

    def write_stats(self) -> None:
        write_json_atomic(Path(self.cfg["traces"]["stats"]), self.stats())


def uplink_stats(cfg: dict, tx, gates: list, rxs: list, sinks: list) -> dict:
    """phy.stats.json's `uplink` over the air: as the sample PHY's, plus the bursts each
    radio sent (its gate's slots) and dropped."""
    return {
        "tb_sent": tx.uplink_tb_sent(),
        "ap_bursts": gates[0].slots_passed(),
        "station_bursts": {u["name"]: g.slots_passed() for u, g in zip(cfg["users"], gates[1:])},
        "receivers": [loopback.user_stats(u, rx, sink)
                      for u, rx, sink in zip(cfg["users"], rxs, sinks)],
    }


def _open(make, r: dict):
    try:
        return make()
    except RuntimeError as exc:
        raise RadioError(f"{r['origin']}.args {r['args']!r}: cannot open the device "
                         f"({exc})") from None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(
        argv, "python -m oppsched.phy.uhd",
        "Over-the-air PHY: slot_tx -> USRP (timed bursts) at the AP, USRP -> slot_rx per "
        "client, bridged to oppsched-apd and the client agents over ZeroMQ.",
        "phy.yaml (loopback keys + uhd:)",
        "validate the configuration and exit (no device is looked for)", "phy-uhd")
    try:
        cfg = load_config(args.config, args.set)
    except (ConfigError, ValueError) as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{args.config}: ok ({len(cfg['users'])} users, profile "
              f"{cfg['sample']['profile']}, slot {cfg['slot_s'] * 1e3:g} ms, radios "
              + "; ".join(f"{o} {r['args']}" for o, r in radios(cfg)) + ")")
        return 0
    try:
        check_radios(cfg)  # before anything else: no socket, no flowgraph
        set_rt_priority(cfg["timing"]["rt_priority"])
        phy = UhdPhy(cfg)
    except ImportError as exc:
        print(f"phy-uhd: gnuradio.uhd cannot be imported ({exc})", file=sys.stderr)
        return 1
    except RadioError as exc:
        print(f"phy-uhd: {exc}", file=sys.stderr)
        return 1

    def start():
        phy.start()
        log.info("running: %d users, profile %s, %g Hz, slot %.3f ms, lead %d, device time "
                 "%d s, slot 0 at %.6f s", len(cfg["users"]), cfg["sample"]["profile"],
                 cfg["sample"]["sample_rate"], cfg["slot_s"] * 1e3, cfg["lead_slots"],
                 phy.device_time_s, phy.t0_s)

    loopback.run_until_signal(start, phy.stop, phy.write_stats, phy.tx.slots, cfg["max_slots"])
    st = phy.stats()
    log.info("stopped after %d slots (%d empty, %d late)", st["slots"], st["empty"], st["late"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
