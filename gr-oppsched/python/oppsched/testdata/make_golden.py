#!/usr/bin/env python3
"""Generate the golden TX vectors (run once; the outputs are committed beside this file).

3 slots of the evdo profile at 1 Msps (3 x 1667 complex64 samples, 40 kB), once per payload
FEC (ldpc, conv):
  slot 0: user 0, MCS 2 (QPSK 3/4), full TB (113 bytes LDPC, 112 conv), HARQ process 0,
          NDI 0, RV 0
  slot 1: empty (header user 0xFFFF, padding)
  slot 2: user 1, MCS 7 (64QAM 5/6), a 100-byte TB, HARQ process 3, NDI 1, RV 1
TB bytes from numpy's PCG64 seeded with 20240601. slot_tx's t0 = 0, burst mode.

Writes golden_evdo_1msps_<fec>.npy (the samples) and golden_evdo_1msps_<fec>.json (the
grants and the TB bytes in hex). Usage (from the build tree):
  PYTHONPATH=BUILD/python python3 make_golden.py [OUTDIR] [FEC...]
"""

import json
import os
import sys

import numpy as np
from gnuradio import oppsched
from gnuradio.oppsched.testing import empty_grant, grant_dict, run_tx

SEED = 20240601
PROFILE, RATE, SLOTS = "evdo", 1e6, 3
FECS = tuple(oppsched.fec_names())  # numerology.h's fec_scheme


def stem(fec):
    return f"golden_evdo_1msps_{fec}"


def golden_grants(fec="ldpc"):
    num = oppsched.numerology.profile(PROFILE, RATE, fec)
    rng = np.random.default_rng(SEED)
    tb0 = rng.integers(0, 256, oppsched.mcs_set.tb_bytes(2, num), dtype=np.uint8).tobytes()
    tb2 = rng.integers(0, 256, 100, dtype=np.uint8).tobytes()
    grants = [
        {"slot": 0, "user": 0, "mcs": 2, "harq_pid": 0, "ndi": 0, "rv": 0, "tb": tb0.hex()},
        {"slot": 1, "empty": True},
        {"slot": 2, "user": 1, "mcs": 7, "harq_pid": 3, "ndi": 1, "rv": 1, "tb": tb2.hex()},
    ]
    return grants


def to_pmt(g):
    if g.get("empty"):
        return empty_grant(g["slot"])
    return grant_dict(
        g["slot"],
        g["user"],
        g["mcs"],
        bytes.fromhex(g["tb"]),
        g["harq_pid"],
        bool(g["ndi"]),
        g["rv"],
    )


def generate(fec="ldpc"):
    grants = golden_grants(fec)
    x, _, _ = run_tx([to_pmt(g) for g in grants], SLOTS, PROFILE, RATE, fec=fec)
    return grants, x


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    for fec in sys.argv[2:] or FECS:
        grants, x = generate(fec)
        np.save(os.path.join(out, stem(fec) + ".npy"), x.astype(np.complex64))
        meta = {"profile": PROFILE, "fec": fec, "sample_rate": RATE, "slots": SLOTS, "seed": SEED,
                "grants": grants}
        with open(os.path.join(out, stem(fec) + ".json"), "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
