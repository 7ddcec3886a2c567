"""`oppsched linkcurves`, `oppsched mcstable` and `oppsched lcmerge`: measured BLER vs
SNR per MCS through the real PHY chain (the points: oppsched.commands.linkcurves_point),
their plot, and the CQI -> MCS table the MAC uses, derived from those curves
(oppsched.linkmodel, which the PHY processes and the daemons' configuration read too).
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from oppsched.config import ConfigError, renamed_value
from oppsched.commands.linkcurves_point import (SweepConfig, parse_mcs_list, parse_snr_range,
                                                run_sweep)
from oppsched.linkmodel import (LDPC_LENGTHS, derive_table, load_table, read_csv, read_summary,
                                summarize, summary_table, write_csv)
from oppsched.names import FECS, PROFILE_ALIASES, PROFILES

# ---------------------------------------------------------------------------------------
# Plot


def plot(rows: list[dict], summary: dict, path: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5.2))
    by_mcs: dict[int, list[dict]] = {}
    for r in rows:
        by_mcs.setdefault(int(r["mcs"]), []).append(r)
    cmap = plt.get_cmap("viridis")
    target = summary["target_bler"]
    floor = 1e-4
    for m in sorted(by_mcs):
        rs = sorted(by_mcs[m], key=lambda r: r["snr_db"])
        c = cmap(m / 7.0)
        xs = [r["snr_db"] for r in rs]
        # a point without any error has no place on a log axis: a line down to a marker
        # on the floor, at the first such point, says "below 1/slots"
        ys, zero = [], []
        for r in rs:
            if r["bler"] > 0:
                ys.append(r["bler"])
            elif not zero:
                ys.append(floor)
                zero.append((r["snr_db"], floor))
            else:
                ys.append(float("nan"))
        a1.semilogy(xs, ys, "o-", color=c, ms=3, label=f"{m}: {rs[0]['modulation']} "
                    f"{_rate_str(rs[0]['code_rate'])}")
        if zero:
            a1.plot(*zero[0], "v", color=c, ms=6)
        if "bler_tx2" in rs[0]:
            y2 = [r["bler_tx2"] if r["bler_tx2"] > 0 else float("nan") for r in rs]
            a1.semilogy(xs, y2, "--", color=c, lw=1)
    a1.axhline(target, color="red", lw=0.8, ls=":")
    a1.set_ylim(floor * 0.7, 1.05)
    a1.set_xlabel("SNR: mean Es/N0 per occupied subcarrier (dB)")
    a1.set_ylabel("BLER (first transmission" + ("; dashed: after 2" if any(
        "bler_tx2" in r for r in rows) else "") + ")")
    a1.grid(True, which="both", alpha=0.3)
    a1.legend(fontsize=8, title="MCS")
    a1.set_title("BLER vs SNR (v: first point without any error)", fontsize=10)

    ok = [e for e in summary["mcs"] if e["snr_at_target_db"] is not None]
    se = np.linspace(0.2, 6.0, 200)
    a2.plot(10 * np.log10(2 ** se - 1), se, "k-", label="Shannon: SNR = 2^SE - 1")
    if ok:
        a2.plot([e["snr_at_target_db"] for e in ok], [e["spectral_efficiency"] for e in ok],
                "o-", color="C0", label=f"measured, SNR at {target:.0%} BLER (MCS SE)")
        a2.plot([e["snr_at_target_db"] for e in ok], [e["tb_bits_per_re"] for e in ok],
                "s--", color="C1", ms=4, lw=0.8, label="same, TB bits per RE")
        for e in ok:
            a2.annotate(f"{e['mcs']}: {e['shannon_gap_db']:+.1f} dB",
                        (e["snr_at_target_db"], e["spectral_efficiency"]),
                        textcoords="offset points", xytext=(6, -10), fontsize=7)
        if any(f"snr_at_target_tx2_db" in e for e in ok):
            pts = [(e["snr_at_target_tx2_db"], e["spectral_efficiency"] / 2) for e in ok
                   if e.get("snr_at_target_tx2_db") is not None]
            if pts:
                a2.plot(*zip(*pts), "^:", color="C2", ms=4,
                        label="after 2 tx (SE halved: 2 slots)")
    a2.set_xlabel("SNR (dB)")
    a2.set_ylabel("spectral efficiency (info bits per data subcarrier per symbol)")
    a2.grid(True, alpha=0.3)
    a2.legend(fontsize=8, loc="upper left")
    a2.set_title("SNR at the target BLER vs Shannon", fontsize=10)
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _rate_str(cr: float) -> str:
    for num, den in ((1, 2), (2, 3), (3, 4), (5, 6)):
        if abs(cr - num / den) < 1e-3:
            return f"{num}/{den}"
    return f"{cr:.3g}"


# ---------------------------------------------------------------------------------------
# Commands


def config_from_args(a) -> SweepConfig:
    cfg = SweepConfig(
        channel=a.channel, mcs=parse_mcs_list(a.mcs), snrs=parse_snr_range(a.snr),
        tbs=a.tbs, harq=a.harq, max_tx=a.max_tx, harq_processes=a.harq_processes,
        profile=a.profile, fec=a.fec, sample_rate=a.sample_rate, slots=a.slots, min_errors=a.min_errors,
        seed=a.seed, doppler_hz=a.doppler, cfo_hz=a.cfo, skip_after_zero=not a.no_skip,
        target_bler=a.target_bler, flowgraph=a.flowgraph, ldpc_max_n=a.ldpc_max_n,
        stop_below=a.stop_below, ideal_rx=a.ideal_rx)
    cfg.validate()
    return cfg


def command_line(a) -> str:
    """The fully resolved command (every option spelt out) that reproduces this run."""
    parts = ["oppsched", "linkcurves", "--channel", a.channel, "--mcs", a.mcs, "--snr", a.snr]
    if a.tbs is not None:
        parts += ["--tbs", str(a.tbs)]
    if a.harq:
        parts += ["--harq", "--max-tx", str(a.max_tx), "--harq-processes", str(a.harq_processes)]
    parts += ["--profile", a.profile, "--fec", a.fec, "--sample-rate", f"{a.sample_rate:g}",
              "--slots",
              str(a.slots), "--min-errors", str(a.min_errors), "--seed", str(a.seed)]
    if a.channel == "fading":
        parts += ["--doppler", f"{a.doppler:g}"]
    if a.cfo:
        parts += ["--cfo", f"{a.cfo:g}"]
    if a.target_bler != 0.1:
        parts += ["--target-bler", f"{a.target_bler:g}"]
    if a.ldpc_max_n != LDPC_LENGTHS[-1]:
        parts += ["--ldpc-max-n", str(a.ldpc_max_n)]
    if a.stop_below is not None:
        parts += ["--stop-below", f"{a.stop_below:g}"]
    if a.ideal_rx:
        parts.append("--ideal-rx")
    if a.no_skip:
        parts.append("--no-skip")
    if a.flowgraph:
        parts.append("--flowgraph")
    if a.table:
        parts += ["--table", a.table]
    parts += ["--out", a.out]
    return " ".join(parts)


def cmd_linkcurves(a) -> int:
    argv_text = command_line(a)
    cfg = config_from_args(a)
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: {a.out!r} cannot be created ({exc.strerror})") from None
    t0 = time.monotonic()
    rows = run_sweep(cfg)
    elapsed = time.monotonic() - t0
    write_csv(rows, out / "linkcurves.csv")
    meta = {"command": argv_text, "config": asdict(cfg), "elapsed_s": round(elapsed, 1)}
    summary = summarize(rows, cfg.target_bler, meta)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    chan = cfg.channel
    if cfg.channel == "fading":
        chan += f" (Jakes, f_d {cfg.doppler_hz:g} Hz)"
    title = (f"{chan}, {cfg.profile} profile at {cfg.sample_rate / 1e6:g} Msps, {cfg.fec.upper()}"
             f"{f' (codewords <= {cfg.ldpc_max_n})' if cfg.ldpc_max_n != 1944 else ''}"
             f"{', HARQ' if cfg.harq else ''}")
    plot(rows, summary, out / "linkcurves.png", title)
    print(summary_table(summary))
    print(f"\nwrote {out / 'linkcurves.csv'}, {out / 'summary.json'}, {out / 'linkcurves.png'}")
    if a.table:
        _write_table(summary, cfg.profile, cfg.sample_rate, str(out / "linkcurves.csv"), a.table,
                     cfg.fec)
    return 0


def _write_table(summary, profile, sample_rate, source, dest, fec="ldpc") -> None:
    text, warnings = derive_table(summary, profile, sample_rate, source, fec)
    for w in warnings:
        print(f"mcstable: warning: {w}", file=sys.stderr)
    load_table(text)  # must load in the MAC: fail here rather than in the daemon
    try:
        Path(dest).parent.mkdir(parents=True, exist_ok=True)
        Path(dest).write_text(text)
    except OSError as exc:
        raise ConfigError(f"--table: {dest!r} cannot be written ({exc.strerror})") from None
    print(f"wrote {dest}")


def cmd_mcstable(a) -> int:
    rows = read_csv(a.curves)
    profile = a.profile or str(rows[0].get("profile", "") or "")
    if not profile:
        raise ConfigError("--profile: not given and the CSV has no profile column")
    profile = renamed_value("--profile" if a.profile else f"{a.curves}: profile", profile,
                            PROFILE_ALIASES)
    if profile not in PROFILES:
        raise ConfigError(f"--profile: {profile!r} not one of {', '.join(PROFILES)}")
    fec = a.fec or str(rows[0].get("fec", "") or "") or "ldpc"
    if fec not in FECS:
        raise ConfigError(f"--fec: {fec!r} not one of {', '.join(FECS)}")
    sample_rate = a.sample_rate or float(rows[0].get("sample_rate_hz", 0) or 0)
    if not sample_rate > 0:
        raise ConfigError("--sample-rate: not given and the CSV has no sample_rate_hz column")
    if not 0 < a.target_bler < 1:
        raise ConfigError(f"--target-bler: {a.target_bler!r} not in (0, 1)")
    summary = summarize(rows, a.target_bler)
    print(summary_table(summary))
    _write_table(summary, profile, sample_rate, str(a.curves), a.out, fec)
    return 0


def cmd_lcmerge(a) -> int:
    """Several linkcurves folders of one profile/rate/FEC (e.g. one per MCS, measured in
    parallel) -> one folder: linkcurves.csv (MCS then SNR order), summary.json (with each
    part's command), linkcurves.png and with --table the MCS table."""
    rows, commands, meta_cfg = [], [], None
    seen: dict[tuple, str] = {}
    for d in a.parts:
        rs = read_csv(Path(d) / "linkcurves.csv", "PARTS")
        part = read_summary(Path(d) / "summary.json", "PARTS")
        cfg = part.get("config") or {}
        key = {k: cfg.get(k) for k in ("profile", "sample_rate", "fec", "channel",
                                       "ldpc_max_n", "tbs", "harq")}
        if meta_cfg is None:
            meta_cfg = key
        elif key != meta_cfg:
            raise ConfigError(f"PARTS: {d!r} was measured with {key}, the first part with "
                              f"{meta_cfg}")
        for r in rs:
            k = (int(r["mcs"]), float(r["snr_db"]))
            if k in seen:
                raise ConfigError(f"PARTS: MCS {k[0]} at {k[1]:g} dB is in {seen[k]!r} and "
                                  f"{d!r}")
            seen[k] = d
        rows += rs
        if part.get("command"):
            commands.append(part["command"])
    rows.sort(key=lambda r: (int(r["mcs"]), float(r["snr_db"])))
    out = Path(a.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"--out: {a.out!r} cannot be created ({exc.strerror})") from None
    write_csv(rows, out / "linkcurves.csv")
    summary = summarize(rows, a.target_bler, {"commands": commands, "config": meta_cfg,
                                              "parts": [str(d) for d in a.parts]})
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    cap = meta_cfg.get("ldpc_max_n") or 1944
    plot(rows, summary, out / "linkcurves.png",
         f"{meta_cfg['channel']}, {meta_cfg['profile']} profile at "
         f"{float(meta_cfg['sample_rate']) / 1e6:g} Msps, {str(meta_cfg['fec']).upper()}"
         f"{f' (codewords <= {cap})' if cap != 1944 else ''}")
    print(summary_table(summary))
    if a.table:
        _write_table(summary, meta_cfg["profile"], float(meta_cfg["sample_rate"]),
                     str(out / "linkcurves.csv"), a.table, meta_cfg["fec"])
    return 0


def add_parsers(sub) -> None:
    """The `linkcurves` and `mcstable` subcommands (cli.py calls this)."""
    lc = sub.add_parser(
        "linkcurves", help="measure BLER vs SNR per MCS through the real PHY chain",
        description="Measure BLER vs SNR (mean Es/N0 per occupied subcarrier) per MCS "
        "through TX -> channel emulator -> sync/demod -> header/TB decode; writes "
        "linkcurves.csv, summary.json and linkcurves.png in --out.")
    # `--snr -4:26:1` / `--snr -8,0,8`: argparse would take a value starting with '-' for an
    # option unless it looks like a negative number; widen that to SNR lists and ranges.
    lc._negative_number_matcher = re.compile(r"^-\d*\.?\d+([:,][-+]?\d*\.?\d+)*$")
    lc.add_argument("--channel", default="awgn", help="awgn | fading (flat Jakes, --doppler); "
                    "default %(default)s")
    lc.add_argument("--mcs", default="all", help="MCS list: all, 3, 0,2,5 or 0-3,7 "
                    "(default %(default)s)")
    lc.add_argument("--snr", default="-4:26:1", help="SNR points A:B:STEP or a,b,c in dB "
                    "(default %(default)s)")
    lc.add_argument("--tbs", type=int, default=None,
                    help="TB size in bytes for every MCS (default: the largest TB of each MCS)")
    lc.add_argument("--harq", action="store_true",
                    help="retransmit failed TBs (RV 0,2,3,1, soft combining); adds bler_txN")
    lc.add_argument("--max-tx", type=int, default=4, help="transmissions per TB with --harq "
                    "(default %(default)s)")
    lc.add_argument("--harq-processes", type=int, default=4, help="HARQ processes: slots "
                    "between transmissions of a TB (default %(default)s)")
    lc.add_argument("--profile", default="evdo", help="evdo (1.667 ms) | 3ms (3 ms) "
                    "(default %(default)s)")
    lc.add_argument("--fec", default="ldpc", help="payload FEC: ldpc (802.11n QC-LDPC) | conv "
                    "(K=7 convolutional) (default %(default)s)")
    lc.add_argument("--sample-rate", type=float, default=1e6, help="Hz (default %(default)g)")
    lc.add_argument("--slots", type=int, default=2000, help="TBs per point at most "
                    "(default %(default)s)")
    lc.add_argument("--min-errors", type=int, default=100, help="first-transmission errors "
                    "that end a point (default %(default)s)")
    lc.add_argument("--seed", type=int, default=1, help="(default %(default)s)")
    lc.add_argument("--doppler", type=float, default=60.0, help="max Doppler f_d (Hz) of "
                    "--channel fading (default %(default)g)")
    lc.add_argument("--cfo", type=float, default=0.0, help="carrier frequency offset (Hz)")
    lc.add_argument("--target-bler", type=float, default=0.1, help="BLER that defines the "
                    "threshold (default %(default)g)")
    lc.add_argument("--ldpc-max-n", type=int, default=1944, help="longest LDPC codeword a TB "
                    "may use: 648, 1296 or 1944 (default %(default)s, the PHY's; 648 measures "
                    "what the longer codewords gain)")
    lc.add_argument("--stop-below", type=float, default=None, metavar="BLER",
                    help="after the first point of an MCS whose BLER is below this, skip its "
                    "higher SNRs (e.g. 0.1: all the threshold needs; default: off)")
    lc.add_argument("--ideal-rx", action="store_true",
                    help="AWGN on the payload REs with the exact N0, decoded by the "
                    "tb_decoder alone (no sync, header or channel estimate): the code and "
                    "modulation without the receiver")
    lc.add_argument("--no-skip", action="store_true", help="measure every SNR point (default: "
                    "skip the SNRs above the first error-free point of an MCS)")
    lc.add_argument("--flowgraph", action="store_true", help="run through a GNU Radio "
                    "flowgraph of the gr-oppsched blocks instead of the classes directly")
    lc.add_argument("--table", metavar="OUT.csv", help="also derive the CQI -> MCS table "
                    "(mcs_table CSV for the MAC) and write it here")
    lc.add_argument("--out", required=True, help="output folder")
    lc.set_defaults(fn=cmd_linkcurves)

    mt = sub.add_parser(
        "mcstable", help="derive the CQI -> MCS table from measured link curves",
        description="Per MCS the SNR at the target first-transmission BLER (interpolated in "
        "log BLER) -> a CSV name,min_snr_db,rate_bps,bits_per_symbol,code_rate for "
        "oppsched.mac.mcs_table.from_csv / the apd's link_adaptation.table.")
    mt.add_argument("curves", help="linkcurves.csv written by `oppsched linkcurves`")
    mt.add_argument("--out", required=True, help="table CSV to write")
    mt.add_argument("--profile", default=None, help="evdo | 3ms (default: from the CSV)")
    mt.add_argument("--fec", default=None, help="ldpc | conv (default: from the CSV)")
    mt.add_argument("--sample-rate", type=float, default=None,
                    help="Hz (default: from the CSV)")
    mt.add_argument("--target-bler", type=float, default=0.1, help="(default %(default)g)")
    mt.set_defaults(fn=cmd_mcstable)

    mg = sub.add_parser(
        "lcmerge", help="merge linkcurves folders measured in parts (e.g. one per MCS)",
        description="Concatenate the linkcurves.csv of several folders of the same profile, "
        "rate, FEC and channel (each point at most once) and write linkcurves.csv, "
        "summary.json (every part's command) and linkcurves.png in --out.")
    mg.add_argument("parts", nargs="+", help="linkcurves output folders")
    mg.add_argument("--out", required=True, help="output folder")
    mg.add_argument("--table", metavar="OUT.csv", help="also write the MCS table here")
    mg.add_argument("--target-bler", type=float, default=0.1, help="(default %(default)g)")
    mg.set_defaults(fn=cmd_lcmerge)
