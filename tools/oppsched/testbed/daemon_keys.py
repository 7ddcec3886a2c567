"""Which experiment keys each daemon takes unchanged, under which of its own keys, and where
the experiment departs from the daemon's field table on purpose; and fill(), which writes
those keys into a daemon's file where daemonconf's layout leaves a place (MAPPED).

The experiment schema (oppsched.experiments.testbed.schema) builds the Fields of these keys
from the daemons' tables (oppsched.daemon_fields) under DEPARTURES; daemonconf writes them
with fill(); tools/tests/test_field_tables.py diffs the two.
"""

from __future__ import annotations

# Experiment keys a daemon takes unchanged, and the daemon keys they become (daemon, dotted
# key; "phy" is the PHY's own Field table, oppsched.phy.common.SCHEMA). Their types, defaults
# and ranges are the first daemon's (oppsched.daemon_fields: `oppsched-apd --schema`), so
# this schema keeps none of its own; tools/tests/test_field_tables.py fails, naming the key,
# when a Field here and a daemon's table disagree.
DAEMON_KEYS = {
    "phy.lead_slots": (("apd", "lead_slots"), ("phy", "lead_slots")),
    "queue.mode": (("apd", "queue.mode"),),
    "clamp.enabled": (("apd", "clamp.enabled"), ("client", "clamp.enabled")),
    "clamp.a_bytes": (("apd", "clamp.a_bytes"),),
    "clamp.mu_c": (("apd", "clamp.mu_c"),),
    "scheduler.alpha": (("apd", "scheduler.alpha"),),
    "scheduler.lambda": (("apd", "scheduler.lambda"),),
    "harq.processes": (("apd", "harq.processes"),),
    "harq.feedback_timeout_slots": (("apd", "harq.feedback_timeout_slots"),),
    "pdu.format": (("apd", "pdu.format"), ("client", "station.pdu_format")),
    "watchdog.slots": (("apd", "watchdog_slots"),),
    # the client agent's (oppsched-client --schema)
    "clamp.tau_bytes": (("client", "clamp.tau_bytes"),),
    "clamp.alpha_packets": (("client", "clamp.alpha_packets"),),
    "clamp.beta": (("client", "clamp.beta"),),
    "clamp.max_increase_bytes": (("client", "clamp.max_increase_bytes"),),
    "clamp.min_window_bytes": (("client", "clamp.min_window_bytes"),),
    "clamp.slow_start_threshold_bytes": (("client", "clamp.slow_start_threshold_bytes"),),
    "clamp.mu_min_span_s": (("client", "clamp.mu_min_span_s"),),
    "uplink_delay_ms": (("client", "uplink_delay_ms"),),
    "residual_loss": (("client", "residual_loss.probability"),),
    "cqi.period_slots": (("client", "cqi.period_slots"),),
    "medium.station_buffer_packets": (("client", "station.buffer_packets"),
                                      ("apd", "medium.station_buffer_packets")),
    "medium.status_period_ms": (("client", "station.status_period_ms"),),
    "reassembly.max_bytes": (("client", "reassembly.max_bytes"),),
    # the rest of apd.yaml (and client.*.yaml) that daemonconf copies unchanged
    "watchdog.client_slots": (("apd", "client_watchdog_slots"),),
    "watchdog.stats_period_s": (("apd", "stats_period_s"),),
    "queue.limit_bytes": (("apd", "queue.limit_bytes"),),
    "queue.limit_packets": (("apd", "queue.limit_packets"),),
    "devices[].queue.limit_bytes": (("apd", "users[].queue_limit_bytes"),),
    "aqm.ecn": (("apd", "aqm.ecn"),),
    "aqm.spare_handshake": (("apd", "aqm.spare_handshake"),),
    "aqm.mark_not_ect": (("apd", "aqm.mark_not_ect"),),
    "clamp.b": (("apd", "clamp.b"),),
    "clamp.ema_rate_per_s": (("apd", "clamp.ema_rate_per_s"),),
    "scheduler.harq_first": (("apd", "scheduler.harq_first"),),
    "link_adaptation.mode": (("apd", "link_adaptation.mode"),),
    "link_adaptation.olla": (("apd", "link_adaptation.olla"),),
    "link_adaptation.target_bler": (("apd", "link_adaptation.target_bler"),),
    "medium.mode": (("apd", "medium.mode"),),
    "medium.station_queue": (("apd", "medium.station_queue"),),
    "capture.mac_max_bytes": (("apd", "traces.mac_pcap_max_bytes"),
                              ("client", "traces.mac_pcap_max_bytes")),
    # the delay stage's options (oppsched-delay --schema), as testbed.links.delay_argv
    # passes them to each server's wired path (servers[]: every element)
    "servers[].rtt_ms": (("delay", "delay-ab-ms"), ("delay", "delay-ba-ms")),
    "servers[].rate_bps": (("delay", "rate-ab-bps"), ("delay", "rate-ba-bps")),
    "servers[].limit_bytes": (("delay", "limit-ab-bytes"), ("delay", "limit-ba-bytes")),
    "topology.rt_priority": (("delay", "rt-priority"),),
    "security.seccomp": (("apd", "seccomp"), ("client", "seccomp"), ("delay", "seccomp")),
}

# Where a mapped key departs from its daemons' entries on purpose, and why
# (oppsched.daemon_fields.departed: scale, a narrower min/max, another default, required).
# tools/tests/test_field_tables.py compares the Field with the daemon's entry under exactly
# this departure, and refuses one that would widen the daemon's range.
DEPARTURES = {
    # d_i is the round trip; the stage delays each direction by half of it
    "servers[].rtt_ms": {
        "scale": 2, "max": 60000.0, "required": True,
        "why": "a round trip of two one-way delays; the wired topology (netem too, "
               "testbed/wired.py) bounds the round trip, not each way, at 60 s"},
    "servers[].rate_bps": {
        "default": 100e6, "why": "Andrew & Hanly, CLAMP, Table I: 100 Mb/s wired paths; the "
                                 "stage alone runs unlimited"},
    "topology.rt_priority": {
        "default": 10, "why": "in a run the stages forward at SCHED_FIFO 10 so a frame "
                              "leaves on time; the stage alone schedules normally"},
    "queue.limit_bytes": {
        "default": 60000, "why": "Andrew & Hanly, CLAMP, §V-H: a 60 KB buffer; the apd alone "
                                 "has no byte limit"},
    "queue.limit_packets": {
        "default": 0, "why": "a run limits its queues in bytes (queue.limit_bytes); the apd "
                             "alone keeps 50 packets"},
    "devices[].queue.limit_bytes": {
        "nullable": True, "why": "null: the device's queue has queue.limit_bytes (the key is "
                                 "not written)"},
    "reassembly.max_bytes": {
        "nullable": True, "why": "null: the client's own default (the key is not written)"},
    "clamp.b": {
        "max": 1.5707963267948966,
        "why": "Andrew & Hanly, CLAMP, Theorem 1: the router is stable iff b < pi/2; an "
               "experiment stays in that region, the apd takes any b > 0"},
    "watchdog.stats_period_s": {
        "min": 0.1,
        "why": "every period the apd rewrites its stats file and flushes its traces: below "
               "0.1 s that is file I/O every few slots of the run's slot loop"},
}


# A value of a daemon's file that its layout below leaves to the mapping: fill() writes there
# the experiment's value of the key that DAEMON_KEYS maps onto it, so no experiment key
# is copied by hand (and each has the type, default and range of the daemon's field table).
MAPPED = object()


def _experiment_value(cfg: dict, key: str, index: int | None):
    """The value of dotted experiment key `key` ("devices[].queue.limit_bytes": of element
    `index`)."""
    node = cfg
    for part in key.split("."):
        node = node[part[:-2]][index] if part.endswith("[]") else node[part]
    return node


def _slots(conf: dict, daemon_key: str):
    """(mapping, key, list index) of every place of dotted `daemon_key` in `conf`
    ("users[].queue_limit_bytes": one per element of users); none where a section is absent."""
    places = [(conf, None)]
    *sections, name = daemon_key.split(".")
    for part in sections:
        nxt = []
        for node, index in places:
            if part.endswith("[]"):
                nxt += [(item, i) for i, item in enumerate(node.get(part[:-2]) or [])]
            elif isinstance(node.get(part), dict):
                nxt.append((node[part], index))
        places = nxt
    return [(node, name, index) for node, index in places]


def _unfilled(conf, path: str = "") -> list[str]:
    if isinstance(conf, dict):
        return [p for k, v in conf.items()
                for p in ([f"{path}{k}"] if v is MAPPED else _unfilled(v, f"{path}{k}."))]
    if isinstance(conf, list):
        return [p for i, v in enumerate(conf) for p in _unfilled(v, f"{path[:-1]}[{i}].")]
    return []


def fill(conf: dict, cfg: dict, daemon: str) -> dict:
    """Writes into `conf` (a daemon's file as built below) the experiment's value of every
    key DAEMON_KEYS maps onto `daemon`, where the layout put MAPPED; a nullable key
    (DEPARTURES) whose value is null is left out, so the daemon's own default applies.
    One loop over the mapping."""
    for key, targets in DAEMON_KEYS.items():
        departure = DEPARTURES.get(key) or {}
        for d, daemon_key in targets:
            if d != daemon:
                continue
            for node, name, index in _slots(conf, daemon_key):
                if node.get(name) is not MAPPED:
                    continue
                value = _experiment_value(cfg, key, index)
                if value is None and departure.get("nullable"):
                    del node[name]
                else:
                    node[name] = value / departure["scale"] if "scale" in departure else value
    left = _unfilled(conf)
    if left:
        raise ValueError(f"{daemon}: no experiment key maps onto {', '.join(left)} "
                         "(DAEMON_KEYS)")
    return conf
