"""Parameters of the channel emulator block from per-user lists or a configuration file.

``emulator_params(...)`` returns the ``channel_emulator_params`` that
``channel_emulator_cc`` (and the pure ``channel_emulator``) take. Every per-user argument
is either one value for all users or a list with one value per user. ``config`` (a dict
or a YAML/JSON file) replaces the keyword arguments; it may be

- the emulator's own shape: ``{sample_rate, profile, seed, update_interval,
  users: [{mean_snr_db, model, doppler_hz, oscillators, taps, cfo_hz, trace,
  trace_loop, add_noise, jakes_angle_offset}]}``, or
- a phy.yaml (docs/daemons.md): ``users: [{id, name, channel: {model, mean_snr_db,
  doppler_hz, oscillators, trace, trace_loop, seed}}]`` plus ``seed``; keys of phy.yaml
  that are not about the channel are ignored there, since the same file configures the PHY.

Model names: ``none``/``awgn`` (no fading), ``jakes`` (the Jakes model of Andrew & Hanly, CLAMP),
``sum_of_sinusoids`` (Srinivasan & Baras, eq. 4), ``trace`` (no fading, SNR replayed from ``trace``: a
CSV ``time_s,snr_db``). A wrong value raises ValueError naming the field. ``clamp``, the old name
of ``jakes``, is still accepted with a DeprecationWarning.
"""

import json
import math
import os
import warnings

from .oppsched_python import (
    channel_emulator_params,
    emulator_tap,
    emulator_user_params,
    fading_model,
    load_snr_trace_csv,
    numerology,
)
from .yaml_config import load_yaml

_MODELS = {
    "none": fading_model.none,
    "awgn": fading_model.none,
    "trace": fading_model.none,
    "jakes": fading_model.jakes,
    "sum_of_sinusoids": fading_model.sum_of_sinusoids,
}
_MODEL_ALIASES = {"clamp": "jakes"}  # old name -> new ("clamp" is the algorithm only)

_USER_KEYS = {
    "mean_snr_db",
    "model",
    "fading",
    "doppler_hz",
    "oscillators",
    "taps",
    "cfo_hz",
    "trace",
    "trace_loop",
    "add_noise",
    "jakes_angle_offset",
}
_TOP_KEYS = {"sample_rate", "profile", "seed", "update_interval", "users"}
# phy.yaml user entries and channel sub-dicts (docs/daemons.md)
_PHY_USER_KEYS = {"id", "name", "rx", "channel"}
_PHY_CHANNEL_KEYS = {
    "model",
    "doppler_hz",
    "mean_snr_db",
    "seed",
    "oscillators",
    "trace",
    "trace_loop",
}



# Per-user emulator settings, in the order the channel_emulator params take them.
_USER_FIELDS = ("mean_snr_db", "fading", "doppler_hz", "oscillators", "taps", "cfo_hz",
                "snr_trace", "trace_loop", "add_noise", "jakes_angle_offset")

def _per_user(name, value, n):
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}: {len(value)} values for {n} users")
        return list(value)
    return [value] * n


def _is_tap_list(t):
    """[(delay, power_db), ...] (one profile) as opposed to a list of such lists."""
    return len(t) == 0 or (
        isinstance(t[0], (list, tuple))
        and len(t[0]) == 2
        and not isinstance(t[0][0], (list, tuple))
    )


def _taps(name, taps):
    out = []
    for i, t in enumerate(taps):
        if not isinstance(t, (list, tuple)) or len(t) != 2:
            raise ValueError(f"{name}[{i}]: {t!r} is not a (delay_samples, power_db) pair")
        d, p = t
        if isinstance(d, bool) or not isinstance(d, int) or d < 0:
            raise ValueError(f"{name}[{i}].delay_samples: {d!r} is not an integer >= 0")
        out.append(emulator_tap(delay_samples=int(d), power_db=float(p)))
    return out


def _user(
    prefix,
    mean_snr_db,
    model,
    doppler_hz,
    oscillators,
    taps,
    cfo_hz,
    trace,
    trace_loop,
    add_noise,
    jakes_angle_offset,
    base_dir,
):
    if isinstance(model, str) and model in _MODEL_ALIASES:
        warnings.warn(f"{prefix}.model: value {model!r} is deprecated, use "
                      f"{_MODEL_ALIASES[model]!r}", DeprecationWarning, stacklevel=3)
        model = _MODEL_ALIASES[model]
    if not isinstance(model, str) or model not in _MODELS:
        raise ValueError(f"{prefix}.model: {model!r} is not one of {', '.join(sorted(_MODELS))}")
    u = emulator_user_params()
    for key, v in (
        ("mean_snr_db", mean_snr_db),
        ("doppler_hz", doppler_hz),
        ("cfo_hz", cfo_hz),
        ("jakes_angle_offset", jakes_angle_offset),
    ):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{prefix}.{key}: {v!r} is not a finite number")
    if isinstance(oscillators, bool) or not isinstance(oscillators, int):
        raise ValueError(f"{prefix}.oscillators: {oscillators!r} is not an integer")
    u.mean_snr_db = float(mean_snr_db)
    u.fading = _MODELS[model]
    u.doppler_hz = float(doppler_hz)
    u.oscillators = int(oscillators)
    u.jakes_angle_offset = float(jakes_angle_offset)
    u.taps = _taps(prefix + ".taps", taps)
    u.cfo_hz = float(cfo_hz)
    u.loop_trace = bool(trace_loop)
    u.add_noise = bool(add_noise)
    if model == "trace" and not trace:
        raise ValueError(f"{prefix}.trace: required with model trace")
    if trace:
        path = trace if os.path.isabs(trace) or base_dir is None else os.path.join(base_dir, trace)
        u.snr_trace = load_snr_trace_csv(path)
    return u


def _load(config):
    if isinstance(config, dict):
        return config, None
    path = os.fspath(config)
    with open(path, "r", encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        data = json.loads(text)
    else:
        data = load_yaml(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a mapping")
    return data, os.path.dirname(os.path.abspath(path))


def _from_config(config, sample_rate, profile):
    data, base_dir = _load(config)
    is_phy = any(isinstance(u, dict) and "channel" in u for u in data.get("users", []) or [])
    if not is_phy:
        for k in data:
            if k not in _TOP_KEYS:
                raise ValueError(
                    f"{k}: unknown key (expected one of {', '.join(sorted(_TOP_KEYS))})"
                )
    users = data.get("users")
    if not isinstance(users, list) or not users:
        raise ValueError("users: a non-empty list is required")
    kw = dict(
        sample_rate=float(data.get("sample_rate", sample_rate)) if not is_phy else sample_rate,
        profile=data.get("profile", profile) if not is_phy else profile,
        seed=data.get("seed", 1),
        update_interval=data.get("update_interval", 0) if not is_phy else 0,
    )
    cols = {k: [] for k in _USER_FIELDS}
    for i, u in enumerate(users):
        p = f"users[{i}]"
        if not isinstance(u, dict):
            raise ValueError(f"{p}: not a mapping")
        if is_phy:
            for k in u:
                if k not in _PHY_USER_KEYS:
                    raise ValueError(f"{p}.{k}: unknown key")
            ch = u.get("channel", {}) or {}
            p += ".channel"
            for k in ch:
                if k not in _PHY_CHANNEL_KEYS:
                    raise ValueError(f"{p}.{k}: unknown key")
            # phy.yaml's jakes model is Andrew & Hanly, CLAMP's Jakes as printed (angle offset +0.5)
            u = dict(ch)
            if _MODEL_ALIASES.get(u.get("model"), u.get("model", "jakes")) == "jakes":
                u.setdefault("jakes_angle_offset", 0.5)
            u.pop("seed", None)  # per-user streams come from (seed, user) in the emulator
            u.setdefault("model", "jakes")
            u.setdefault("mean_snr_db", 10 * math.log10(4))  # phy.yaml's default SNR_ave = 4
        else:
            for k in u:
                if k not in _USER_KEYS:
                    raise ValueError(f"{p}.{k}: unknown key")
        model = u.get("model", u.get("fading", "jakes"))
        cols["fading"].append(model)
        cols["mean_snr_db"].append(u.get("mean_snr_db", 20.0))
        cols["doppler_hz"].append(u.get("doppler_hz", 60.0))
        cols["oscillators"].append(u.get("oscillators", 20))
        cols["taps"].append([tuple(t) if isinstance(t, list) else t for t in u.get("taps", [])])
        cols["cfo_hz"].append(u.get("cfo_hz", 0.0))
        cols["snr_trace"].append(u.get("trace", ""))
        cols["trace_loop"].append(u.get("trace_loop", True))
        cols["add_noise"].append(u.get("add_noise", True))
        cols["jakes_angle_offset"].append(u.get("jakes_angle_offset", -0.5))
    return kw, cols, base_dir


def emulator_params(
    sample_rate=1e6,
    profile="evdo",
    num_users=None,
    mean_snr_db=20.0,
    fading="jakes",
    doppler_hz=60.0,
    oscillators=20,
    taps=(),
    cfo_hz=0.0,
    snr_trace="",
    trace_loop=True,
    add_noise=True,
    jakes_angle_offset=-0.5,
    seed=1,
    update_interval=0,
    config=None,
):
    """Build channel_emulator_params (see the module docstring).

    sample_rate: Hz; mean_snr_db: Es/N0 per occupied subcarrier (dB); doppler_hz: Hz;
    taps: [(delay_samples, power_db), ...] for every user, or one such list per user;
    cfo_hz: Hz; snr_trace: CSV path ("" = none); seed: run seed (per-user streams are
    derived from it); update_interval: samples between fading updates (0 = one OFDM symbol).
    """
    base_dir = None
    if config not in (None, ""):
        kw, cols, base_dir = _from_config(config, sample_rate, profile)
        sample_rate, profile = kw["sample_rate"], kw["profile"]
        seed, update_interval = kw["seed"], kw["update_interval"]
        n = len(cols["fading"])
        if num_users is not None and num_users != n:
            raise ValueError(f"num_users: {num_users} but the configuration has {n} users")
        (
            mean_snr_db,
            fading,
            doppler_hz,
            oscillators,
            taps,
            cfo_hz,
            snr_trace,
            trace_loop,
            add_noise,
            jakes_angle_offset,
        ) = (
            cols[k]
            for k in _USER_FIELDS
        )
        taps_per_user = taps
    else:
        lists = [
            v
            for v in (
                mean_snr_db,
                fading,
                doppler_hz,
                oscillators,
                cfo_hz,
                snr_trace,
                trace_loop,
                add_noise,
                jakes_angle_offset,
            )
            if isinstance(v, (list, tuple))
        ]
        per_user_taps = isinstance(taps, (list, tuple)) and not _is_tap_list(list(taps))
        if num_users is None:
            sizes = {len(v) for v in lists} | ({len(taps)} if per_user_taps else set())
            if len(sizes) > 1:
                raise ValueError(f"num_users: per-user lists of different lengths {sorted(sizes)}")
            num_users = sizes.pop() if sizes else 1
        if isinstance(num_users, bool) or not isinstance(num_users, int) or num_users < 1:
            raise ValueError(f"num_users: {num_users!r} must be an integer >= 1")
        n = num_users
        taps_per_user = list(taps) if per_user_taps else [list(taps)] * n
        if len(taps_per_user) != n:
            raise ValueError(f"taps: {len(taps_per_user)} tap lists for {n} users")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed: {seed!r} not an integer in [0, 2^64)")
    p = channel_emulator_params()
    p.numerology = numerology.profile(profile, float(sample_rate)).params
    p.seed = seed
    p.update_interval = int(update_interval)
    users = []
    cols = [
        _per_user(name, v, n)
        for name, v in (
            ("mean_snr_db", mean_snr_db),
            ("fading", fading),
            ("doppler_hz", doppler_hz),
            ("oscillators", oscillators),
            ("cfo_hz", cfo_hz),
            ("snr_trace", snr_trace),
            ("trace_loop", trace_loop),
            ("add_noise", add_noise),
            ("jakes_angle_offset", jakes_angle_offset),
        )
    ]
    for i in range(n):
        snr, model, fd, osc, cfo, trace, loop, noise, off = (c[i] for c in cols)
        users.append(
            _user(
                f"users[{i}]",
                snr,
                model,
                fd,
                osc,
                taps_per_user[i],
                cfo,
                trace,
                loop,
                noise,
                off,
                base_dir,
            )
        )
    p.users = users
    p.validate()
    return p
