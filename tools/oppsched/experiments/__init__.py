"""Kinds of experiment. Each kind is a module with SCHEMA (its keys beside the common ones),
run(config, outdir, progress) and analyze(outdir) -> summary dict; optionally check(config)
(cross-field checks, ConfigError), plot(outdir, summary) and compare_plots(outdir, runs)."""

from __future__ import annotations

from importlib import import_module

KINDS = {
    "macsim": "oppsched.experiments.macsim",
    "testbed": "oppsched.experiments.testbed",
}


def kind_module(kind: str):
    try:
        return import_module(KINDS[kind])
    except KeyError:
        raise KeyError(kind) from None
