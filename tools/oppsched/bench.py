"""`oppsched bench`: runs the Google Benchmark binaries of the build and prints a table.

Figures are written as JSON beside each other in --out; they are never part of the tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BINARIES = [("mac", "host/mac_bench"), ("phy", "gr-oppsched/lib/phy_bench")]


def run_bench(build: str, out: str, flt: str = "") -> int:
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
    if not found:
        print("bench: no benchmark binary found: run `make build` first", file=sys.stderr)
        return 1
    return 0
