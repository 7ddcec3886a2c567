"""A testbed worker's own `--metrics` endpoint: Dask's preload hook for the sweep cluster.

Started as

    OPPSCHED_METRICS=127.0.0.1:9465 .venv/bin/python -m distributed.cli.dask_worker ... \\
        --preload oppsched.run.cluster_worker

a worker serves the figures of the point it is running (the live page at `/`, Prometheus
at `/metrics`), as `oppsched run --metrics` does on one machine: the points of a sweep on
a cluster run on the workers, so the live figures are there, not at the client (whose
`--metrics` serves the sweep's progress). The address is checked and bound when the worker
starts (loopback only, the port free: live.parse_address), so a bad one stops the worker
with an error naming OPPSCHED_METRICS and the value, before any point is taken.
"""

from __future__ import annotations

import os
import sys

ENV = "OPPSCHED_METRICS"

_server = None  # the worker process's MetricsServer, once dask_setup made it


def dask_setup(worker=None) -> None:
    """Dask calls this when the worker starts (`--preload oppsched.run.cluster_worker`)."""
    global _server
    value = os.environ.get(ENV)
    if not value or _server is not None:
        return
    from oppsched.config import ConfigError
    from oppsched.run.live import MetricsServer

    try:
        _server = MetricsServer(value)
    except ConfigError as exc:
        # live.parse_address names `--metrics`; here the value came from the environment
        raise SystemExit(f"{ENV}: {str(exc).replace('--metrics: ', '', 1)}") from None
    print(f"oppsched worker: metrics of the points run here at http://{_server.address}/metrics",
          file=sys.stderr, flush=True)


def server():
    """The worker's MetricsServer, or None (no OPPSCHED_METRICS, or not a preloaded worker)."""
    return _server
