"""The `kind: testbed` experiment: its schema (SCHEMA, the keys beside the runner's common
ones) and the cross-field checks of a resolved experiment (check()), with the values they
derive (resolved_ecn). What each key means: docs/testbed.md."""

from __future__ import annotations

import math
import re
from pathlib import Path

from oppsched import build, daemon_fields, mac, names, paths, plugin, registry
from oppsched.phy import devices
from oppsched.testbed import daemonconf
from oppsched.testbed.daemon_keys import DAEMON_KEYS, DEPARTURES
from oppsched.config import ConfigError, Field, ListOf, Renamed
from oppsched.testbed.daemonconf import PROFILES
from oppsched.names import (AQM_KINDS, CHANNEL_MODEL_ALIASES, CHANNEL_MODELS, ERROR_MODEL_ALIASES,
                            ERROR_MODELS, FECS, LINK_MODES, MARKING_AQMS, PROFILE_ALIASES,
                            SHANNON_TABLE_DEFAULTS, TABLE_ALIASES, TABLE_PRESETS)
from oppsched.phy.radio import (RADIO_AP, RADIO_CLIENT, check_common_time, check_profile_name,
                                check_radio_args, whole_hz)

PHY_MODES = ("abstract", "sample", "uhd")
TRANSPORTS = ("tcp", "wrc")
# oppsched-wrc's datagram sizes (host/include/oppsched/wrc_packet.h: the 32-byte header up
# to the largest UDP payload).
WRC_MIN_PACKET_BYTES, WRC_MAX_PACKET_BYTES = 32, 65507
WRC_DEFAULT_PACKET_BYTES = 512
# flows[].mss_bytes: Linux's TCP_MAXSEG takes 88 (TCP_MIN_MSS) .. 32767 (MAX_TCP_WINDOW),
# as MSS option values; a segment's payload is that less the 12 bytes of the timestamp
# option where both ends use timestamps (the path MTU bounds it further: check()).
TCP_MIN_MSS, TCP_MAX_MSS, TIMESTAMP_OPTION_BYTES = 88, 32767, 12
MIN_SEGMENT_BYTES = TCP_MIN_MSS - TIMESTAMP_OPTION_BYTES
MAX_SEGMENT_BYTES = TCP_MAX_MSS - TIMESTAMP_OPTION_BYTES
IP_TCP_HEADER_BYTES = {"ipv4": 20 + 20, "ipv6": 40 + 20}
FLOW_DIRECTIONS = ("down", "up")
# flows[].repeat.connection (oppsched.testbed.transfers.CONNECTIONS)
REPEAT_CONNECTIONS = ("new", "reuse")
_NONE = type(None)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,23}")


def _name(s: str):
    return None if _NAME_RE.fullmatch(s) else "is not a plain name (1..24 of letters, digits, _ -)"


def _flow_ids(v):
    if v is None:
        return None
    if not v or not all(isinstance(x, str) for x in v):
        return "is not a non-empty list of flows[].id"
    return None


def _ecn(v):
    return None if v in ("auto", 0, 1, 2) else "is not auto, 0, 1 or 2"


def _weight(v):
    if v is None or v > 0:
        return None
    return "is not > 0 (a rate weight)"


def _mcs_table(v):
    if v is None or v in TABLE_PRESETS or str(v).endswith(".csv"):
        return None
    return f"is not {', '.join(TABLE_PRESETS)} or a path to a .csv table"


def _daemon(key: str, doc: str | None = None) -> Field:
    """The Field of experiment key `key`: its first daemon's type, default and range, under
    the key's declared departure (DEPARTURES)."""
    daemon, daemon_key = DAEMON_KEYS[key][0]
    return daemon_fields.field(daemon, daemon_key, doc=doc, departure=DEPARTURES.get(key))


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
        "profile": Field(str, "3ms", choices=tuple(PROFILES), aliases=PROFILE_ALIASES,
                         doc="3ms (Andrew & Hanly, CLAMP: 3 ms slots, eq. 18 rates and "
                             "errors, Jakes fading) or evdo (Srinivasan & Baras: 1.667 ms "
                             "slots, EV-DO table, Table I)"),
        "fec": Field(str, "ldpc", choices=FECS,
                     doc="payload FEC of modes sample/uhd: ldpc (802.11n QC-LDPC) or conv "
                         "(K=7 convolutional); picks the measured MCS table too"),
        "slot_s": Field((float, _NONE), None, min=1e-4, max=0.1, doc="null: the profile's"),
        "lead_slots": _daemon("phy.lead_slots",
                              doc="slot_request n is sent this many slots before slot n"),
        "error_model": Field((str, _NONE), None, choices=(None,) + ERROR_MODELS,
                             aliases=ERROR_MODEL_ALIASES,
                             doc="end_of_slot: the end-of-slot rule of Andrew & Hanly, CLAMP, "
                                 "eq. 18; "
                                 "threshold: the "
                                 "MCS threshold at slot end; curves: BLER from link curves; "
                                 "null: the profile's"),
        "mcs_table": Field((str, _NONE), None, check=_mcs_table, aliases=TABLE_ALIASES,
                           doc="shannon | evdo | ofdm_provisional | path to a CSV table "
                               "(name,min_snr_db,rate_bps); null: the profile's"),
        "link_curves": Field(str, "", doc="CSV mcs,snr_db,bler (error_model curves)"),
        "shannon_table": {
            "w0_hz": Field(float, SHANNON_TABLE_DEFAULTS["w0_hz"], min=1.0, max=1e12,
                           doc="W0 of eq. 18 (§V-D: 4.3 MHz)"),
            "cmax_bps": Field(float, SHANNON_TABLE_DEFAULTS["cmax_bps"], min=1.0, max=1e12,
                              doc="C_max of eq. 18 (10 Mb/s)"),
            "levels": Field(int, SHANNON_TABLE_DEFAULTS["levels"], min=1, max=255,
                            doc="eq. 18 rates quantised to this many MCS (k C_max / levels)"),
        },
        "clamp_table": Renamed("shannon_table"),
        "chase_combining": Field((bool, _NONE), None,
                                 doc="HARQ retransmissions add their SNRs; null: on, except "
                                     "with link_adaptation.mode paper (the paper's link layer "
                                     "resends whole packets, no combining)"),
        "slot_trace": Field(bool, False, doc="the PHY writes phy_slots.csv"),
        "sample": {  # phy.mode sample (python -m oppsched.phy.loopback)
            "sample_rate": Field(float, 1e6, min=1e6, max=20e6, check=whole_hz,
                                 doc="complex sample rate of the blocks (Hz): the slot keeps "
                                     "its duration and fft_len 64, so TB sizes and the "
                                     "occupied bandwidth (52/64 of it) grow with it; away "
                                     "from 1e6 the run derives its MCS table "
                                     "(mcs_table.csv in the run folder)"),
        },
        "uhd": {  # phy.mode uhd (python -m oppsched.phy.uhd): the AP radio; devices[].uhd
            "sample_rate": Field(float, 1e6, min=1e5, max=61.44e6, check=whole_hz,
                                 doc="every radio's complex sample rate"),
            "device": Field(str, "", check=check_profile_name,
                            doc="every radio's profile (firmware/profiles: b210, n210, ...) "
                                "unless the radio names its own"),
            "ap": RADIO_AP,
        },
    },
    "devices": ListOf({
        "name": Field(str, check=_name),
        "channel": {
            "mean_snr_db": Field(float, names.CLAMP_MEAN_SNR_DB, min=-30.0, max=60.0,
                                 doc="Andrew & Hanly, CLAMP, §V-B: SNR_avg = 4 (6 dB)"),
            "doppler_hz": Field(float, names.CLAMP_FAST_DOPPLER_HZ, min=0.0, max=2000.0,
                                doc="Andrew & Hanly, CLAMP, §V-B: 60 Hz (10 m/s) or "
                                    "0.6 Hz (0.1 m/s)"),
            "model": Field((str, _NONE), None, choices=(None,) + CHANNEL_MODELS,
                           aliases=CHANNEL_MODEL_ALIASES,
                           doc="jakes: Jakes G=20 as Andrew & Hanly, CLAMP, §V-B print "
                               "it; sum_of_sinusoids: Srinivasan & Baras, eq. 4; awgn: "
                               "constant SNR; trace: replay a CSV time_s,snr_db; null: the "
                               "profile's"),
            "trace": Field(str, "", doc="model trace: CSV time_s,snr_db"),
        },
        "uhd": RADIO_CLIENT,  # phy.mode uhd: this device's receiving radio
        "queue": {"limit_bytes": _daemon("devices[].queue.limit_bytes",
                                       doc="this device's AP queue limit; null: "
                                           "queue.limit_bytes")},
        "tcp": _TCP_OVERRIDES,
    }, min_len=1),
    "servers": ListOf({
        "name": Field(str, check=_name),
        "rtt_ms": _daemon("servers[].rtt_ms", doc="d_i: round-trip propagation delay "
                          "of the wired path S_i--X (d_i/2 each way, Andrew & Hanly, CLAMP, "
                          "Table I)"),
        "rate_bps": _daemon("servers[].rate_bps", doc="wired capacity (Table I: 100 Mb/s); "
                            "0 = unlimited"),
        "limit_bytes": _daemon("servers[].limit_bytes",
                               doc="wired FIFO in front of rate_bps; 0 = unlimited"),
        "tcp": _TCP_OVERRIDES,
    }, min_len=1),
    "flows": ListOf({
        "id": Field(str, check=_name),
        "server": Field(str, doc="a servers[].name: the sender (direction up: the receiver)"),
        "device": Field(str, doc="a devices[].name: the receiver (direction up: the sender)"),
        "direction": Field(str, "down", choices=FLOW_DIRECTIONS,
                           doc="down: the server sends, the data crosses the AP queue and "
                               "the downlink; up: the device sends, the data crosses the "
                               "uplink and its ACKs the AP queue and the downlink (Wu, Gong & "
                               "Williamson's upstream flows)"),
        "family": Field(str, "ipv4", choices=("ipv4", "ipv6")),
        "start_s": Field(float, 0.0, min=0.0, doc="after the radio is up"),
        "stop_s": Field((float, _NONE), None, min=0.0, doc="null: duration_s (iperf3 runs "
                        "whole seconds: round(stop_s - start_s), at least 1)"),
        "bytes": Field((int, _NONE), None, min=1, doc="send this many bytes instead of a "
                       "duration (iperf3 -n); excludes stop_s. With repeat: the size of "
                       "each transfer"),
        "repeat": {  # a flow of repeated transfers (oppsched.testbed.transfers), on when an idle is set
            "idle_s": Field((float, _NONE), None, min=0.0, doc="fixed idle time between "
                            "transfers (0: back to back); null: not repeated, or idle_mean_s"),
            "idle_mean_s": Field((float, _NONE), None, doc="exponential idle times of this "
                                 "mean (> 0), drawn from the run's seed and the flow's id"),
            "count": Field((int, _NONE), None, min=1, doc="at most this many transfers; "
                           "null: until stop_s (else duration_s)"),
            "connection": Field(str, "new", choices=REPEAT_CONNECTIONS,
                                doc="new: each transfer a new TCP connection (a new flow "
                                    "to the AP's LAS/T-LAS, in slow start each time); "
                                    "reuse: one connection per flow, the files fetched "
                                    "over it one after another (a request, then `bytes` "
                                    "bytes), as an ns-2 FTP agent reuses its TCP agent "
                                    "(Wu, Gong & Williamson, §5.2): to LAS one flow whose "
                                    "attained service grows with every file"),
            "until_flows_end": Field((list, _NONE), None, check=_flow_ids,
                                     doc="flows[].id of flows that end by themselves "
                                         "(repeat.count, bytes or stop_s): once all have "
                                         "ended, this flow stops (the transfer in progress "
                                         "is cut), as Wu et al.'s small files repeat "
                                         "\"until all large file transfers are finished\"; "
                                         "null: until stop_s (else duration_s) or count"),
        },
        "cc": Field((str, _NONE), None, doc="congestion control (iperf3 -C); null: "
                    "tcp.congestion_control"),
        "parallel": Field(int, 1, min=1, max=32, doc="parallel TCP streams (iperf3 -P)"),
        "mss_bytes": Field((int, _NONE), None, min=MIN_SEGMENT_BYTES, max=MAX_SEGMENT_BYTES,
                           doc="TCP payload bytes of each full-sized segment (tcp_info "
                               "snd_mss, `ss -ti` mss:), e.g. Wang & Song, REAQM's 1000-byte "
                               "TCP packets: advmss of the routes between the flow's two "
                               "ends and iperf3 -M, each plus the 12 bytes of the timestamp "
                               "option when both ends use timestamps; null: the path MTU's"),
        "initcwnd": Field((int, _NONE), None, min=1, max=1000,
                          doc="segments the flow's connections start with (initcwnd of the "
                              "routes between its two ends); null: tcp.initcwnd for a "
                              "server's connections, else the kernel's (10, RFC 6928)"),
        "ssthresh": Field((int, _NONE), None, min=2, max=1000000,
                          doc="segments: the slow-start threshold the flow's connections "
                              "start with (e.g. Srinivasan & Baras's 20); null: "
                              "tcp.ssthresh (docs/testbed.md, \"Initial ssthresh\")"),
        "transport": Field(str, "tcp", choices=TRANSPORTS,
                           doc="tcp: iperf3 (or repeated transfers); wrc: the weighted "
                               "receiver-based rate control of Nandagopal et al. "
                               "(oppsched-wrc send/recv, settings in wrc:)"),
        "weight": Field((float, _NONE), None, check=_weight,
                        doc="wrc only: the flow's rate weight w (> 0; null: 1)"),
        "packet_bytes": Field((int, _NONE), None, min=WRC_MIN_PACKET_BYTES,
                              max=WRC_MAX_PACKET_BYTES,
                              doc="wrc only: UDP payload of each datagram (null: 512, "
                                  "Nandagopal et al., §IV)"),
    }, min_len=1),
    # The weighted rate control of Nandagopal et al. (flows with transport wrc): the
    # receiver's algorithm (Fig. 3; defaults the paper's, §IV) and the sender's start.
    "wrc": {
        "epoch_ms": Field(float, 350.0, min=1e-3, max=1e6, doc="epoch of the rate update "
                          "(§IV: 350 ms)"),
        "alpha_pps": Field(float, 0.1, min=1e-9, max=1e6, doc="increase alpha * w "
                           "packets/s per epoch (§IV: 0.1; its equal-weight runs 0.5)"),
        "delta_initial": Field(float, 0.1, min=1e-9, max=0.999999,
                               doc="first decrease, and delta after every increase (10 %)"),
        "delta_max": Field(float, 0.5, min=1e-9, max=0.999999,
                           doc="cap of the doubling delta (50 %); >= delta_initial"),
        "lavg_epochs": Field(int, 6, min=1, max=1000, doc="epochs in the long-term average"),
        "lavg_weight": Field(float, 0.125, min=1e-9, max=1.0,
                             doc="weight of the newest epoch (Fig. 3: 0.125)"),
        "loss_band_deviations": Field(float, 2.0, min=0.0, max=1e6,
                                      doc="random-loss band: mean +- this many mean "
                                          "deviations (§III-A.4)"),
        "congestion_loss_factor": Field(float, 0.5, min=1e-9, max=1.0,
                                        doc="rate multiplier on a congestion loss (half)"),
        "stale_congestion_loss": Field(str, "ignore", choices=("ignore", "act"),
                                       doc="a congestion loss revealed by a packet sent at "
                                           "an older rate: ignore (the testbed's addition, "
                                           "one halving per rate) or act (Fig. 3 as "
                                           "printed)"),
        "min_rate_pps": Field(float, 1.0, min=1e-6, max=1e6, doc="floor of the rate"),
        "max_rate_pps": Field(float, 0.0, min=0.0, max=1e7, doc="ceiling; 0 = none"),
        "differentiation": Field(str, "weighted_increase",
                                 choices=("weighted_increase", "weighted_decrease"),
                                 doc="§III-A.3: +alpha w / x(1 - delta), or +alpha / "
                                     "x(1 - delta / w)"),
        "initial_rate_pps": Field(float, 1.0, min=1e-6, max=1e6,
                                  doc="the sender's rate until the first feedback (the "
                                      "paper has no slow start)"),
        "feedback_every": Field(int, 1, min=1, max=1000000,
                                doc="data packets per feedback packet (and one at every "
                                    "rate change; the paper's worst case: 1)"),
    },
    "queue": {
        "mode": _daemon("queue.mode", doc="one AP queue per device, or one shared FIFO "
                        "(head-of-line blocking)"),
        "limit_bytes": _daemon("queue.limit_bytes", doc="Andrew & Hanly, CLAMP, §V-H: 60 KB "
                             "TCP buffer; 0 = none"),
        "limit_packets": _daemon("queue.limit_packets", doc="0 = none"),
    },
    "aqm": {
        "kind": Field(str, "droptail", choices=AQM_KINDS + plugin.PLUGIN_KINDS,
                      doc="a built-in kind, or python: a plugin in Python, plugin: a plugin "
                          "in a shared library (docs/extending.md)"),
        "ecn": _daemon("aqm.ecn", doc="mark ECN-capable packets instead of dropping them"),
        "spare_handshake": _daemon(
            "aqm.spare_handshake", doc="a TCP SYN or SYN-ACK (never ECN-capable) is not "
            "early-dropped by an AQM that decides at arrival (red, rem, reaqm, avq, pie), only "
            "when the buffer is full: the papers' ns-2 agents open no connection"),
        "mark_not_ect": _daemon(
            "aqm.mark_not_ect", doc="an ablation: a Not-ECT TCP segment other than a SYN "
            "(Linux sends retransmissions and pure ACKs Not-ECT, RFC 3168 6.1.4-6.1.5) is "
            "CE-marked by the AQM's signal instead of dropped, as if ECN-capable: ns-2's ECN "
            "agents send every data packet ECT and no ACK through the queue"),
        "params": Field(dict, {}, doc="the kind's parameters (oppsched.mac.make_aqm names); "
                                      "python: the class's keyword arguments; plugin: the "
                                      "library's params (numbers and strings)"),
        "file": Field((str, _NONE), None, doc="python: the plugin's .py file (relative to "
                                              "where oppsched runs); copied into the run folder"),
        "class": Field((str, _NONE), None, doc="python: the plugin's class in `file`"),
        "library": Field((str, _NONE), None, doc="plugin: the plugin's shared library (.so; "
                         "relative to the experiment file); copied into the run folder"),
        "priority_dscp": Field((int, _NONE), None, min=0, max=63,
                               doc="SPM-AF (Wu, Gong & Williamson, §6.1): a downlink packet "
                                   "with this DSCP is high priority; null: "
                                   "tcp.spm_marking.dscp when the marking is on, else none"),
    },
    "clamp": {
        "enabled": _daemon("clamp.enabled"),
        "a_bytes": _daemon("clamp.a_bytes", doc="a, eq. 13 (router)"),
        "b": _daemon("clamp.b", doc="b, eq. 7; stable iff "
                   "b < pi/2 (Theorem 1)"),
        "ema_rate_per_s": _daemon("clamp.ema_rate_per_s", doc="q(n) = exp(-2I) ... (§IV-A)"),
        "mu_c": _daemon("clamp.mu_c",
                        doc="mu_c of eq. 13: measured (the queue's service while backlogged) "
                            "or all_backlogged (the paper's: its share if every user had "
                            "data, from a shadow of the scheduler)"),
        "tau_bytes": _daemon("clamp.tau_bytes", doc="tau, eq. 14 (client; Table II)"),
        "alpha_packets": _daemon("clamp.alpha_packets", doc="alpha, eq. 15"),
        "beta": _daemon("clamp.beta", doc="beta, eq. 16"),
        "max_increase_bytes": _daemon("clamp.max_increase_bytes", doc="Delta w clip (10 kB)"),
        "min_window_bytes": _daemon("clamp.min_window_bytes", doc="0 = one MSS (clamp.h)"),
        "slow_start_threshold_bytes": _daemon("clamp.slow_start_threshold_bytes",
                                              doc="0 = none (the paper)"),
        "mu_min_span_s": _daemon("clamp.mu_min_span_s",
                                 doc="mu_hat (eq. 15) is used once its window spans this or "
                                     "holds alpha + 1 packets; 0 = the literal reading (all "
                                     "packets so far, from the second)"),
    },
    "scheduler": {
        # kind and each kind's parameters (alpha, lambda, weights: one per device), with
        # their defaults and ranges, from the MAC library's registry (oppsched.registry)
        **registry.scheduler_fields(),
        "harq_first": _daemon("scheduler.harq_first", doc="a pending HARQ retransmission takes the slot "
                            "before the scheduler chooses (true, LTE practice); false: it "
                            "competes in the scheduler like new data, as in the papers' models"),
    },
    "link_adaptation": {
        "mode": _daemon("link_adaptation.mode",
                      doc="table: the MCS the CQI (lead_slots old) meets, with OLLA; paper: "
                          "Andrew & Hanly, CLAMP, eq. 18 unquantised from the SNR at the "
                          "slot's start, with the backoff margin m (abstract PHY, end_of_slot "
                          "errors, no chase combining)"),
        "olla": _daemon("link_adaptation.olla", doc="mode table: outer-loop offset driven by ACK/NACK"),
        "target_bler": _daemon("link_adaptation.target_bler", doc="OLLA's per-attempt target"),
        "paper": {
            "target_loss": Field(float, 1e-3, min=1e-9, max=0.5,
                                 doc="m is tuned for this loss after harq.max_transmissions "
                                     "attempts (§V-D: 1e-3)"),
            "margin_step": Field(float, 0.01, min=0.0, max=1.0,
                                 doc="gain of m's stochastic approximation"),
            "margin_init": Field(float, 0.0, min=-1000.0, max=0.98,
                                 doc="m at start, in [margin_min, 0.98]"),
            "margin_min": Field(float, -9.0, min=-1000.0, max=0.98,
                                doc="floor of m; below 0 the rate is above what the SNR at "
                                    "the slot's start supports, which eq. 18 allows and fast "
                                    "fading with 15 attempts needs to reach target_loss; "
                                    "0 = never above the SNR (the earlier reading)"),
        },
    },
    "pdu": {
        "format": _daemon("pdu.format",
                          doc="the MAC PDU format (host/include/oppsched/pdu.h): standard "
                              "(20-byte header and CRC, 8 bytes per segment: TBs under 29 bytes "
                              "carry nothing) or compact (4-byte header, 8 with a CLAMP price, "
                              "packets back to back: every EV-DO rate of Srinivasan & Baras, "
                              "Table I carries data, as with the paper's 8-byte segments)"),
        "integrity_tag": Field((bool, _NONE), None,
                               doc="a keyed SipHash-2-4 tag (8 bytes) at the end of every "
                                   "TB, downlink (checked by the client) and uplink (checked "
                                   "by the apd), under a key bound to the run: a TB forged "
                                   "over the air or recorded in another run is NACKed, "
                                   "dropped unparsed and counted (docs/security.md). Each TB "
                                   "carries 8 bytes less data. null: on with phy.mode uhd "
                                   "(a radio), off otherwise; false with uhd is an opt-out, "
                                   "named in the summary's warnings"),
    },
    "security": {
        "keys_dir": Field((str, _NONE), None,
                          doc="the testbed's keys (`oppsched keys generate DIR --users ...`), "
                              "copied into RUN_DIR/keys; null: fresh keys generated there "
                              "when curve or pdu.integrity_tag needs them"),
        "curve": Field(bool, False,
                       doc="each client's uplink over TCP with ZeroMQ CURVE instead of ipc: "
                           "a lab link (veth, 10.253.<device index>.0/30) between the AP's "
                           "and the client's namespace stands in for the lab network; the "
                           "apd binds its address and knows the client by its key"),
        "seccomp": _daemon("security.seccomp",
                           doc="the apd, the clients and the delay stages install their "
                               "seccomp allow-list once set up (docs/security.md); false to "
                               "debug"),
    },
    "harq": {
        "max_transmissions": Field((int, _NONE), None, min=1, max=64,
                                   doc="null: n of Andrew & Hanly, CLAMP, §V-D (15 fast "
                                       "fading, 5 slow)"),
        "processes": _daemon("harq.processes"),
        "feedback_timeout_slots": _daemon("harq.feedback_timeout_slots"),
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
        "initcwnd": Field((int, _NONE), None, min=1, max=1000,
                          doc="segments the servers' connections start with (initcwnd of "
                              "their default routes); null: the kernel's (10, RFC 6928)"),
        "quickack": Field(bool, False,
                          doc="every receiver acknowledges each segment at once (quickack on "
                              "every route of the servers and the devices): no delayed ACKs, "
                              "as ns-2's TCPSink; false: Linux's delayed ACKs"),
        "rto_min_ms": Field((int, _NONE), None, min=1, max=60000,
                            doc="ms: the least retransmission timeout of every connection "
                                "(rto_min, which ip locks, on every route of the servers and the "
                                "devices); null: Linux's 200 ms. ns-2's TCP agents default "
                                "to 1000 ms"),
        "ssthresh": Field((int, _NONE), None, min=2, max=1000000,
                          doc="segments: the slow-start threshold every TCP flow's "
                              "connections start with, unless the flow gives its own; null: "
                              "the kernel's (none)"),
        "spm_marking": {
            "enabled": Field(bool, False,
                             doc="SPM-AF's sender marking (Wu, Gong & Williamson, §6.1): a BPF "
                                 "program on each server's wired interface writes `dscp` "
                                 "into TCP data sent while snd_cwnd < cwnd_below"),
            "cwnd_below": Field(int, 4, min=0, max=65535,
                                doc="segments; the paper's 4 (0 never marks)"),
            "dscp": Field(int, 3, min=0, max=63,
                          doc="3: RFC 2474's pool for experimental or local use"),
        },
    },
    "uplink_delay_ms": _daemon("uplink_delay_ms", doc="Andrew & Hanly, CLAMP, Table I: 1 ms"),
    "residual_loss": _daemon("residual_loss",
                             doc="each IP packet the link delivers is dropped at the client "
                                 "with this probability, before CLAMP and TCP see it: Andrew & "
                                 "Hanly, CLAMP, Table I's X-R packet loss rate (1e-3) where the "
                                 "link's own HARQ loses less; 0 = none"),
    "medium": {  # the shared medium (docs/testbed.md, "Shared medium")
        "mode": _daemon("medium.mode",
                      doc="none: the uplink is the side channel's delay line (no capacity "
                          "limit); node_fair: the AP (with downlink backlog) and every "
                          "station with uplink backlog get equal slot shares, as 802.11 DCF "
                          "on average (Wu, Gong & Williamson, §3); scheduled: PF over the "
                          "downlink and uplink queues together"),
        "station_buffer_packets": _daemon("medium.station_buffer_packets",
                                          doc="each station's uplink queue (Wu, Gong & "
                                              "Williamson, §3.1: 100 packets)"),
        "uplink_mean_snr_db": Field((float, _NONE), None, min=-30.0, max=60.0,
                                    doc="the uplink Jakes channels' mean SNR; null: the mean "
                                        "of devices[].channel.mean_snr_db"),
        "uplink_doppler_hz": Field((float, _NONE), None, min=0.0, max=2000.0,
                                   doc="null: the mean of devices[].channel.doppler_hz"),
        "station_queue": _daemon("medium.station_queue",
                               doc="where each station's uplink queue lives: ap (the apd "
                                   "holds it on the station's behalf and knows its backlog "
                                   "exactly) or client (the client daemon holds it, reports "
                                   "its buffer status, and sends a TB when the AP's uplink "
                                   "grant comes)"),
        "status_period_ms": _daemon("medium.status_period_ms",
                                    doc="station_queue client: a station with data reports "
                                        "its buffer at least this often when no TB carried it "
                                        "(LTE's periodic BSR)"),
    },
    "cqi": {"period_slots": _daemon("cqi.period_slots")},
    "reassembly": {
        "timeout_ms": Field((float, _NONE), None, min=0.001, max=60000.0,
                            doc="a gap is given up after this; null: as long as HARQ may "
                                "still deliver it (max_transmissions x (lead_slots + 3) "
                                "slots + uplink delay)"),
        "held_timeout_ms": Field((float, _NONE), None, min=0.0, max=600000.0,
                                 doc="a gap is held this long while a TB the client NACKed "
                                     "may still be retransmitted (0: never); null: 2000 with "
                                     "scheduler.harq_first false (a retransmission waits for "
                                     "the scheduler), 0 with true (daemonconf.reassembly)"),
        "window": Field((int, _NONE), None, min=1, max=1 << 20,
                        doc="PDUs held beyond a gap; null: at least the PDUs of that time"),
        "max_bytes": _daemon("reassembly.max_bytes", doc="null: the client's default"),
    },
    "capture": {
        "pcaps": Field(bool, True, doc="tcpdump on each server's wired side and each client TUN"),
        "snaplen": Field(int, 128, min=96, max=65535),
        "ap": Field(bool, False, doc="also capture the AP's TUN (ap.pcap)"),
        "tcp_info": Field(bool, False,
                          doc="each flow's sender as its kernel sees it (ss -ti every 0.5 s): "
                              "flow.ID.tcp_info.csv with cwnd, ssthresh, RTT, RTO, the "
                              "reordering estimate, retransmissions, lost and unacked "
                              "segments"),
        "mac": Field(bool, False, doc="MAC pcaps: every MAC PDU and PHY-MAC message of the "
                                      "apd (mac-ap.pcap) and of each client "
                                      "(mac-client.NAME.pcap); tools/wireshark/oppsched.lua "
                                      "decodes them"),
        "mac_max_bytes": _daemon("capture.mac_max_bytes",
                               doc="size limit of each MAC pcap; later records are left out "
                                   "(\"capture truncated\" in the daemon's log)"),
        # IQ capture (docs/phy.md, "IQ capture and offline decode")
        "iq": Field(bool, False, doc="phy.mode sample/uhd: SigMF recordings of each "
                    "receiver's input (iq/<device>.sigmf-*; uhd: also iq/ap.tx.*), one "
                    "annotation per slot; `oppsched decode` replays them"),
        "iq_window_start_s": Field(float, 0.0, min=0.0, max=1e6,
                                   doc="s after the PHY's stream start"),
        "iq_window_s": Field(float, 10.0, min=0.0, max=1e6,
                             doc="s recorded from iq_window_start_s; 0 = to the end (8 MB/s "
                                 "per device at 1 Msps)"),
        "iq_last_s": Field(float, 0.0, min=0.0, max=1e6,
                           doc="> 0: only the last seconds of the window (e.g. iq_window_s "
                               "0, iq_last_s 10: the run's last 10 s)"),
        "iq_trigger": Field(str, "none", choices=("none", "failed"),
                            doc="failed: within the window, only the slots whose decode "
                                "failed, with iq_margin_slots on each side"),
        "iq_margin_slots": Field(int, 1, min=0, max=100),
    },
    "traces": {"packets": Field(bool, False, doc="apd writes packets.csv (per-packet events)")},
    "topology": {
        "ipv4": Field(bool, True),
        "ipv6": Field(bool, True),
        "wired": Field(str, "auto", choices=("auto", "netem", "userspace")),
        "mtu": Field(int, 1500, min=576, max=9000),
        "rt_priority": _daemon("topology.rt_priority", doc="SCHED_FIFO of the delay stages"),
        "apd_rt_priority": Field(int, 0, min=0, max=99,
                                 doc="SCHED_FIFO of oppsched-apd and all its threads (it "
                                     "must answer each slot request within lead_slots); "
                                     "0 = normal scheduling"),
        "client_rt_priority": Field(int, 0, min=0, max=99,
                                    doc="SCHED_FIFO of each oppsched-client (its HARQ "
                                        "feedback must reach the AP within "
                                        "harq.feedback_timeout_slots); 0 = normal scheduling"),
        "offloads": Field(bool, False),
    },
    "iperf": {"interval_s": Field(float, 0.5, min=0.1, max=60.0, doc="iperf3 -i")},
    "analysis": {"warmup_s": Field(float, 0.0, min=0.0,
                                   doc="goodput_steady_bps leaves out each flow's first seconds"),
                 "zero_goodput": Field(str, "error", choices=("error", "warning"),
                                       doc="a timed flow that delivered nothing by its "
                                           "planned end: an error of the run naming it; "
                                           "warning where starvation is the finding (Wu "
                                           "et al.'s drop-tail downstream flows)"),
                 "plots": Field(bool, True,
                                doc="each run's PNGs and the comparison's; false: the summary "
                                    "and the report's tables only (a sweep of many points, "
                                    "which draws its own plots: about 1 s of CPU per run "
                                    "saved)")},
    "timeouts": {
        "startup_s": Field(float, 30.0, min=1.0, doc="daemons and radio ready"),
        "grace_s": Field(float, 15.0, min=1.0, doc="after duration_s, for flows to end"),
        "overrun_s": Field(float, 3.0, min=0.5, max=3600.0,
                           doc="a timed flow (iperf3 -t) still running this long (plus 3 "
                               "round trips) after its planned end, e.g. one that connected "
                               "late, is stopped; its goodput counts only what its receiver "
                               "got by the planned end"),
    },
    "watchdog": {
        "slots": _daemon("watchdog.slots",
                         doc="the apd exits (status 4) and the runner fails the run when no "
                             "slot_request came for this many slots; 0 = off"),
        "stats_period_s": _daemon("watchdog.stats_period_s",
                                doc="the apd writes its stats (and flushes its traces) this "
                                    "often, so a crash leaves recent figures"),
        "client_slots": _daemon("watchdog.client_slots",
                              doc="the apd exits (status 5) and the run fails when a client "
                                  "sent nothing on the uplink (its CQI reports) for this many "
                                  "slot requests: the client is hung or gone; 0 = off"),
    },
    "faults": {
        "apd_restart_at_s": Field((float, _NONE), None, min=0.0,
                                  doc="SIGKILL the apd at this time after t0 and start it "
                                      "again (a new MAC session): the restart test"),
        "phy_freeze_at_s": Field((float, _NONE), None, min=0.0,
                                 doc="SIGSTOP the PHY at this time after t0: a hung PHY, "
                                     "which the watchdog must notice (the run fails)"),
        "signals": ListOf({  # the reliability tests' hook: a hung or crashed daemon
            "process": Field(str, doc="a process of processes.json: apd, client.<device>, "
                                      "phy, ..."),
            "signal": Field(str, choices=("STOP", "KILL", "SEGV", "ABRT", "TERM")),
            "at_s": Field(float, min=0.0, doc="after t0"),
        }),
        "chaos": {  # python -m oppsched.testbed.chaos between the PHY and the daemons (abstract PHY)
            "enabled": Field(bool, False),
            "seed": Field(int, 1, min=0),
            "drop": Field(float, 0.0, min=0.0, max=1.0, doc="probability per message"),
            "duplicate": Field(float, 0.0, min=0.0, max=1.0),
            "reorder": Field(float, 0.0, min=0.0, max=1.0,
                             doc="held and sent after the next message of its link"),
            "delay": Field(float, 0.0, min=0.0, max=1.0, doc="held for delay_ms"),
            "delay_ms": Field(float, 2.0, min=0.0, max=1000.0),
            "forge": Field(float, 0.0, min=0.0, max=1.0,
                           doc="probability that a client's TB (addressed, CRC ok) gets one "
                               "byte changed with a valid CRC: a forged TB, which only "
                               "pdu.integrity_tag catches"),
            "record": Field(bool, False,
                            doc="the first 16 TBs of each client (addressed, CRC ok) written "
                                "to RUN_DIR/chaos.recorded.jsonl: what a receiver in range "
                                "records, for replay_from in a later run"),
            "replay_from": Field((str, _NONE), None,
                                 doc="a chaos.recorded.jsonl of an earlier run: its TBs replace "
                                     "this run's (addressed, CRC ok) with probability replay, "
                                     "a replay over the air across runs, which only "
                                     "pdu.integrity_tag's run binding catches"),
            "replay": Field(float, 0.0, min=0.0, max=1.0,
                            doc="probability per addressed TB (CRC ok) with replay_from"),
        },
    },
    "extra": {
        "apd": Field(dict, {}, doc="merged into apd.yaml"),
        "client": Field(dict, {}, doc="merged into every client.<dev>.yaml"),
        "phy": Field(dict, {}, doc="merged into phy.yaml"),
    },
}


# ----------------------------------------------------------------------------------------
# Cross-field checks (runner.load_experiment calls check() on every resolved variant)


def check(cfg: dict) -> None:
    """Impossible combinations, each a ConfigError naming the field and the value; also
    resolves the defaults that depend on other fields (pdu.integrity_tag)."""
    resolve_integrity_tag(cfg)
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
        rep = f["repeat"]
        if rep["idle_s"] is not None and rep["idle_mean_s"] is not None:
            raise ConfigError(f"{p}.repeat.idle_mean_s: {rep['idle_mean_s']!r} with idle_s "
                              f"{rep['idle_s']!r}: the idle time is fixed or exponential, "
                              "not both")
        if rep["idle_mean_s"] is not None and not (math.isfinite(rep["idle_mean_s"])
                                                   and rep["idle_mean_s"] > 0):
            raise ConfigError(f"{p}.repeat.idle_mean_s: {rep['idle_mean_s']!r} is not > 0 "
                              "(the mean of an exponential idle time; idle_s: 0 for back to "
                              "back transfers)")
        if repeated(f):
            if f["bytes"] is None:
                raise ConfigError(f"{p}.repeat: {_repeat_text(rep)} without bytes: a repeated "
                                  "flow transfers `bytes` bytes each time (e.g. bytes: 4000)")
            if f["parallel"] != 1:
                raise ConfigError(f"{p}.parallel: {f['parallel']!r} with repeat: each "
                                  "transfer is one TCP connection")
            if f["direction"] != "down":
                raise ConfigError(f"{p}.direction: {f['direction']!r} with repeat: repeated "
                                  "transfers are downloads (the server sends each file); "
                                  "an upstream flow is one iperf3 run")
        else:
            for key, unset in (("count", None), ("connection", "new"),
                               ("until_flows_end", None)):
                if rep[key] != unset:
                    raise ConfigError(f"{p}.repeat.{key}: {rep[key]!r} without repeat.idle_s "
                                      "or repeat.idle_mean_s (idle_s: 0 for back to back "
                                      "transfers)")
        if rep["until_flows_end"] is not None:
            _check_until_flows_end(cfg["flows"], i)
        if f["bytes"] is not None and f["stop_s"] is not None and not repeated(f):
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
        _check_wrc_flow(f, p)
        _check_mss(cfg, f, p)
    _check_flow_routes(cfg)
    _check_ssthresh(cfg)
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
    _check_scheduler(cfg["scheduler"], len(cfg["devices"]))
    a = cfg["aqm"]
    if a["kind"] == "droptail" and a["params"]:
        raise ConfigError(f"aqm.params: {a['params']!r}: drop-tail has no parameters")
    _check_aqm_params(cfg)
    _check_keys(cfg)
    m = cfg["tcp"]["spm_marking"]
    if m["enabled"] and a["priority_dscp"] is not None and a["priority_dscp"] != m["dscp"]:
        raise ConfigError(f"aqm.priority_dscp: {a['priority_dscp']!r} differs from "
                          f"tcp.spm_marking.dscp ({m['dscp']}), the code point the senders "
                          "write; leave it null")
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
    if cfg["phy"]["mode"] != "sample" and cfg["phy"]["sample"]["sample_rate"] != 1e6:
        raise ConfigError(
            f"phy.sample.sample_rate: {cfg['phy']['sample']['sample_rate']!r} with phy.mode "
            f"{cfg['phy']['mode']}: only the sample PHY has it"
            + (" (the radios' rate is phy.uhd.sample_rate)" if cfg["phy"]["mode"] == "uhd"
               else ""))
    if cfg["phy"]["mode"] == "uhd":
        _check_uhd(cfg)
    if cfg["phy"]["mcs_table"] and str(cfg["phy"]["mcs_table"]).endswith(".csv") and not \
            paths.data_file(cfg["phy"]["mcs_table"]).is_file():
        raise ConfigError(f"phy.mcs_table: {cfg['phy']['mcs_table']!r}: no such file")
    if daemonconf.error_model(cfg) == "curves":
        lc = cfg["phy"]["link_curves"]
        if not lc:
            raise ConfigError("phy.link_curves: required with error_model curves (a CSV "
                              "mcs,snr_db,bler from `oppsched linkcurves`)")
        if not paths.data_file(lc).is_file():
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
        if model == "trace" and not paths.data_file(ch["trace"]).is_file():
            raise ConfigError(f"devices[{i}].channel.trace: {ch['trace']!r}: no such file")
        if model != "trace" and ch["trace"]:
            raise ConfigError(f"devices[{i}].channel.trace: {ch['trace']!r} given but the model "
                              f"is {model!r}")
    _check_link_mode(cfg)
    w = cfg["reassembly"]["window"]
    if cfg["pdu"]["format"] == "compact" and w is not None and w > names.PDU_COMPACT_MAX_WINDOW:
        raise ConfigError(f"reassembly.window: {w} with pdu.format compact, whose 12-bit "
                          f"sequence numbers allow at most {names.PDU_COMPACT_MAX_WINDOW}")
    hm = cfg["harq"]
    if hm["feedback_timeout_slots"] <= cfg["phy"]["lead_slots"]:
        raise ConfigError(f"harq.feedback_timeout_slots: {hm['feedback_timeout_slots']} is not "
                          f"more than phy.lead_slots ({cfg['phy']['lead_slots']}): feedback could "
                          "never arrive in time")
    if cfg["capture"]["iq"] and cfg["phy"]["mode"] not in ("sample", "uhd"):
        raise ConfigError(f"capture.iq: true with phy.mode {cfg['phy']['mode']!r}: only the "
                          "sample-level PHYs (sample, uhd) have samples to record")
    if cfg["capture"]["iq_last_s"] and cfg["capture"]["iq_trigger"] != "none":
        raise ConfigError(f"capture.iq_last_s: {cfg['capture']['iq_last_s']!r} with "
                          f"iq_trigger {cfg['capture']['iq_trigger']!r}: the last seconds "
                          "are kept whole")
    wc = cfg["wrc"]
    if wc["delta_max"] < wc["delta_initial"]:
        raise ConfigError(f"wrc.delta_max: {wc['delta_max']!r} is below wrc.delta_initial "
                          f"({wc['delta_initial']!r})")
    if wc["max_rate_pps"] and wc["max_rate_pps"] < wc["min_rate_pps"]:
        raise ConfigError(f"wrc.max_rate_pps: {wc['max_rate_pps']!r} is below "
                          f"wrc.min_rate_pps ({wc['min_rate_pps']!r})")
    for k, v in cfg["tcp"]["extra"].items():
        if not re.fullmatch(r"net\.[a-z0-9_.]+", str(k)):
            raise ConfigError(f"tcp.extra.{k}: not a net.* sysctl name")


def _check_wrc_flow(f: dict, p: str) -> None:
    """A flow's transport and the keys that belong to one transport only."""
    if f["transport"] == "wrc":
        for key in ("mss_bytes", "initcwnd", "ssthresh"):
            if f[key] is not None:
                raise ConfigError(f"{p}.{key}: {f[key]!r} with transport wrc: a TCP setting "
                                  "(a wrc flow's datagrams are packet_bytes)")
    if f["transport"] != "wrc":
        for key in ("weight", "packet_bytes"):
            if f[key] is not None:
                raise ConfigError(f"{p}.{key}: {f[key]!r} with transport {f['transport']!r}: "
                                  "only a wrc flow has one (transport: wrc)")
        return
    for key, bad, why in (("bytes", f["bytes"] is not None, "a wrc flow runs from start_s "
                           "to stop_s"),
                          ("repeat", repeated(f), "a wrc flow is one paced stream"),
                          ("cc", f["cc"] is not None, "wrc is its own rate control"),
                          ("parallel", f["parallel"] != 1, "a wrc flow is one stream"),
                          ("family", f["family"] != "ipv4", "oppsched-wrc speaks IPv4"),
                          ("direction", f["direction"] != "down",
                           "oppsched-wrc sends from the server to the device")):
        if bad:
            val = _repeat_text(f["repeat"]) if key == "repeat" else f[key]
            raise ConfigError(f"{p}.{key}: {val!r} with transport wrc: {why}")


def flow_timestamps(cfg: dict, flow: dict) -> bool:
    """True where the flow's connections carry the timestamp option: both its ends (the
    server's and the device's namespace) have net.ipv4.tcp_timestamps on."""
    def on(spec):
        t = (spec.get("tcp") or {}).get("timestamps")
        return cfg["tcp"]["timestamps"] if t is None else t
    srv = next(s for s in cfg["servers"] if s["name"] == flow["server"])
    dev = next(d for d in cfg["devices"] if d["name"] == flow["device"])
    return bool(on(srv) and on(dev))


def mss_option(cfg: dict, flow: dict) -> int | None:
    """The MSS the flow's routes (advmss) and iperf3 -M set for flows[].mss_bytes: the
    payload plus the timestamp option's bytes, which Linux takes out of the MSS of every
    segment (tcp_mtu_to_mss); None when mss_bytes is null."""
    if flow.get("mss_bytes") is None:
        return None
    return int(flow["mss_bytes"]) + (TIMESTAMP_OPTION_BYTES if flow_timestamps(cfg, flow)
                                     else 0)


def _check_mss(cfg: dict, f: dict, p: str) -> None:
    """flows[].mss_bytes within what TCP_MAXSEG accepts and what the path MTU carries (a
    larger MSS would be cut to the MTU's without a word)."""
    mss = mss_option(cfg, f)
    if mss is None:
        return
    ts = flow_timestamps(cfg, f)
    opt = f" + {TIMESTAMP_OPTION_BYTES} bytes of timestamps" if ts else ""
    if mss < TCP_MIN_MSS:
        least = TCP_MIN_MSS - (mss - f["mss_bytes"])
        raise ConfigError(f"{p}.mss_bytes: {f['mss_bytes']!r}{opt} is below Linux's smallest "
                          f"MSS ({TCP_MIN_MSS} bytes): at least {least}")
    mtu, hdr = cfg["topology"]["mtu"], IP_TCP_HEADER_BYTES[f["family"]]
    if mss + hdr > mtu:
        raise ConfigError(f"{p}.mss_bytes: {f['mss_bytes']!r}{opt} + {hdr} bytes of "
                          f"{f['family']} and TCP headers exceeds topology.mtu ({mtu}): at "
                          f"most {mtu - hdr - (mss - f['mss_bytes'])}")


def flow_ssthresh(cfg: dict, flow: dict) -> int | None:
    """The slow-start threshold (segments) a TCP flow's connections start with:
    flows[].ssthresh, else tcp.ssthresh; None: the kernel's (none)."""
    if is_wrc(flow):
        return None
    own = flow.get("ssthresh")
    return own if own is not None else (cfg.get("tcp") or {}).get("ssthresh")


def flow_cc(cfg: dict, flow: dict) -> str:
    """The congestion control of a TCP flow's connections."""
    return flow.get("cc") or cfg["tcp"]["congestion_control"]


def flow_routes(cfg: dict) -> list[dict]:
    """The host routes of flows[].mss_bytes, initcwnd and ssthresh: one per (server,
    device, family) whose flows set any, applied at both ends (the server's route to the
    device and the device's to the server, so each end advertises the MSS and a sender at
    either end starts with the window and the threshold): {server, device, family, flows
    (ids), advmss, initcwnd, ssthresh, cc} (None: not set on the route). A server's route
    without a flow initcwnd keeps tcp.initcwnd, which its default route carries. check()
    has refused pairs whose flows disagree."""
    out: dict[tuple, dict] = {}
    for f in cfg["flows"]:
        ss = flow_ssthresh(cfg, f)
        if is_wrc(f) or (f.get("mss_bytes") is None and f.get("initcwnd") is None
                         and ss is None):
            continue
        key = (f["server"], f["device"], f["family"])
        r = out.setdefault(key, {"server": f["server"], "device": f["device"],
                                 "family": f["family"], "flows": [],
                                 "advmss": mss_option(cfg, f), "initcwnd": f.get("initcwnd"),
                                 "ssthresh": ss, "cc": flow_cc(cfg, f)})
        r["flows"].append(f["id"])
    return list(out.values())


def _check_flow_routes(cfg: dict) -> None:
    """Flows between the same server and device (and family) share the routes that carry
    mss_bytes and initcwnd: their values must agree (a flow leaving one null would get the
    other's too)."""
    first: dict[tuple, tuple[int, dict]] = {}
    for i, f in enumerate(cfg["flows"]):
        if is_wrc(f):
            continue
        key = (f["server"], f["device"], f["family"])
        if key not in first:
            first[key] = (i, f)
            continue
        j, g = first[key]
        for k in ("mss_bytes", "initcwnd", "ssthresh"):
            if f[k] != g[k]:
                raise ConfigError(
                    f"flows[{i}].{k}: {f[k]!r} differs from flows[{j}].{k} ({g[k]!r}): flows "
                    f"{g['id']!r} and {f['id']!r} share the {f['family']} routes between "
                    f"{f['server']!r} and {f['device']!r}, which carry the setting; give "
                    "them the same value (or another server or device)")


def _check_ssthresh(cfg: dict) -> None:
    """An initial ssthresh reaches a connection through the kernel's TCP metrics cache,
    which then also keeps the ssthresh every other connection of that namespace leaves
    behind (oppsched.testbed.tcp_metrics.SYSCTLS): so every
    TCP flow of a server, and of a device, has one or none has. Its connections must use a
    congestion control that starts from it (BBR sets its own)."""
    tcp = [(i, f) for i, f in enumerate(cfg["flows"]) if not is_wrc(f)]
    for i, f in tcp:
        ss = flow_ssthresh(cfg, f)
        if ss is not None and flow_cc(cfg, f) == "bbr":
            key = "ssthresh" if f.get("ssthresh") is not None else None
            raise ConfigError(
                (f"flows[{i}].ssthresh: {ss}" if key else f"tcp.ssthresh: {ss}")
                + f" with congestion control bbr (flow {f['id']!r}): BBR sets its own "
                  "ssthresh when a connection starts; use reno or cubic, or no ssthresh")
    for end in ("server", "device"):
        seen: dict[str, tuple[int, dict]] = {}
        for i, f in tcp:
            has = flow_ssthresh(cfg, f) is not None
            if f[end] not in seen:
                seen[f[end]] = (i, f)
                continue
            j, g = seen[f[end]]
            if has != (flow_ssthresh(cfg, g) is not None):
                a, b = (i, f) if has else (j, g)
                c, d = (j, g) if has else (i, f)
                raise ConfigError(
                    f"flows[{c}].ssthresh: null while flows[{a}] ({b['id']!r}) sets "
                    f"{flow_ssthresh(cfg, b)}, and both use {end} {f[end]!r}: a namespace "
                    "that starts connections at an ssthresh keeps every connection's "
                    f"ssthresh for the next one, so give flow {d['id']!r} one too "
                    "(or set tcp.ssthresh for all)")


def is_wrc(flow: dict) -> bool:
    """A flow of the weighted rate control (oppsched-wrc) rather than TCP."""
    return flow.get("transport", "tcp") == "wrc"


def wrc_weight(flow: dict) -> float:
    return float(flow["weight"]) if flow.get("weight") is not None else 1.0


def wrc_packet_bytes(flow: dict) -> int:
    return int(flow["packet_bytes"]) if flow.get("packet_bytes") is not None \
        else WRC_DEFAULT_PACKET_BYTES


def _check_until_flows_end(flows: list, i: int) -> None:
    """flows[i].repeat.until_flows_end names other flows of the file, each of which ends by
    itself: otherwise the flow would run to its stop time anyway, and the file would not
    say what it means."""
    p = f"flows[{i}].repeat.until_flows_end"
    ids = {f["id"]: f for f in flows}
    names = flows[i]["repeat"]["until_flows_end"]
    for name in names:
        if name not in ids:
            raise ConfigError(f"{p}: {name!r} is not a flows[].id ({', '.join(sorted(ids))})")
        if name == flows[i]["id"]:
            raise ConfigError(f"{p}: {name!r} is the flow itself")
        g = ids[name]
        if g["repeat"]["until_flows_end"] is not None:
            raise ConfigError(f"{p}: {name!r} itself ends with other flows "
                              f"(its repeat.until_flows_end): name the flows it waits for")
        ends = g["stop_s"] is not None or (g["repeat"]["count"] is not None if repeated(g)
                                           else g["bytes"] is not None)
        if not ends:
            raise ConfigError(f"{p}: {name!r} does not end by itself before the run's end "
                              "(give it repeat.count, or bytes or stop_s)")
    if len(set(names)) != len(names):
        raise ConfigError(f"{p}: {names!r} names a flow twice")


def repeated(flow: dict) -> bool:
    """A flow of repeated transfers (oppsched.testbed.transfers) rather than one iperf3 run: its
    repeat section names an idle time."""
    rep = flow.get("repeat") or {}
    return rep.get("idle_s") is not None or rep.get("idle_mean_s") is not None


def describe_repeat(flow: dict) -> str:
    """One line for `oppsched check`: how a flow of repeated transfers repeats."""
    rep = flow["repeat"]
    idle = (f"exponential idle times of mean {rep['idle_mean_s']:g} s"
            if rep["idle_mean_s"] is not None else
            "back to back" if not rep["idle_s"] else f"{rep['idle_s']:g} s apart")
    conn = ("one connection for all (repeat.connection: reuse)"
            if rep["connection"] == "reuse" else
            "a new connection each (repeat.connection: new)")
    ends = []
    if rep["count"] is not None:
        ends.append(f"{rep['count']} transfers")
    if rep["until_flows_end"]:
        ends.append(f"the end of {', '.join(rep['until_flows_end'])}")
    ends.append("stop_s" if flow["stop_s"] is not None else "duration_s")
    return (f"{flow['bytes']} bytes per transfer, {idle}, {conn}; until "
            + " or ".join(ends))


def _repeat_text(rep: dict) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in rep.items() if v is not None) + "}"


def resolve_integrity_tag(cfg: dict) -> None:
    """pdu.integrity_tag null (the default) becomes true when the run uses radios (phy.mode
    uhd: anyone in range can transmit) and false otherwise (the abstract and sample PHYs
    carry TBs inside the host). An explicit value is kept: false with a radio is the opt-out
    that integrity_opt_out() names."""
    pdu = cfg.get("pdu")
    if isinstance(pdu, dict) and pdu.get("integrity_tag") is None:
        pdu["integrity_tag"] = (cfg.get("phy") or {}).get("mode") == "uhd"


def integrity_opt_out(cfg: dict) -> str | None:
    """The warning of a radio run without the integrity tag (pdu.integrity_tag: false with
    phy.mode uhd), None for any other run."""
    if (cfg.get("phy") or {}).get("mode") != "uhd" or (cfg.get("pdu") or {}).get("integrity_tag"):
        return None
    return ("pdu.integrity_tag: false with phy.mode uhd: the radio link is not authenticated "
            "(a transmitter in range can inject TBs and replay another run's; "
            "docs/security.md, \"Forged and replayed TBs\")")


def _check_keys(cfg: dict) -> None:
    """security.keys_dir holds every key file the run needs (docs/security.md), so that
    `oppsched check` finds a missing one before a run starts."""
    from oppsched.testbed import keys  # pyzmq: only runs that use keys need it
    kd = cfg["security"]["keys_dir"]
    curve, tag = cfg["security"]["curve"], cfg["pdu"]["integrity_tag"]
    if kd is None or not (curve or tag):
        return
    names = [d["name"] for d in cfg["devices"]]
    hint = f"`oppsched keys generate {kd} --users {' '.join(names)}`"
    if not Path(kd).is_dir():
        raise ConfigError(f"security.keys_dir: {kd!r} is not a directory (make it with {hint})")
    for name in keys.required(names, curve, tag):
        if not (Path(kd) / name).is_file():
            raise ConfigError(f"security.keys_dir: {kd!r} has no {name} (add it with {hint}; "
                              "existing keys are kept)")


def _check_link_mode(cfg: dict) -> None:
    """link_adaptation.mode paper needs the abstract PHY's genie SNR report, the end-of-slot
    rule on the TB's own bits, and no chase combining."""
    if cfg["link_adaptation"]["mode"] != "paper":
        return
    p = cfg["phy"]
    if p["mode"] != "abstract":
        raise ConfigError(f"link_adaptation.mode: 'paper' needs phy.mode abstract, not "
                          f"{p['mode']!r} (only the abstract PHY knows the SNR at a slot's "
                          "start before the slot)")
    if daemonconf.error_model(cfg) != "end_of_slot":
        raise ConfigError(f"phy.error_model: {daemonconf.error_model(cfg)!r} with "
                          "link_adaptation.mode paper, which needs end_of_slot (eq. 18's "
                          "error rule)")
    if p["chase_combining"]:
        raise ConfigError("phy.chase_combining: true with link_adaptation.mode paper (the "
                          "paper's link layer resends whole packets; leave it null)")


def _check_uhd(cfg: dict) -> None:
    """phy.mode uhd: every radio named by its args, each radio a different device, and its
    settings within its device profile (firmware/profiles)."""
    check_radio_args([("phy.uhd.ap", cfg["phy"]["uhd"]["ap"])] + [
        (f"devices[{i}].uhd", d["uhd"]) for i, d in enumerate(cfg["devices"])],
        " with phy.mode uhd")
    u = cfg["phy"]["uhd"]
    medium = cfg["medium"]["mode"] != "none"  # uplink slots over the air: TDD
    if medium:
        check_common_time([(f, r) for f, r, _ in uhd_radios(cfg)],
                          f" with medium.mode {cfg['medium']['mode']} over the air")
    for field, r, role in uhd_radios(cfg):
        name, where = radio_profile(cfg, r, field)
        p = devices.profile(name, where)
        if not devices.profile_checks_are_deferred():  # oppsched preflight reports them
            check = devices.check_radio_both_ways if medium else devices.check_radio
            check(p, r, u["sample_rate"], role, field)


def uhd_radios(cfg: dict) -> list[tuple[str, dict, str]]:
    """(experiment field, settings with the client frequency resolved, 'tx' or 'rx') of
    every radio of phy.mode uhd: the AP's, then each device's."""
    ap = cfg["phy"]["uhd"]["ap"]
    out = [("phy.uhd.ap", ap, "tx")]
    for i, d in enumerate(cfg["devices"]):
        r = dict(d["uhd"])
        if r["freq_hz"] is None:
            r["freq_hz"] = ap["freq_hz"]
        out.append((f"devices[{i}].uhd", r, "rx"))
    return out


def radio_profile(cfg: dict, r: dict, field: str) -> tuple[str, str]:
    """(profile name, the key that names it) of a radio: its own `device`, else
    phy.uhd.device; ConfigError if neither is set."""
    if r["device"]:
        return r["device"], f"{field}.device"
    if cfg["phy"]["uhd"]["device"]:
        return cfg["phy"]["uhd"]["device"], "phy.uhd.device"
    raise ConfigError(f"phy.uhd.device: required with phy.mode uhd (or {field}.device): the "
                      f"radios' profile, one of {', '.join(devices.profiles())} "
                      "(firmware/profiles)")


# What the MAC library's own check adds to the schema's: the C++ configuration check of the
# scheduler's and the AQM's parameters (an AQM's parameter names and ranges, the constraints
# between parameters) and loading a python plugin as the apd loads it.
MAC_CHECKS = ("scheduler and aqm parameters through the MAC library, python plugins, C++ "
              "plugins (scheduler.library opened)")


def mac_checks() -> bool:
    """Whether the MAC library is there for its own configuration check. Without a build,
    `oppsched check` checks the rest and says that these were left out (MAC_CHECKS); a run
    needs the build and so always has them."""
    return build.available(build.MAC)


def _check_scheduler(s: dict, devices: int) -> None:
    """The scheduler's parameters: another kind's is refused, then the kind's are built by
    the C++ registry (oppsched.mac.make_scheduler), which the apd reads them through too."""
    specs = registry.scheduler_param_specs()
    takes = registry.scheduler_params(s)
    _check_scheduler_plugin(s, devices)
    for name, spec in specs.items():
        if name not in takes and s[name] != (spec["default"] if spec["default"] is not None
                                             else []):
            raise ConfigError(f"scheduler.{name}: {s[name]!r} is only for scheduler.kind "
                              f"{' or '.join(registry.takers(name))}")
    if "weights" in takes and len(s["weights"]) != devices:
        raise ConfigError(f"scheduler.weights: {s['weights']!r} has {len(s['weights'])} entries, "
                          f"{s['kind']} needs one per device ({devices})")
    if s["kind"] in plugin.PLUGIN_KINDS or not mac_checks():
        return
    try:
        mac.make_scheduler(s["kind"], takes, num_users=devices)
    except ValueError as exc:
        raise ConfigError(str(exc).replace("sched.", "scheduler.", 1)) from None


def _check_scheduler_plugin(s: dict, devices: int) -> None:
    """scheduler.kind python: the plugin is loaded as the apd will load it (the file, the class,
    its methods' signatures, the constructor with `params`); a plugin that cannot be used is
    refused naming the file, the class and the reason. scheduler.kind plugin: the library is
    opened as the apd opens it (the entry point, its ABI version and family, its params) and
    refused with the field, the path and the reason. Each kind takes only its own fields."""
    own = plugin.KIND_FIELDS.get(s["kind"], ())
    for name in plugin.PLUGIN_FIELDS:
        if name not in own and s[name] != plugin.scheduler_fields()[name].default:
            raise ConfigError(f"scheduler.{name}: {s[name]!r} is only for scheduler.kind "
                              + " or ".join(k for k in plugin.PLUGIN_KINDS
                                            if name in plugin.KIND_FIELDS[k]))
    if s["kind"] == plugin.CPP_KIND:
        if not s["library"]:
            raise ConfigError("scheduler.library: required with scheduler.kind plugin (the "
                              "plugin's shared library)")
        why = plugin.check_library(s["library"])
        if why:
            raise ConfigError(f"scheduler.library: {s['library']}: {why}")
    elif s["kind"] == plugin.PYTHON_KIND:
        for name in ("file", "class"):
            if not s[name]:
                raise ConfigError(f"scheduler.{name}: required with scheduler.kind python")
    else:
        return
    if not mac_checks():
        return
    try:
        mac.make_scheduler(s["kind"], plugin.scheduler_params(s), num_users=devices)
    except ValueError as exc:
        msg = str(exc).replace("sched.", "scheduler.", 1)
        raise ConfigError(msg if s["kind"] == plugin.CPP_KIND else "scheduler: " + msg) from None


def _check_aqm_params(cfg: dict) -> None:
    """AQM parameters through the C++ configuration check (oppsched.mac.make_aqm), the one
    place they are validated."""
    a = cfg["aqm"]
    own = {plugin.PYTHON_KIND: ("file", "class"), plugin.CPP_KIND: ("library",)}
    for k, names in own.items():
        for name in names:
            if a["kind"] != k and a[name] is not None:
                raise ConfigError(f"aqm.{name}: {a[name]!r} is only for aqm.kind {k}")
    if a["kind"] == plugin.CPP_KIND:
        if not a["library"]:
            raise ConfigError("aqm.library: required with aqm.kind plugin (the plugin's shared "
                              "library)")
        why = plugin.check_library(a["library"])
        if why:
            raise ConfigError(f"aqm.library: {a['library']}: {why}")
        if cfg["queue"]["mode"] != "per_user":
            raise ConfigError("aqm.kind: plugin runs in per_user queues only "
                              f"(queue.mode {cfg['queue']['mode']})")
        if not mac_checks():
            return
        try:
            mac.make_aqm(plugin.CPP_KIND, {"library": a["library"], "params": dict(a["params"])},
                         limit_bytes=cfg["queue"]["limit_bytes"],
                         limit_packets=cfg["queue"]["limit_packets"], ecn=a["ecn"])
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return
    if a["kind"] == plugin.PYTHON_KIND:
        for name in ("file", "class"):
            if not a[name]:
                raise ConfigError(f"aqm.{name}: required with aqm.kind python")
        if cfg["queue"]["mode"] != "per_user":
            raise ConfigError("aqm.kind: python runs in per_user queues only "
                              f"(queue.mode {cfg['queue']['mode']})")
        if not mac_checks():
            return
        try:
            mac.make_aqm(plugin.PYTHON_KIND, {"file": a["file"], "class": a["class"],
                                              "params": dict(a["params"])},
                         limit_bytes=cfg["queue"]["limit_bytes"],
                         limit_packets=cfg["queue"]["limit_packets"], ecn=a["ecn"])
        except ValueError as exc:
            raise ConfigError(f"aqm: {exc}") from None
        return
    reserved = {"limit_bytes", "limit_packets", "ecn", "spare_handshake", "mark_not_ect",
                "seed"} & set(a["params"])
    if reserved:
        raise ConfigError(f"aqm.params.{sorted(reserved)[0]}: set it in queue/aqm, not in params")
    if not mac_checks():
        return
    try:
        mac.make_aqm(a["kind"], limit_bytes=cfg["queue"]["limit_bytes"],
             limit_packets=cfg["queue"]["limit_packets"], ecn=a["ecn"],
             spare_handshake=a["spare_handshake"],
             mark_not_ect=a["mark_not_ect"], **a["params"])
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"aqm.params: {exc}") from None


def resolved_ecn(cfg: dict) -> int:
    e = cfg["tcp"]["ecn"]
    if e == "auto":
        return 1 if (cfg["aqm"]["ecn"] and cfg["aqm"]["kind"] in MARKING_AQMS) else 0
    return int(e)
