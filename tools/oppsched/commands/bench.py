"""`oppsched bench`: runs the Google Benchmark binaries of the build and prints a table, then
(unless `oppsched bench cpp`) the PHY chain bench (`oppsched bench phy`:
oppsched.commands.bench_phy) in a process of its own.

The other benches are modules of their own: `oppsched bench capacity` (bench_capacity),
`oppsched bench live` (bench_live) and `oppsched bench plugin` (bench_plugin).

Figures are written as JSON beside each other in --out; they are never part of the tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


BINARIES = [("mac", "host/mac_bench"), ("phy_bench", "gr-oppsched/lib/phy_bench")]


def run_bench(build: str, out: str, flt: str = "", phy: bool = False,
              min_time: float = 3.0) -> int:
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    found = 0
    for name, rel in BINARIES:
        exe = Path(build) / rel
        if not exe.exists():
            print(f"bench: {exe} not built, skipped", file=sys.stderr)
            continue
        found += 1
        js = outdir / f"{name}.json"
        cmd = [str(exe), f"--benchmark_out={js}", "--benchmark_out_format=json",
               "--benchmark_min_time=0.2"]
        if flt:
            cmd.append(f"--benchmark_filter={flt}")
        print(f"bench: {' '.join(cmd)}", file=sys.stderr)
        rc = subprocess.call(cmd)
        if rc:
            print(f"bench: {exe} exited {rc}", file=sys.stderr)
            return rc
        data = json.loads(js.read_text())
        print(f"\n{name}: {len(data['benchmarks'])} benchmarks -> {js}")
    if not found and not phy:
        print("bench: no benchmark binary found: run `make build` first", file=sys.stderr)
        return 1
    if phy:
        # the PHY chain bench needs the build's Python packages (gnuradio.oppsched)
        py_dir = str((Path(build) / "python").resolve())
        env = dict(os.environ)
        env["PYTHONPATH"] = py_dir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                      else "")
        cmd = [sys.executable, "-m", "oppsched", "bench", "phy", "--build", build, "--out",
               str(outdir / "phy.json"), "--min-time", str(min_time)]
        print(f"bench: {' '.join(cmd)}", file=sys.stderr)
        # a separate process: the CPU affinity it pins must not stick to this one
        rc = subprocess.call(cmd, env=env)
        if rc:
            print(f"bench: phy chain bench exited {rc}", file=sys.stderr)
            return rc
    return 0
