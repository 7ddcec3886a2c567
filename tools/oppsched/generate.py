"""The compiled modules' names and registries, written out as committed Python data.

`oppsched check`, `analyze`, every `--help` and the experiment schemas need the MAC library's
enumerations and its scheduler and AQM registries (kinds, parameters, defaults, ranges), and
the PHY's profiles and FECs, and the daemons' field tables (`oppsched-apd --schema`,
`oppsched-client --schema`, `oppsched-delay --schema`), but not the compiled code. This module reads them from the build (`_oppsched_mac` through oppsched.mac,
gnuradio.oppsched and the built daemons) and writes
tools/oppsched/_generated.py, which oppsched.names and oppsched.registry import, so that the
Python layers start without a build. It also writes docs/algorithms.md from that data.

    .venv/bin/python -m oppsched.generate            # rewrites both files from the build
    .venv/bin/python -m oppsched.generate --check    # exit 1 naming each stale file

tools/tests/test_registry.py fails when the committed files differ from what the build
gives.
"""

from __future__ import annotations

import argparse
import json
import pprint
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
GENERATED = PACKAGE / "_generated.py"

_HEADER = '''\
"""The compiled modules' enumerations, constants and registries, as plain data.

Generated from the build by `python -m oppsched.generate` (oppsched/generate.py):
tools/tests/test_registry.py fails when this file differs from what the build gives.
Do not edit by hand.
"""

# fmt: off
'''


# The daemons whose field tables (daemon/field_spec.h) are committed: name, path in the build.
DAEMONS = (("apd", "host/daemon/oppsched-apd"), ("client", "host/daemon/oppsched-client"),
           ("delay", "host/delay/oppsched-delay"))


def daemon_fields() -> dict:
    """Each built daemon's field table (`DAEMON --schema`), by daemon and dotted key;
    ImportError when a daemon is not built."""
    from oppsched import paths

    out = {}
    for name, rel in DAEMONS:
        exe = paths.build_dir(None) / rel
        if not exe.is_file():
            raise ImportError(f"{exe} is not built")
        doc = json.loads(subprocess.run([str(exe), "--schema"], check=True, capture_output=True,
                                        text=True, timeout=60).stdout)
        out[name] = {f.pop("key"): f for f in doc["fields"]}
    return out


def from_build() -> dict:
    """What the compiled modules define, read from them; ImportError without a build."""
    from gnuradio import oppsched as phy

    from oppsched import mac

    profiles = list(phy.numerology.profile_names())
    return {
        "ENUMS": {
            "SCHEDULER_KINDS": list(mac.SCHEDULER_KINDS),  # sched.h's policies
            "AQM_KINDS": list(mac.AQM_KINDS),  # aqm.h's aqm_kind
            "MARKING_AQM_KINDS": list(mac.MARKING_AQM_KINDS),  # aqm.h's marks_ecn
            "LINK_MODES": list(mac.LINK_MODES),  # ap_core.h's link_mode
            "MU_C_MODES": list(mac.MU_C_MODES),  # ap_core.h's mu_c_mode
            "MCS_TABLE_NAMES": list(mac.MCS_TABLE_NAMES),  # the tables the apd builds by name
            "FADING_MODELS": list(mac.FADING_MODELS),  # fading.h
            "PROFILES": profiles,  # numerology.h's slot numerologies
            "FECS": list(phy.fec_names()),  # numerology.h's fec_scheme
        },
        "CONSTANTS": {
            "SHANNON_TABLE_DEFAULTS": dict(mac.SHANNON_TABLE_DEFAULTS),
            "CLAMP_MEAN_SNR_DB": mac.CLAMP_MEAN_SNR_DB,
            "CLAMP_FAST_DOPPLER_HZ": mac.CLAMP_FAST_DOPPLER_HZ,
            "CLAMP_ATTEMPTS_SLOW_FADING": mac.CLAMP_ATTEMPTS_SLOW_FADING,
            "CLAMP_ATTEMPTS_FAST_FADING": mac.CLAMP_ATTEMPTS_FAST_FADING,
            "PDU_COMPACT_MAX_WINDOW": mac.PDU_COMPACT_MAX_WINDOW,
            "JAKES_GENERATORS": mac.JAKES_GENERATORS,
            "USER_NOBODY": mac.wire.USER_NOBODY,
            # each profile's slot (the same at every sample rate)
            "PROFILE_SLOT_S": {p: phy.numerology.profile(p).params.slot_duration
                               for p in profiles},
        },
        "SCHEDULER_REGISTRY": [dict(k) for k in mac.scheduler_registry()],
        "AQM_REGISTRY": [dict(k) for k in mac.aqm_registry()],
        "DAEMON_FIELDS": daemon_fields(),
    }


def committed() -> dict:
    """The committed data (tools/oppsched/_generated.py), as from_build() gives it."""
    from oppsched import _generated

    return {name: getattr(_generated, name) for name in
            ("ENUMS", "CONSTANTS", "SCHEDULER_REGISTRY", "AQM_REGISTRY", "DAEMON_FIELDS")}


def module_text(data: dict) -> str:
    """The text of _generated.py holding `data`."""
    parts = [_HEADER]
    for name, value in data.items():
        parts.append(f"{name} = " + pprint.pformat(value, width=100, sort_dicts=False) + "\n")
    return "\n".join(parts)


def outputs(data: dict) -> dict[Path, str]:
    """Every generated file and its text: _generated.py and docs/algorithms.md."""
    from oppsched import paths, registry

    return {GENERATED: module_text(data),
            paths.home() / "docs" / "algorithms.md": registry.markdown(
                data["SCHEDULER_REGISTRY"], data["AQM_REGISTRY"])}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m oppsched.generate", description=(
        "write tools/oppsched/_generated.py and docs/algorithms.md from the build's "
        "compiled modules"))
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 naming each file that differs")
    a = p.parse_args(argv)
    try:
        data = from_build()
    except ImportError as exc:
        print(f"oppsched.generate needs the built modules: {exc} (run `make`)", file=sys.stderr)
        return 2
    stale = []
    for path, text in outputs(data).items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path)
        if not a.check:
            path.write_text(text)
    verb = "stale" if a.check else "rewritten"
    for path in stale:
        print(f"{path}: {verb}")
    return 1 if a.check and stale else 0


if __name__ == "__main__":  # pragma: no cover - the regeneration command
    raise SystemExit(main())
