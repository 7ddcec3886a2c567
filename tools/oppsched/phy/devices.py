"""USRP device profiles (firmware/profiles/*.yaml) and the UHD image manifest
(firmware/images.yaml): loading, validation, and the checks of one radio's settings
against its profile.

A profile holds a device's published limits (master clock, sample rates, frequency range,
gain ranges, antenna ports, clock and time sources), the minimum TX lead, and its transport
with the host settings it needs. The experiment names each radio's profile
(`phy.uhd.device`, or per radio `phy.uhd.ap.device` / `devices[i].uhd.device`); the config
check (`oppsched check`), the UHD PHY (before it opens a radio) and `oppsched preflight`
refuse settings outside it with check_radio(). Only oppsched.config and oppsched.paths
here, so the experiment schema loads without GNU Radio's UHD module.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import math
import re
from pathlib import Path

from oppsched import paths
from oppsched.config import ConfigError, Field, ListOf, read_yaml, validate

TRANSPORTS = ("usb3", "1gbe", "10gbe")
SOURCES = ("internal", "external", "gpsdo", "mimo")
_NAME_RE = re.compile(r"[a-z0-9_]{1,24}")


def _hz_list(v: list) -> str | None:
    if not v or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not
                    (math.isfinite(x) and x > 0) for x in v):
        return "is not a non-empty list of frequencies > 0 (Hz)"
    return None


def _names(v: list) -> str | None:
    if not v or not all(isinstance(x, str) and x for x in v):
        return "is not a non-empty list of names"
    return None


def _sources(v: list) -> str | None:
    bad = [x for x in v if x not in SOURCES]
    return f"has {bad[0]!r}, not one of {', '.join(SOURCES)}" if bad else _names(v)


_GAIN = {"min_db": Field(float, min=-50.0, max=200.0), "max_db": Field(float, min=-50.0, max=200.0)}

PROFILE_SCHEMA = {
    "device": Field(str, check=lambda s: None if _NAME_RE.fullmatch(s) else
                    "is not a profile name (1..24 of a-z, 0-9, _)"),
    "name": Field(str),
    "uhd_type": Field(str, doc="`type` in uhd_find_devices (b200, usrp2, x300, n3xx)"),
    "products": Field(list, check=_names, doc="`product` in uhd_find_devices"),
    "transport": Field(str, choices=TRANSPORTS),
    "master_clock": {
        "min_hz": Field((float, type(None)), None, min=1e3, max=1e10),
        "max_hz": Field((float, type(None)), None, min=1e3, max=1e10),
        "fixed_hz": Field((list, type(None)), None, check=_hz_list),
    },
    "sample_rate": {
        "max_hz": Field(float, min=1e3, max=1e10, doc="the host can stream (sc16, 1 channel)"),
        "max_decimation": Field(int, min=1, max=65536, doc="rate = master clock / N"),
    },
    "frequency": {"min_hz": Field(float, min=0.0, max=1e11),
                  "max_hz": Field(float, min=0.0, max=1e11)},
    "gain": {"tx": _GAIN, "rx": _GAIN},
    "antennas": {"tx": Field(list, check=_names), "rx": Field(list, check=_names)},
    "clock_sources": Field(list, check=_sources),
    "time_sources": Field(list, check=_sources),
    "tx_lead_s": Field(float, min=1e-5, max=1.0,
                       doc="a timed burst reaches UHD at least this long before tx_time"),
    "host": {
        "usb": Field((str, type(None)), None, choices=(None, "3.0")),
        "link_gbps": Field((int, type(None)), None, choices=(None, 1, 10)),
        "device_addr": Field((str, type(None)), None),
        "host_addr": Field((str, type(None)), None),
        "mtu": Field((int, type(None)), None, min=576, max=9216),
        "rmem_max": Field((int, type(None)), None, min=0),
        "wmem_max": Field((int, type(None)), None, min=0),
    },
}

IMAGES_SCHEMA = {
    "uhd_version": Field(str),
    "images_dir": Field(str),
    "profiles": Field(dict, doc="profile name -> {load, flash, targets}"),
}
_IMAGE_PROFILE = {
    "load": Field(str, choices=("host", "flash", "none"), doc="none: a simulated device"),
    "flash": Field(str, ""),
    "targets": ListOf({
        "target": Field(str, check=lambda s: None if re.fullmatch(r"[a-z0-9]+_[a-z0-9_]+", s)
                        else "is not a uhd_images_downloader target"),
        "version": Field(str),
        "sha256": Field(str, check=lambda s: None if s == "" or re.fullmatch(r"[0-9a-f]{64}", s)
                        else "is not a SHA-256 (64 hex digits) or ''"),
        "files": Field(list),
    }),
}


def firmware_dir() -> Path:
    """firmware/ of the checkout (profiles/ and images.yaml)."""
    return paths.home() / "firmware"


def _check_profile(p: dict) -> dict:
    """Cross-field checks of a validated profile; ConfigError naming the key and value."""
    mc = p["master_clock"]
    if (mc["fixed_hz"] is None) == (mc["min_hz"] is None or mc["max_hz"] is None):
        raise ConfigError(f"master_clock: {mc!r} needs either fixed_hz or min_hz and "
                          "max_hz")
    if mc["min_hz"] is not None and mc["min_hz"] > mc["max_hz"]:
        raise ConfigError(f"master_clock.min_hz: {mc['min_hz']!r} is above max_hz")
    if p["frequency"]["min_hz"] >= p["frequency"]["max_hz"]:
        raise ConfigError(f"frequency.min_hz: {p['frequency']['min_hz']!r} is not below max_hz")
    for d in ("tx", "rx"):
        if p["gain"][d]["min_db"] > p["gain"][d]["max_db"]:
            raise ConfigError(f"gain.{d}.min_db: {p['gain'][d]['min_db']!r} is above "
                              "max_db")
    network = p["transport"] != "usb3"
    for key in ("link_gbps", "device_addr", "mtu", "rmem_max", "wmem_max"):
        if network and p["host"][key] is None:
            raise ConfigError(f"host.{key}: required for transport {p['transport']}")
    if not network and p["host"]["usb"] is None:
        raise ConfigError("host.usb: required for transport usb3")
    return p


def load_profile_file(path: str | Path) -> dict:
    """One profile file, validated; ConfigError naming the file, key and value."""
    data = read_yaml(path)
    try:
        p = validate(PROFILE_SCHEMA, data)
        _check_profile(p)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if Path(path).stem != p["device"]:
        raise ConfigError(f"{path}: device: {p['device']!r} differs from the file name "
                          f"({Path(path).stem}.yaml)")
    return p


@functools.lru_cache(maxsize=4)
def _profiles(folder: str) -> dict[str, dict]:
    return {f.stem: load_profile_file(f) for f in sorted(Path(folder).glob("*.yaml"))}


def profiles(folder: str | Path | None = None) -> dict[str, dict]:
    """Every profile in firmware/profiles (or `folder`), by name."""
    return _profiles(str(folder or firmware_dir() / "profiles"))


def profile(name: str, field: str = "device") -> dict:
    """The profile `name`; ConfigError naming `field` and the known names."""
    known = profiles()
    if name not in known:
        raise ConfigError(f"{field}: {name!r} is not a device profile (firmware/profiles: "
                          f"{', '.join(known)})")
    return known[name]


def load_images(path: str | Path | None = None, names=None) -> dict:
    """firmware/images.yaml, validated; every profile in `names` (default: all profiles)
    must have its entry."""
    path = Path(path or firmware_dir() / "images.yaml")
    try:
        m = validate(IMAGES_SCHEMA, read_yaml(path))
        for name, entry in m["profiles"].items():
            m["profiles"][name] = validate(_IMAGE_PROFILE, entry, f"profiles.{name}")
            if m["profiles"][name]["load"] == "flash" and not m["profiles"][name]["flash"]:
                raise ConfigError(f"profiles.{name}.flash: required with load flash "
                                  "(the uhd_image_loader command)")
            n = len(m["profiles"][name]["targets"])
            if (m["profiles"][name]["load"] == "none") != (n == 0):
                raise ConfigError(f"profiles.{name}.targets: {n} with load "
                                  f"{m['profiles'][name]['load']} (load none, a simulated "
                                  "device, has none; host and flash at least one)")
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    for name in (profiles() if names is None else names):
        if name not in m["profiles"]:
            raise ConfigError(f"{path}: profiles.{name}: missing (every device profile needs "
                              "its images)")
    return m


def downloader_command(entry: dict) -> str:
    """The uhd_images_downloader command that fetches a profile's images."""
    return "uhd_images_downloader " + " ".join(f"-t {t['target']}" for t in entry["targets"])


# ----------------------------------------------------------------------------------------
# A radio's settings against its profile


def args_dict(args: str) -> dict[str, str]:
    """UHD device args 'k=v,k=v' as a mapping."""
    return dict(kv.split("=", 1) for kv in args.split(",") if "=" in kv)


def master_clocks(p: dict, args: str = "") -> list[float] | tuple[float, float]:
    """The master clock rates a radio may run at: the one its args set
    (master_clock_rate=...), else the profile's fixed rates (a list, the default first) or
    range (a tuple)."""
    mc = p["master_clock"]
    fixed = args_dict(args).get("master_clock_rate")
    if fixed is not None:
        return [float(fixed)]
    return list(mc["fixed_hz"]) if mc["fixed_hz"] else (mc["min_hz"], mc["max_hz"])


def sample_rate_error(p: dict, fs: float, args: str = "") -> str | None:
    """Why `fs` is not a rate the device runs at exactly (master clock / integer N,
    N <= max_decimation, no faster than the host link carries), or None."""
    sr = p["sample_rate"]
    if fs > sr["max_hz"]:
        return f"is above the {p['device']}'s {sr['max_hz']:g} S/s"
    mcs = master_clocks(p, args)
    nmax = sr["max_decimation"]
    mc = p["master_clock"]
    fixed = args_dict(args).get("master_clock_rate")
    clocks = mcs if isinstance(mcs, list) else None
    if clocks is not None:
        def divides(c: float) -> bool:
            n = c / fs
            return abs(n - round(n)) < 1e-9 * n and 1 <= round(n) <= nmax

        if len(clocks) == 1 and mc["fixed_hz"] is None:  # set in the args, within the range
            c = clocks[0]
            if not (mc["min_hz"] <= c <= mc["max_hz"]):
                return (f"needs master_clock_rate {c:g}, outside the {p['device']}'s "
                        f"{mc['min_hz']:g}..{mc['max_hz']:g} Hz")
        elif fixed is not None and all(abs(c - clocks[0]) > 1 for c in mc["fixed_hz"] or ()):
            return (f"needs master_clock_rate {clocks[0]:g}, not one of the {p['device']}'s "
                    f"{', '.join(f'{c:g}' for c in mc['fixed_hz'])} Hz")
        if divides(clocks[0]):
            return None  # the default clock (the first), or the one the args set
        other = [c for c in clocks[1:] if divides(c)] if fixed is None else []
        if other:
            return (f"needs master_clock_rate={other[0]:g} in the args (the {p['device']} "
                    f"defaults to {clocks[0]:g} Hz)")
        return (f"is not a master clock ({', '.join(f'{c:g}' for c in clocks)} Hz) divided by "
                f"an integer 1..{nmax}: the {p['device']} would run at another rate")
    lo, hi = mcs
    # any clock in [lo, hi]: some integer N with lo <= N fs <= hi, N <= nmax
    n_lo = max(1, math.ceil(lo / fs - 1e-9))
    if n_lo <= min(nmax, math.floor(hi / fs + 1e-9)):
        return None
    return (f"is below the {p['device']}'s lowest rate {lo / nmax:g} S/s (master clock "
            f"{lo:g} Hz / {nmax})")


def check_radio(p: dict, r: dict, fs: float, role: str, field: str,
                keys: tuple[str, str] = ("gain_db", "antenna")) -> None:
    """A radio's settings within profile `p` (role 'tx' for the AP, 'rx' for a device):
    sample rate, frequency, gain, antenna, clock and time sources. ConfigError naming the
    experiment key (`field`.freq_hz, ...) and the value. `keys`: the (gain, antenna) keys
    of that role's settings (a radio's second direction has its own: radio.py)."""
    gain_key, antenna_key = keys
    dev = p["device"]
    why = sample_rate_error(p, fs, r.get("args", ""))
    if why:
        raise ConfigError(f"{field}: sample rate {fs!r} {why}")
    f = r["freq_hz"]
    fr = p["frequency"]
    if f is not None and not (fr["min_hz"] <= f <= fr["max_hz"]):
        raise ConfigError(f"{field}.freq_hz: {f!r} is outside the {dev}'s "
                          f"{fr['min_hz']:g}..{fr['max_hz']:g} Hz")
    g = p["gain"][role]
    if not (g["min_db"] <= r[gain_key] <= g["max_db"]):
        raise ConfigError(f"{field}.{gain_key}: {r[gain_key]!r} is outside the {dev}'s "
                          f"{role.upper()} gain range {g['min_db']:g}..{g['max_db']:g} dB")
    ants = p["antennas"][role]
    if r[antenna_key] not in ants:
        raise ConfigError(f"{field}.{antenna_key}: {r[antenna_key]!r} is not a {dev} "
                          f"{role.upper()} port ({', '.join(ants)})")
    bw = r.get("bandwidth_hz") or 0.0
    if bw > 0 and bw > p["sample_rate"]["max_hz"]:
        raise ConfigError(f"{field}.bandwidth_hz: {bw!r} is above the {dev}'s "
                          f"{p['sample_rate']['max_hz']:g} Hz")
    for key, known in (("clock_source", p["clock_sources"]), ("time_source", p["time_sources"])):
        if r[key] and r[key] not in known:
            raise ConfigError(f"{field}.{key}: {r[key]!r} is not a {dev} source "
                              f"({', '.join(known)})")


def check_radio_both_ways(p: dict, r: dict, fs: float, role: str, field: str) -> None:
    """check_radio for a radio that also works in the other direction (uplink slots over
    the air: the AP receives, a station sends), with that direction's own settings
    (oppsched.phy.radio.SECOND_DIRECTION)."""
    from oppsched.phy.radio import SECOND_DIRECTION

    check_radio(p, r, fs, role, field)
    other = "rx" if role == "tx" else "tx"
    check_radio(p, r, fs, other, field, SECOND_DIRECTION[other])


_DEFERRED = contextvars.ContextVar("oppsched_profile_checks_deferred", default=False)


@contextlib.contextmanager
def profile_checks_deferred():
    """Inside: the experiment check resolves each radio's profile but leaves the settings
    to whoever reports them (`oppsched preflight` shows them as rows of its table)."""
    token = _DEFERRED.set(True)
    try:
        yield
    finally:
        _DEFERRED.reset(token)


def profile_checks_are_deferred() -> bool:
    return _DEFERRED.get()


def tx_buffer_samples(p: dict, fs: float, floor: int) -> int:
    """Samples the AP's slot_tx must hold ahead of the radio so that every timed burst
    reaches UHD at least the profile's tx_lead_s before its tx_time: at least `floor`."""
    return max(floor, math.ceil(p["tx_lead_s"] * fs))
