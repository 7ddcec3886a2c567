"""`oppsched preflight EXPERIMENT.yaml`: is this host and are these radios ready for a
phy.mode uhd run? A pass/fail table with the fix for each failure; exit 0 only if all pass.

Every check is a function over parsed tool output or host facts (tools/tests/
test_preflight.py feeds them recorded output); only Probe gathers them:

- profile:    the radio's settings are within its device profile (as `oppsched check`)
- found:      `uhd_find_devices` lists a device matching each radio's args, of the type
              and product of its profile (firmware/profiles/<device>.yaml)
- probe:      `uhd_usrp_probe --args ARGS` succeeds: no image-compatibility error, its
              frontends cover the radio's frequency, gain and antenna
- images:     the profile's images (firmware/images.yaml) are in the images folder for
              devices UHD loads from the host (B2xx); the probe's FW/FPGA versions
- link:       a USB radio runs over USB 3, a network radio on a link whose MTU suits it
- benchmark:  `benchmark_rate` at the configured rate, TX for the AP, RX for a device,
              shows no underflow, overflow, drop, sequence error or late command
- sync:       all radios use the same clock and time sources, each one its device has
- host:       CPU frequency governor `performance`; real-time priority allowed
              (root, or RLIMIT_RTPRIO >= timing.rt_priority); net.core.rmem_max and
              wmem_max at least the profile's for network radios
"""

from __future__ import annotations

import glob
import os
import re
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from oppsched.phy import devices
from oppsched.config import ConfigError
from oppsched.experiments.testbed.schema import radio_profile, uhd_radios

BENCHMARK_PATHS = ("/usr/lib/uhd/examples/benchmark_rate",
                   "/usr/libexec/uhd/examples/benchmark_rate",
                   "/usr/local/lib/uhd/examples/benchmark_rate")
IMAGES_DIRS = ("/usr/share/uhd/images", "/usr/local/share/uhd/images")
NO_DEVICE_EXIT = 1


@dataclass
class Check:
    """One row of the table: what was checked, for which radio (or 'host'), the verdict,
    what was seen, and on failure how to fix it."""
    name: str
    radio: str
    ok: bool
    detail: str
    fix: str = ""


@dataclass
class Radio:
    """A radio of the experiment: its field, settings, role ('tx' AP, 'rx' device), its
    profile and the key naming that profile."""
    field: str
    settings: dict
    role: str
    profile: dict
    profile_key: str
    found: dict | None = None
    probe: dict | None = None
    extra: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------------------
# Parsers of the UHD tools' output


def parse_find_devices(text: str) -> list[dict[str, str]]:
    """uhd_find_devices' "Device Address:" blocks, each as {key: value} (type, serial,
    product, name, addr, ...). No device: []."""
    out: list[dict[str, str]] = []
    cur: dict[str, str] | None = None
    for line in text.splitlines():
        if line.strip() == "Device Address:":
            cur = {}
            out.append(cur)
            continue
        m = re.match(r"^\s+([A-Za-z_][\w]*):\s*(.*?)\s*$", line)
        if cur is not None and m:
            cur[m.group(1)] = m.group(2)
        elif cur is not None and line.strip() and not line.startswith(" "):
            cur = None
    return out


_RANGE_RE = re.compile(r"(-?[\d.]+) to (-?[\d.]+)")


def _listed(line: str) -> list[str]:
    """'Key: a, b, c' -> [a, b, c]."""
    return [x.strip() for x in line.split(":", 1)[1].split(",") if x.strip()]


def parse_probe(text: str) -> dict:
    """uhd_usrp_probe's tree: mboard, fw/fpga versions, time and clock sources, the RX and TX
    frontends (name, antennas, freq range in Hz, gain range in dB summed over the gain
    elements), the USB speed it reports (B2xx) and an image-compatibility error if any."""
    info: dict = {"mboard": None, "fw_version": None, "fpga_version": None,
                  "time_sources": [], "clock_sources": [], "rx": [], "tx": [], "usb": None,
                  "compat_error": None, "error": None}
    m = re.search(r"Operating over USB (\d)", text)
    if m:
        info["usb"] = int(m.group(1))
    m = re.search(r"Expected (FPGA|firmware|protocol) compatibility number ([\d.]+), but got "
                  r"([\d.]+)", text)
    if m:
        info["compat_error"] = (m.group(1), m.group(2), m.group(3))
    m = re.search(r"^Error: (.*)$", text, re.M)
    if m:
        info["error"] = m.group(1).strip()
    fe: dict | None = None
    for raw in text.splitlines():
        line = raw.lstrip("| ").rstrip()
        m = re.match(r"(RX|TX) Frontend: (\S+)", line)
        if m:
            fe = {"slot": m.group(2), "name": "", "antennas": [], "freq_hz": None, "gain_db": None}
            info[m.group(1).lower()].append(fe)
            continue
        if re.match(r"(RX|TX) (DSP|Dboard|Codec)|Mboard:", line):
            fe = None
        if line.startswith("Mboard: "):
            info["mboard"] = line.split(": ", 1)[1].strip()
        elif line.startswith("FW Version: "):
            info["fw_version"] = line.split(": ", 1)[1].strip()
        elif line.startswith("FPGA Version: "):
            info["fpga_version"] = line.split(": ", 1)[1].strip()
        elif line.startswith("Time sources:"):
            info["time_sources"] = _listed(line)
        elif line.startswith("Clock sources:"):
            info["clock_sources"] = _listed(line)
        elif fe is not None:
            if line.startswith("Name: "):
                fe["name"] = line.split(": ", 1)[1]
            elif line.startswith("Antennas: "):
                fe["antennas"] = _listed(line)
            elif line.startswith("Freq range: "):
                r = _RANGE_RE.search(line)
                fe["freq_hz"] = (float(r.group(1)) * 1e6, float(r.group(2)) * 1e6)
            elif line.startswith("Gain range"):
                r = _RANGE_RE.search(line)
                lo, hi = float(r.group(1)), float(r.group(2))
                g = fe["gain_db"] or (0.0, 0.0)
                fe["gain_db"] = (g[0] + lo, g[1] + hi)  # the elements add up
    return info


_BENCH_KEYS = {
    "Num received samples": "rx_samples", "Num dropped samples": "dropped",
    "Num overruns detected": "overruns", "Num transmitted samples": "tx_samples",
    "Num sequence errors (Tx)": "seq_errors_tx", "Num sequence errors (Rx)": "seq_errors_rx",
    "Num underruns detected": "underruns", "Num late commands": "late",
    "Num timeouts (Tx)": "timeouts_tx", "Num timeouts (Rx)": "timeouts_rx",
}


def parse_benchmark(text: str) -> dict[str, int] | None:
    """benchmark_rate's "Benchmark rate summary" counters; None if it has none (it failed
    before the summary)."""
    if "Benchmark rate summary:" not in text:
        return None
    out = {}
    for label, key in _BENCH_KEYS.items():
        m = re.search(re.escape(label) + r":\s+(\d+)", text)
        if m:
            out[key] = int(m.group(1))
    return out


# ----------------------------------------------------------------------------------------
# Checks: pure functions over parsed output and host facts


def matches(args: str, dev: dict[str, str]) -> bool:
    """Whether a found device matches UHD args (every key=value of the args that the
    device lists is equal; 'type' and 'serial'/'addr'/'name' as uhd_find_devices does)."""
    want = devices.args_dict(args)
    for k, v in want.items():
        if k in ("master_clock_rate", "fpga", "recv_buff_size", "send_buff_size",
                 "num_recv_frames", "num_send_frames", "recv_frame_size", "send_frame_size"):
            continue  # settings, not selectors
        if k not in dev or dev[k] != v:
            if k == "addr" and dev.get("mgmt_addr") == v:
                continue  # MPM devices (N3xx, E3xx) list their address as mgmt_addr
            return False
    return True


def device_addr(dev: dict[str, str]) -> str | None:
    """A found network device's address (MPM devices list it as mgmt_addr)."""
    return dev.get("addr") or dev.get("mgmt_addr")


def check_found(r: Radio, found: list[dict[str, str]]) -> Check:
    args = r.settings["args"]
    hits = [d for d in found if matches(args, d)]
    p = r.profile
    if not hits:
        return Check("found", r.field, False, f"no device matches args '{args}' "
                     f"({len(found)} found)",
                     f"connect the {p['name']} and check {r.field}.args against "
                     f"`uhd_find_devices` (serial=..., addr=...)")
    if len(hits) > 1:
        return Check("found", r.field, False, f"{len(hits)} devices match args '{args}'",
                     f"add serial=... to {r.field}.args")
    d = hits[0]
    r.found = d
    what = f"{d.get('product', '?')} serial {d.get('serial', '?')}" + (
        f" at {device_addr(d)}" if device_addr(d) else "")
    # USRP2/N2x0 do not list their product here: the probe's Mboard is checked instead
    if d.get("type") != p["uhd_type"] or d.get("product", p["products"][0]) not in p["products"]:
        return Check("found", r.field, False, f"{what} (type {d.get('type')}) is not a "
                     f"{p['name']} ({p['uhd_type']}, {'/'.join(p['products'])})",
                     f"set {r.profile_key} to this device's profile, or connect a "
                     f"{p['name']}")
    return Check("found", r.field, True, what)


def _in(x: float, rng: tuple[float, float] | None) -> bool:
    return rng is not None and rng[0] - 1e-6 <= x <= rng[1] + 1e-6


def check_probe(r: Radio, text: str, rc: int) -> list[Check]:
    """uhd_usrp_probe ran, the image is the one UHD 4.3 expects, and the frontend of the
    radio's role covers its frequency, gain and antenna."""
    info = parse_probe(text)
    r.probe = info
    p, s = r.profile, r.settings
    img = devices.load_images(names=[p["device"]])["profiles"][p["device"]]
    fetch = devices.downloader_command(img)
    load = fetch if img["load"] == "host" else f"{fetch} && {img['flash']} (then power-cycle)"
    if info["compat_error"]:
        what, want, got = info["compat_error"]
        return [Check("image", r.field, False, f"{what} image {got}, UHD expects {want}", load)]
    if rc != 0 or info["mboard"] is None:
        why = info["error"] or f"exit {rc}"
        return [Check("probe", r.field, False, f"uhd_usrp_probe --args '{s['args']}': {why}",
                      f"run `uhd_usrp_probe --args '{s['args']}'` and fix what it says")]
    listed = r.found is not None and "product" in r.found  # then check_found compared it
    if not listed and info["mboard"].lower() not in {x.lower() for x in p["products"]}:
        return [Check("probe", r.field, False, f"the device is a {info['mboard']}, not a "
                      f"{p['name']} ({'/'.join(p['products'])})",
                      f"set {r.profile_key} to this device's profile, or connect a {p['name']}")]
    out = [Check("image", r.field, True, f"{info['mboard']}: FW {info['fw_version'] or '-'}, "
                 f"FPGA {info['fpga_version'] or '-'}")]
    fes = info[r.role]
    want_f, want_g, ant = s["freq_hz"], s["gain_db"], s["antenna"]
    good = [fe for fe in fes if ant in fe["antennas"]]
    if not good:
        seen = sorted({a for fe in fes for a in fe["antennas"]})
        out.append(Check("frontend", r.field, False, f"no {r.role.upper()} frontend has antenna "
                         f"{ant!r} (has {', '.join(seen) or 'none'})",
                         f"set {r.field}.antenna to one of {', '.join(seen)}"))
        return out
    fe = good[0]
    bad = []
    if not _in(want_f, fe["freq_hz"]):
        bad.append(f"freq_hz {want_f:g} outside {fe['freq_hz']}")
    if not _in(want_g, fe["gain_db"]):
        bad.append(f"gain_db {want_g:g} outside {fe['gain_db']}")
    if bad:
        out.append(Check("frontend", r.field, False, f"{fe['name'] or fe['slot']}: "
                         + "; ".join(bad), f"change {r.field} (the daughterboard differs from "
                         f"{p['device']}'s? then use its own profile)"))
    else:
        out.append(Check("frontend", r.field, True, f"{fe['name'] or fe['slot']}: {want_f:g} Hz, "
                         f"{want_g:g} dB, {ant}"))
    return out


def check_images_present(r: Radio, images_dir: Path | None) -> Check:
    """For devices UHD loads from the host (B2xx), the profile's image files are in the
    images folder."""
    img = devices.load_images(names=[r.profile["device"]])["profiles"][r.profile["device"]]
    fetch = devices.downloader_command(img)
    if img["load"] == "none":
        return Check("images", r.field, True, "a simulated device: no image")
    if img["load"] != "host":
        return Check("images", r.field, True, "in the device's flash (checked by the probe)")
    if images_dir is None:
        return Check("images", r.field, False, "no UHD images folder", fetch)
    files = [f for t in img["targets"] for f in t["files"]]
    missing = [f for f in files if not (images_dir / f).is_file()]
    if missing:
        return Check("images", r.field, False, f"{', '.join(missing)} not in {images_dir}", fetch)
    return Check("images", r.field, True, f"{', '.join(files)} in {images_dir}")


def check_link(r: Radio, mtu: int | None) -> Check:
    """USB radios over USB 3 (the probe says so); network radios on a link whose MTU is at
    least the profile's (mtu: of the host interface towards the device)."""
    p = r.profile
    if p["transport"] == "usb3":
        usb = (r.probe or {}).get("usb")
        if usb == 3:
            return Check("link", r.field, True, "USB 3")
        return Check("link", r.field, False, f"USB {usb if usb else '?'}",
                     "plug the radio into a USB 3 port (SuperSpeed, 5000M in `lsusb -t`), "
                     "with a USB 3 cable, no hub")
    want = p["host"]["mtu"]
    if mtu is None:
        addr = device_addr(r.found) if r.found else "?"
        return Check("link", r.field, False, f"no interface towards {addr}",
                     f"give the host an address on the radio's subnet ({p['host']['host_addr']})")
    if mtu < want:
        return Check("link", r.field, False, f"MTU {mtu} < {want}",
                     f"ip link set dev IFACE mtu {want}")
    return Check("link", r.field, True, f"{p['transport']}, MTU {mtu}")


def check_benchmark(r: Radio, fs: float, text: str, rc: int) -> Check:
    """benchmark_rate at the run's rate, in the radio's direction: no underflow (U),
    overflow (O), drop (D), sequence error (S) or late command (L)."""
    res = parse_benchmark(text)
    d = "TX" if r.role == "tx" else "RX"
    if res is None:
        return Check("benchmark", r.field, False, f"benchmark_rate {d} at {fs:g} S/s did not "
                     f"finish (exit {rc})",
                     f"run it by hand: {benchmark_argv(r.settings['args'], fs, r.role, 5)}")
    keys = (("underruns", "underflows"), ("seq_errors_tx", "TX sequence errors"),
            ("late", "late commands"), ("timeouts_tx", "TX timeouts")) if r.role == "tx" else \
        (("overruns", "overflows"), ("dropped", "dropped samples"),
         ("seq_errors_rx", "RX sequence errors"), ("timeouts_rx", "RX timeouts"))
    moved = res.get("tx_samples" if r.role == "tx" else "rx_samples", 0)
    bad = [f"{res[k]} {label}" for k, label in keys if res.get(k, 0) > 0]
    if moved == 0:
        bad.append("no samples moved")
    if bad:
        return Check("benchmark", r.field, False, f"{d} at {fs:g} S/s: {', '.join(bad)}",
                     "governor performance, nothing else on the bus/link, "
                     + ("a USB 3 port of its own" if r.profile["transport"] == "usb3" else
                        f"MTU {r.profile['host']['mtu']} and larger socket buffers"))
    return Check("benchmark", r.field, True, f"{d} at {fs:g} S/s: {moved} samples, none lost")


def check_sync(radios: list[Radio]) -> Check:
    """One clock and one time source for every radio, each one its device offers (the
    profile's, and the probe's when it ran)."""
    clocks = {r.settings["clock_source"] or "internal" for r in radios}
    times = {r.settings["time_source"] or "internal" for r in radios}
    if len(clocks) > 1 or len(times) > 1:
        listing = "; ".join(f"{r.field}: {r.settings['clock_source'] or 'internal'}/"
                            f"{r.settings['time_source'] or 'internal'}" for r in radios)
        return Check("sync", "all", False, f"clock/time sources differ ({listing})",
                     "give every radio the same clock_source and time_source (a shared "
                     "10 MHz + PPS, GPSDOs, or a MIMO cable between two N210s)")
    clock, time_ = clocks.pop(), times.pop()
    for r in radios:
        offered_c = (r.probe or {}).get("clock_sources") or r.profile["clock_sources"]
        offered_t = (r.probe or {}).get("time_sources") or r.profile["time_sources"]
        if clock not in offered_c or time_ not in offered_t:
            return Check("sync", r.field, False, f"clock {clock}/time {time_} not offered "
                         f"(clock: {', '.join(offered_c)}; time: {', '.join(offered_t)})",
                         "pick a source every radio has (a GPSDO must be fitted for gpsdo)")
    if clock == "mimo" and len(radios) != 2:
        return Check("sync", "all", False, f"clock mimo with {len(radios)} radios",
                     "a MIMO cable joins exactly two N2x0s")
    if len(radios) > 1 and clock == "internal":
        return Check("sync", "all", True, "internal clocks: the clients find slots by their "
                     "preamble (no shared time needed)")
    return Check("sync", "all", True, f"clock {clock}, time {time_} on every radio")


def check_governor(governors: list[str]) -> Check:
    if not governors:
        return Check("governor", "host", True, "no cpufreq (fixed clock)")
    other = sorted({g for g in governors if g != "performance"})
    if other:
        return Check("governor", "host", False, f"CPU governor {', '.join(other)} on "
                     f"{sum(g != 'performance' for g in governors)} of {len(governors)} CPUs",
                     "cpupower frequency-set -g performance (package linux-cpupower)")
    return Check("governor", "host", True, f"performance on {len(governors)} CPUs")


def check_rt_priority(euid: int, rlimit_rtprio: int, wanted: int) -> Check:
    want = max(1, wanted)
    if euid == 0:
        return Check("rt priority", "host", True, "root: SCHED_FIFO allowed")
    if rlimit_rtprio >= want:
        return Check("rt priority", "host", True, f"RLIMIT_RTPRIO {rlimit_rtprio} >= {want}")
    return Check("rt priority", "host", False, f"RLIMIT_RTPRIO {rlimit_rtprio} < {want}",
                 "add the user to group usrp (uhd-host's /etc/security/limits.d/uhd.conf "
                 "allows it rtprio 99), then log in again; or run as root")


def check_net_buffers(radios: list[Radio], rmem_max: int, wmem_max: int) -> Check | None:
    net = [r for r in radios if r.profile["transport"] != "usb3"]
    if not net:
        return None
    want_r = max(r.profile["host"]["rmem_max"] for r in net)
    want_w = max(r.profile["host"]["wmem_max"] for r in net)
    bad = []
    if rmem_max < want_r:
        bad.append(f"net.core.rmem_max {rmem_max} < {want_r}")
    if wmem_max < want_w:
        bad.append(f"net.core.wmem_max {wmem_max} < {want_w}")
    if bad:
        return Check("socket buffers", "host", False, "; ".join(bad),
                     f"sysctl -w net.core.rmem_max={want_r} net.core.wmem_max={want_w} "
                     "(and in /etc/sysctl.d/ to keep it)")
    return Check("socket buffers", "host", True, f"rmem_max {rmem_max}, wmem_max {wmem_max}")


# ----------------------------------------------------------------------------------------
# Gathering: the tools and the host


def benchmark_binary() -> str | None:
    for p in BENCHMARK_PATHS:
        if os.access(p, os.X_OK):
            return p
    return shutil.which("benchmark_rate")


def benchmark_argv(args: str, fs: float, role: str, seconds: float) -> list[str]:
    d = "tx" if role == "tx" else "rx"
    return [benchmark_binary() or "benchmark_rate", "--args", args, "--duration", f"{seconds:g}",
            f"--{d}_rate", f"{fs:g}", "--channels", "0"]


class Probe:
    """Runs the UHD tools and reads the host (tests replace it with recorded output)."""

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout

    def _run(self, argv: list[str], timeout: float | None = None) -> tuple[str, int]:
        try:
            p = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                               timeout=timeout or self.timeout)
        except FileNotFoundError:
            return f"Error: {argv[0]} not found (apt-get install uhd-host)", 127
        except subprocess.TimeoutExpired:
            return f"Error: {argv[0]} did not finish in {timeout or self.timeout:g} s", 124
        return p.stdout + p.stderr, p.returncode

    def find_devices(self) -> tuple[str, int]:
        return self._run(["uhd_find_devices"])

    def probe(self, args: str) -> tuple[str, int]:
        return self._run(["uhd_usrp_probe", "--args", args])

    def benchmark(self, args: str, fs: float, role: str, seconds: float) -> tuple[str, int]:
        return self._run(benchmark_argv(args, fs, role, seconds), timeout=seconds + 60)

    def images_dir(self) -> Path | None:
        for d in filter(None, (os.environ.get("UHD_IMAGES_DIR"), *IMAGES_DIRS)):
            if Path(d).is_dir():
                return Path(d)
        return None

    def governors(self) -> list[str]:
        return [Path(f).read_text().strip() for f in
                sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"))]

    def rt(self) -> tuple[int, int]:
        soft, _hard = resource.getrlimit(resource.RLIMIT_RTPRIO)
        return os.geteuid(), soft

    def sysctl(self, key: str) -> int:
        return int(Path("/proc/sys/" + key.replace(".", "/")).read_text().split()[0])

    def mtu_towards(self, addr: str) -> int | None:
        out, rc = self._run(["ip", "-o", "route", "get", addr], timeout=5)
        m = re.search(r"\bdev (\S+)", out) if rc == 0 else None
        if not m:
            return None
        try:
            return int(Path(f"/sys/class/net/{m.group(1)}/mtu").read_text())
        except OSError:
            return None


# ----------------------------------------------------------------------------------------
# The run


def experiment_radios(cfg: dict) -> list[Radio]:
    """The radios of a resolved phy.mode uhd experiment with their profiles."""
    if cfg.get("kind") != "testbed" or cfg["phy"]["mode"] != "uhd":
        mode = cfg["phy"]["mode"] if cfg.get("kind") == "testbed" else cfg.get("kind")
        raise ConfigError(f"phy.mode: {mode!r}: preflight checks radios, i.e. a testbed "
                          "experiment with phy.mode uhd")
    out = []
    for fld, r, role in uhd_radios(cfg):
        name, key = radio_profile(cfg, r, fld)
        out.append(Radio(fld, r, role, devices.profile(name, key), key))
    return out


def check_profile(r: Radio, fs: float, both_directions: bool = False) -> Check:
    """The radio's settings within its device profile (oppsched check refuses them too;
    preflight loads the experiment with these checks deferred to show them here). With
    `both_directions` (a medium over the air: every radio sends and receives) also the
    settings of its second direction."""
    dev = r.profile["device"]
    try:
        check = devices.check_radio_both_ways if both_directions else devices.check_radio
        check(r.profile, r.settings, fs, r.role, r.field)
    except ConfigError as exc:
        return Check("profile", r.field, False, str(exc),
                     f"set it within the {dev}'s limits (firmware/profiles/{dev}.yaml), or "
                     f"name the radio's own profile in {r.profile_key}")
    s = r.settings
    return Check("profile", r.field, True, f"{dev}: {fs:g} S/s, {s['freq_hz']:g} Hz, "
                 f"{s['gain_db']:g} dB, {s['antenna']}")


def preflight(cfg: dict, probe: Probe, benchmark_s: float = 5.0) -> tuple[list[Check], str | None]:
    """All checks of a resolved experiment. Returns (checks, message): message is set when
    no radio at all was found (then only the profiles and the host are checked)."""
    radios = experiment_radios(cfg)
    fs = cfg["phy"]["uhd"]["sample_rate"]
    checks: list[Check] = []
    tdd = cfg["medium"]["mode"] != "none"  # uplink slots over the air
    profiled = {r.field: check_profile(r, fs, tdd) for r in radios}
    text, rc = probe.find_devices()
    found = parse_find_devices(text)
    message = None
    if rc == 127:
        message = (f"{text.removeprefix('Error: ')}: it lists the radios; without it no "
                   "radio can be checked")
    elif not found:
        missing = "; ".join(f"{r.field} ({r.profile['name']}, args '{r.settings['args']}')"
                            for r in radios)
        message = (f"no UHD device found (uhd_find_devices lists none); missing: {missing}. "
                   "Connect the radios (USB 3, or Ethernet with the host on their subnet) "
                   "and check they show in `uhd_find_devices`")
    for r in radios:
        checks.append(profiled[r.field])
        if message:
            continue
        c = check_found(r, found)
        checks.append(c)
        checks.append(check_images_present(r, probe.images_dir()))
        if not c.ok:
            continue
        text, rc = probe.probe(r.settings["args"])
        pc = check_probe(r, text, rc)
        checks.extend(pc)
        if not all(x.ok for x in pc):
            continue
        mtu = probe.mtu_towards(device_addr(r.found)) if r.profile["transport"] != "usb3" \
            and device_addr(r.found) else None
        checks.append(check_link(r, mtu))
        if benchmark_s > 0 and profiled[r.field].ok:  # not at a rate the device cannot run
            text, rc = probe.benchmark(r.settings["args"], fs, r.role, benchmark_s)
            checks.append(check_benchmark(r, fs, text, rc))
    checks.append(check_sync(radios))
    checks.append(check_governor(probe.governors()))
    euid, rtprio = probe.rt()
    checks.append(check_rt_priority(euid, rtprio, cfg["topology"]["rt_priority"]))
    nb = check_net_buffers(radios, probe.sysctl("net.core.rmem_max"),
                           probe.sysctl("net.core.wmem_max"))
    if nb:
        checks.append(nb)
    return checks, message


def table(checks: list[Check]) -> str:
    """The pass/fail table, with each failure's fix under it."""
    w1 = max([len("CHECK")] + [len(c.name) for c in checks])
    w2 = max([len("RADIO")] + [len(c.radio) for c in checks])
    lines = [f"{'CHECK':<{w1}}  {'RADIO':<{w2}}  RESULT  DETAIL"]
    for c in checks:
        verdict = "pass" if c.ok else "FAIL"
        lines.append(f"{c.name:<{w1}}  {c.radio:<{w2}}  {verdict:<6}  {c.detail}")
        if not c.ok and c.fix:
            lines.append(f"{'':<{w1}}  {'':<{w2}}  {'fix:':<6}  {c.fix}")
    return "\n".join(lines)


def run(cfg: dict, probe: Probe | None = None, benchmark_s: float = 5.0, out=print,
        err=lambda m: print(m, file=sys.stderr)) -> int:
    """Prints the table, then the summary or (to `err`) the no-radio message; 0 if every
    check passed, else 1."""
    checks, message = preflight(cfg, probe or Probe(), benchmark_s)
    out(table(checks))
    failed = [c for c in checks if not c.ok]
    if message:
        err(f"oppsched preflight: {message}")
        return NO_DEVICE_EXIT
    out(f"oppsched preflight: {len(checks) - len(failed)} passed, {len(failed)} failed"
        + ("" if failed else ": ready for `oppsched run`"))
    return 1 if failed else 0
