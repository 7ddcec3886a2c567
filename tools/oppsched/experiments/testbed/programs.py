"""The programs of a testbed run: the daemons and the delay stage in the build tree, the
PHY of the experiment's phy.mode, iperf3 and tcpdump; and the error a run that cannot be
done raises (TestbedError)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

from oppsched import paths


class TestbedError(RuntimeError):
    """A run could not be done (missing program, daemon died, ...); the message says why."""

    __test__ = False


def build_dir(cfg: dict) -> Path:
    """The experiment's build_dir, else $OPPSCHED_BUILD, else the checkout's build/."""
    return paths.build_dir(cfg.get("build_dir"))


def _trusted(path: Path) -> str | None:
    """Why root must not take `path` (a folder or program of the build tree), or None: it
    has to be root's or the invoking user's and writable by no one else, or another user
    could swap a program root runs (oppsched-spm-mark) or the run user executes."""
    from oppsched.testbed.privsep import invoking_user

    st = os.stat(path)
    if st.st_uid not in (0, invoking_user()[0]):
        return f"{path} is owned by uid {st.st_uid}, neither root nor the invoking user"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {st.st_mode & 0o7777:04o})"
    return None


def check_build_tree(b: Path, programs) -> None:
    """TestbedError naming build_dir unless the build folder and every folder from it down
    to each program, and the program, are trusted (_trusted)."""
    b = Path(b)
    todo = [b]
    for p in programs:
        p = Path(p)
        try:
            rel = p.relative_to(b)
        except ValueError:
            continue  # not in the build tree (the Python PHY: the interpreter)
        for i in range(1, len(rel.parts) + 1):
            todo.append(b.joinpath(*rel.parts[:i]))
    for path in dict.fromkeys(todo):
        why = _trusted(path)
        if why:
            raise TestbedError(f"build_dir: {str(b)!r} is not a trusted build folder: {why}; "
                               "the run starts its programs from it (as root for "
                               "oppsched-spm-mark): chown it or chmod go-w")


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def find_programs(cfg: dict) -> dict:
    """Paths/argv prefixes of the programs of a run; TestbedError naming what is missing."""
    b = build_dir(cfg)
    out = {}
    missing = []
    # (key, path in the build folder, target, why the run needs it or None: always)
    built = [("apd", "host/daemon/oppsched-apd", "oppsched-apd", None),
             ("client", "host/daemon/oppsched-client", "oppsched-client", None)]
    if any(f.get("transport") == "wrc" for f in cfg.get("flows", [])):
        built.append(("wrc", "host/daemon/oppsched-wrc", "oppsched-wrc",
                      "flows with transport wrc"))
    if cfg.get("tcp", {}).get("spm_marking", {}).get("enabled"):
        built.append(("spm_mark", "host/spm_mark/oppsched-spm-mark", "oppsched-spm-mark",
                      "tcp.spm_marking"))
    for key, rel, target, why in built:
        p = b / rel
        if _executable(p):
            out[key] = p
        else:
            missing.append(f"{p} ({why + ': ' if why else ''}cmake --build {b} --target {target})")
    delay = b / "host/delay/oppsched-delay"
    out["delay"] = delay if delay.is_file() else None
    mode = cfg["phy"]["mode"]
    if mode == "abstract":
        # An executable in the build folder first (docs/daemons.md names it
        # oppsched-phy-abstract), else the Python module (tools/oppsched/phy/abstract.py).
        exe = b / "host/phy/oppsched-phy-abstract"
        if _executable(exe):
            out["phy"] = [str(exe)]
        elif importlib.util.find_spec("oppsched.phy.abstract") is not None:
            out["phy"] = [sys.executable, "-m", "oppsched.phy.abstract"]
        else:
            missing.append("the abstract PHY (tools/oppsched/phy/abstract.py, "
                           "python -m oppsched.phy.abstract)")
    elif mode == "sample":
        so = list((b / "python/gnuradio/oppsched").glob("oppsched_python*.so"))
        if so and importlib.util.find_spec("oppsched.phy.loopback") is not None:
            out["phy"] = [sys.executable, "-m", "oppsched.phy.loopback"]
        else:
            missing.append(f"the sample PHY (gnuradio.oppsched in {b}/python: cmake --build "
                           f"{b}; tools/oppsched/phy/loopback.py)")
    elif mode == "uhd":
        # The radios themselves are looked for by the PHY when it starts (its first act).
        so = list((b / "python/gnuradio/oppsched").glob("oppsched_python*.so"))
        if so and importlib.util.find_spec("oppsched.phy.uhd") is not None and \
                importlib.util.find_spec("gnuradio.uhd") is not None:
            out["phy"] = [sys.executable, "-m", "oppsched.phy.uhd"]
        else:
            missing.append(f"the UHD PHY (gnuradio.oppsched in {b}/python: cmake --build "
                           f"{b}; gnuradio.uhd: apt-get install gr-uhd; "
                           "tools/oppsched/phy/uhd.py)")
    for tool in ("iperf3", "tcpdump"):
        if shutil.which(tool) is None and not (tool == "tcpdump" and not cfg["capture"]["pcaps"]):
            missing.append(f"{tool} (apt-get install {tool})")
    if missing:
        raise TestbedError("kind testbed: missing programs: " + "; ".join(missing)
                           + f". Build folder: {b} (set build_dir or ${paths.BUILD_ENV})")
    check_build_tree(b, [v for k, v in out.items() if isinstance(v, Path)]
                     + [Path(v[0]) for v in out.values() if isinstance(v, list)])
    return out


def programs_available(cfg: dict | None = None) -> tuple[bool, str]:
    """(True, "") when every program a default abstract-PHY run needs exists, else
    (False, why): for tests that skip (locally) or fail (CI) without them."""
    cfg = cfg or {"build_dir": "", "phy": {"mode": "abstract"}, "capture": {"pcaps": True}}
    try:
        find_programs(cfg)
    except TestbedError as exc:
        return False, str(exc)
    return True, ""


def phy_env(cfg: dict) -> dict:
    """PYTHONPATH for a Python PHY: this package and the build's extension modules."""
    parts = [str(paths.package_parent()), str(build_dir(cfg) / "python")]
    if os.environ.get("PYTHONPATH"):
        parts.append(os.environ["PYTHONPATH"])
    return {"PYTHONPATH": os.pathsep.join(parts)}
