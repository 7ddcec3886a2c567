"""The command-line parsers of the commands whose modules need numpy, pandas or
matplotlib (`tcpview`, `timeline`, `decode`): the parser is built here and the module is
imported only when its command runs, so `oppsched --help` and `oppsched check` start without
them."""

from __future__ import annotations

from importlib import import_module


def _later(module: str, name: str):
    """The command function `name` of `module`, imported when the command runs."""
    def run(a) -> int:
        return getattr(import_module(module), name)(a)
    return run


def tcpview_parser(sub) -> None:
    p = sub.add_parser("tcpview", help="a run's TCP view: congestion window, RTT and AP queue "
                       "against time, and time-sequence graphs with the user's slots "
                       "(Srinivasan & Baras, Figs. 6-8)")
    p.add_argument("results", help="results folder of one testbed run (with capture.pcaps)")
    p.add_argument("--flows", help="comma-separated flow ids (default: the flows with the "
                   "lowest and the highest goodput)")
    p.add_argument("--out", help="where to write the PNGs and tcp-view.csv (default: the run "
                   "folder)")
    p.add_argument("--all", action="store_true", help="tcp-view.csv over every downstream "
                   "flow (the figures stay those of --flows)")
    p.add_argument("--zoom", default="0,5", help="the time-sequence graphs' zoomed window, "
                   "A,B seconds after t0 (default: %(default)s)")
    p.set_defaults(fn=_later("oppsched.commands.tcpview", "_cmd"))


def timeline_parser(sub) -> None:
    p = sub.add_parser("timeline", help="write a run's traces on one clock as one table, "
                       "timeline.csv.gz (every run folder under DIR; docs/timeline.md)")
    p.add_argument("results", help="a run folder, a results folder or a sweep folder")
    p.set_defaults(fn=_later("oppsched.analysis.timeline", "_cmd"))


def decode_parser(sub) -> None:
    d = sub.add_parser("decode", help="decode a SigMF IQ recording (capture.iq) offline "
                       "through the same receiver; writes its per-slot trace")
    d.add_argument("recording", nargs="+", help="RECORDING.sigmf-meta (one or more)")
    d.add_argument("--out", required=True, help="folder for <name>.rx.csv and "
                   "<name>.decode.json")
    d.add_argument("--strict", action="store_true",
                   help="exit 1 when a slot's result differs from the online annotation")
    d.add_argument("--quiet", action="store_true", help="no progress lines")
    d.set_defaults(fn=_later("oppsched.commands.decode", "_cmd_decode"))
