"""What every PHY process shares (the abstract PHY, the loopback and the UHD PHY).

- phy.yaml: the abstract PHY's schema (SCHEMA), which the block PHYs extend; reading and
  validating a file against a schema (read_config); the cross-field checks, path resolution
  and default ipc:// endpoints in run_dir (resolve); the MCS table it names
  (load_mcs_table). docs/daemons.md, "Abstract PHY configuration", lists every key.
- phy.stats.json written so that a reader never sees half a file (write_json_atomic).
- SCHED_FIFO for the process (set_rt_priority).
- The command line (--config, --check, --set, --log-level) with logging to stderr
  (parse_args).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path

from oppsched import daemon_fields, mac
from oppsched.config import ConfigError, Field, ListOf, Renamed, apply_override, read_yaml
from oppsched.config import validate as validate_schema
from oppsched.names import (CHANNEL_MODEL_ALIASES, CHANNEL_MODELS, CLAMP_MEAN_SNR_DB,
                            ERROR_MODEL_ALIASES, ERROR_MODELS, FADING_MODELS, JAKES_GENERATORS,
                            SHANNON_TABLE_DEFAULTS, TABLE_ALIASES, TABLE_PRESETS, USER_NOBODY)
from oppsched.paths import write_atomic

log = logging.getLogger("oppsched.phy")


def _positive(v: float) -> str | None:
    return None if v > 0 else "is not > 0"


def _endpoint(v: str) -> str | None:
    if v == "" or re.fullmatch(r"(ipc|tcp|inproc)://.+", v):
        return None
    return "is not a ZeroMQ endpoint (ipc://PATH, tcp://HOST:PORT) or '' (the default)"


def _user_name(v: str) -> str | None:
    return None if re.fullmatch(r"[A-Za-z0-9_.-]+", v) else "is not a name of [A-Za-z0-9_.-]+"


_CHANNEL = {
    "model": Field(str, "jakes", choices=CHANNEL_MODELS, aliases=CHANNEL_MODEL_ALIASES),
    "doppler_hz": Field((float, type(None)), None, min=0.0, max=1e5),  # null = absent
    "mean_snr_db": Field(float, CLAMP_MEAN_SNR_DB, min=-100.0, max=100.0),
    "seed": Field((int, type(None)), None, min=0, max=2**64 - 1),  # null = derived
    "oscillators": Field(int, JAKES_GENERATORS, min=1, max=4096),
    "trace": Field(str, ""),
    "trace_loop": Field(bool, True),
}

_USER = {
    "id": Field(int, min=0, max=USER_NOBODY - 1),
    "name": Field(str, check=_user_name),
    "rx": Field(str, "", check=_endpoint),
    "channel": _CHANNEL,
}

SCHEMA = {
    "slot_s": Field(float, min=1e-5, max=1.0, check=_positive),
    # the apd's lead_slots (its one default and range, oppsched.daemon_fields): both ends of
    # the slot_request exchange read the same setting
    "lead_slots": daemon_fields.field("apd", "lead_slots"),
    "seed": Field(int, 1, min=0, max=2**64 - 1),
    "max_slots": Field(int, 0, min=0),
    "run_dir": Field(str, ""),
    "endpoints": {
        "phy_requests": Field(str, "", check=_endpoint),
        "phy_grants": Field(str, "", check=_endpoint),
    },
    "users": ListOf(_USER, min_len=1),
    "error_model": Field(str, "threshold", choices=ERROR_MODELS, aliases=ERROR_MODEL_ALIASES),
    "mcs_table": Field(str, aliases=TABLE_ALIASES),
    "link_curves": Field(str, ""),
    "shannon": {  # the `shannon` table's eq. 18 (also the end_of_slot error model's W0, C_max)
        "w0_hz": Field(float, SHANNON_TABLE_DEFAULTS["w0_hz"], min=1.0, max=1e12),
        "cmax_bps": Field(float, SHANNON_TABLE_DEFAULTS["cmax_bps"], min=1.0, max=1e12),
        "levels": Field(int, SHANNON_TABLE_DEFAULTS["levels"], min=1, max=255),
    },
    "clamp": Renamed("shannon"),
    "chase_combining": Field(bool, True),
    # The rx_indication of slot n reports the SNR at the start of slot n + cqi_ahead_slots
    # (abstract PHY only: its channel is a known function of time). With the apd's
    # link_adaptation.mode paper and the same value there, the MAC chooses each slot's rate
    # from the SNR at that slot's start (Andrew & Hanly, CLAMP, eq. 18).
    "cqi_ahead_slots": Field(int, 0, min=0, max=1_000_000),
    "measurement": {"noise_db": Field(float, 0.0, min=0.0, max=30.0)},
    "traces": {"stats": Field(str, ""), "slots": Field(str, "")},
    "timing": {
        "startup_wait_s": Field(float, 5.0, min=0.0, max=600.0),
        "spin_us": Field(float, 0.0, min=0.0, max=10_000.0),
        "rt_priority": Field(int, 0, min=0, max=99),
    },
    "zmq": {
        "hwm": Field(int, 1000, min=1, max=1_000_000),
        "reconnect_ms": Field(int, 10, min=1, max=60_000),
    },
}


# ----------------------------------------------------------------------------------------
# Configuration


def read_config(path: str | Path, overrides: list[str] | tuple, schema: dict) -> tuple[dict, Path]:
    """phy.yaml read, the `--set key=value` overrides applied and validated against
    `schema` (defaults filled in); returns it with the file's directory, against which
    resolve() makes relative paths absolute. Raises ConfigError naming the field and the
    value."""
    p = Path(path)
    data = read_yaml(p, where="") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"<top>: {data!r} is not a mapping")
    for o in overrides:
        apply_override(data, schema, o)
    return validate_schema(schema, data), p.resolve().parent


def resolve(cfg: dict, base: Path) -> dict:
    """Cross-field checks and path resolution on a schema-validated mapping: relative paths
    made absolute (relative to `base`), endpoints and trace paths defaulted into run_dir."""

    def absolute(s: str) -> str:
        return str((base / s).resolve()) if s and not os.path.isabs(s) else s

    users = cfg["users"]
    ids = [u["id"] for u in users]
    if sorted(ids) != list(range(len(users))):
        bad = next(
            i for i, u in enumerate(users) if ids.count(u["id"]) > 1 or u["id"] >= len(users)
        )
        raise ConfigError(
            f"users[{bad}].id: {users[bad]['id']!r} is not unique in 0..{len(users) - 1} "
            "(ids are 0..N-1, the wire's user field)"
        )
    names = [u["name"] for u in users]
    for i, n in enumerate(names):
        if names.index(n) != i:
            raise ConfigError(f"users[{i}].name: {n!r} is used twice")
    for i, u in enumerate(users):
        ch = u["channel"]
        where = f"users[{i}].channel"
        if ch["model"] in FADING_MODELS and ch["doppler_hz"] is None:
            raise ConfigError(f"{where}.doppler_hz: required for model {ch['model']!r}")
        if ch["model"] == "trace":
            if not ch["trace"]:
                raise ConfigError(
                    f"{where}.trace: required for model 'trace' (a CSV time_s,snr_db)"
                )
        elif ch["trace"]:
            raise ConfigError(f"{where}.trace: {ch['trace']!r} given but model is {ch['model']!r}")
        ch["trace"] = absolute(ch["trace"])
    if cfg["error_model"] == "curves" and not cfg["link_curves"]:
        raise ConfigError("link_curves: required with error_model 'curves' (a CSV mcs,snr_db,bler)")
    if cfg["mcs_table"] == "":
        raise ConfigError(f"mcs_table: '' is not one of {', '.join(TABLE_PRESETS)} or a CSV path")
    if cfg["mcs_table"] not in TABLE_PRESETS:
        cfg["mcs_table"] = absolute(cfg["mcs_table"])
    cfg["link_curves"] = absolute(cfg["link_curves"])

    run_dir = Path(absolute(cfg["run_dir"]) if cfg["run_dir"] else base)
    cfg["run_dir"] = str(run_dir)
    for name in ("phy_requests", "phy_grants"):
        if not cfg["endpoints"][name]:
            cfg["endpoints"][name] = f"ipc://{run_dir}/zmq/{name}"
    for u in users:
        if not u["rx"]:
            u["rx"] = f"ipc://{run_dir}/zmq/rx_{u['id']}"
    cfg["traces"]["stats"] = absolute(cfg["traces"]["stats"]) or str(run_dir / "phy.stats.json")
    cfg["traces"]["slots"] = absolute(cfg["traces"]["slots"])
    cfg["users"] = sorted(users, key=lambda u: u["id"])  # index == wire user id
    return cfg


def shannon_table(w0_hz: float, cmax_bps: float, levels: int):
    """Andrew & Hanly, CLAMP, eq. 18 quantised to `levels` MCS (rate_k = k C_max / levels at
    the SNR where W0 log2(1 + N) reaches it): the AP daemon's own C++ table, so the two
    always agree."""
    return mac.mcs_table.shannon(w0_hz, cmax_bps, levels)


def load_mcs_table(cfg: dict):
    """The MCS table mcs_table names: a preset (TABLE_PRESETS) or a CSV
    name,min_snr_db,rate_bps. ConfigError names the field."""
    spec = cfg["mcs_table"]
    if spec == "evdo":
        return mac.mcs_table.evdo()
    if spec == "ofdm_provisional":
        return mac.mcs_table.ofdm_provisional()
    if spec == "shannon":
        c = cfg["shannon"]
        try:
            return shannon_table(c["w0_hz"], c["cmax_bps"], c["levels"])
        except ValueError as exc:
            raise ConfigError(f"shannon: {c!r} gives no valid MCS table ({exc})") from None
    try:
        text = Path(spec).read_text()
    except OSError as exc:
        raise ConfigError(
            f"mcs_table: {spec!r} cannot be read ({exc.strerror}); expected one of "
            f"{', '.join(TABLE_PRESETS)} or a CSV name,min_snr_db,rate_bps"
        ) from None
    try:
        return mac.mcs_table.from_csv(text, Path(spec).stem)
    except ValueError as exc:
        raise ConfigError(f"mcs_table: {spec!r}: {exc}") from None


# ----------------------------------------------------------------------------------------
# The process


def write_json_atomic(path: Path, data: dict) -> None:
    """Writes stats JSON so that a reader never sees half a file (temp file, then rename);
    a failure is logged, never fatal (a PHY must not die over its statistics)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
    except OSError as exc:
        log.error("cannot write %s: %s", path, exc)


def set_rt_priority(prio: int) -> bool:
    """SCHED_FIFO at `prio` (1..99) for this process and the threads it starts later (the
    ZeroMQ I/O thread), as radio software asks for (UHD's set_thread_priority). 0: leave
    the scheduler alone. Failure (no CAP_SYS_NICE) is a warning, not an error."""
    if prio <= 0:
        return False
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(prio))
        return True
    except (OSError, AttributeError) as exc:
        log.warning(
            "timing.rt_priority %d: cannot switch to SCHED_FIFO (%s); running unprivileged",
            prio,
            exc,
        )
        return False


def parse_args(
    argv: list[str] | None,
    prog: str,
    description: str,
    config_help: str,
    check_help: str,
    log_tag: str,
) -> argparse.Namespace:
    """The command line every PHY process shares (--config, --check, --set, --log-level),
    with logging set up to stderr under `log_tag`."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--config", required=True, help=config_help)
    ap.add_argument("--check", action="store_true", help=check_help)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one configuration value (repeatable)",
    )
    ap.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format=f"{log_tag} %(levelname)s: %(message)s",
    )
    return args
