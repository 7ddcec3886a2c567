"""Real-time runs side by side on one machine, each in a forked process, stoppable as one
run is: `oppsched sweep --jobs N` (points) and `oppsched run --jobs N` (variants).

- At most `jobs` calls are handed to the pool at a time. (A ProcessPoolExecutor queues
  calls ahead of its workers, and a queued call can no longer be cancelled: an interrupted
  sweep would start them anyway.)
- Ctrl-C, SIGTERM and SIGHUP start no further call and interrupt those in progress
  (SIGINT to each worker: a testbed run tears down its namespaces as Ctrl-C makes it do);
  the pool waits for them to end, then KeyboardInterrupt is raised.
- A worker dies with the process that started it (PR_SET_PDEATHSIG: SIGTERM, which a run in
  progress turns into its teardown), so a SIGKILLed sweep leaves no run going on.
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from multiprocessing import get_context
from typing import Any, Callable, Hashable, Iterable

_PR_SET_PDEATHSIG = 1


def _worker_init(parent: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):  # not the parent's handlers, inherited by fork
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before PDEATHSIG was armed
        os.kill(os.getpid(), signal.SIGTERM)


def _interrupt_on_termination() -> dict:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread (without this the
    parent would die at once and leave its workers running). Returns the old handlers."""
    def on_signal(signum, _frame):
        raise KeyboardInterrupt(f"signal {signum}")

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}


def run_forked(calls: Iterable[tuple[Hashable, Callable, tuple]], jobs: int,
               on_done: Callable[[Hashable, Any, BaseException | None], None]) -> None:
    """Runs each (key, fn, args) as fn(*args) in a forked worker, `jobs` at a time, calling
    on_done(key, result, exception) in the parent as each ends (in the order they end)."""
    todo, pending = list(calls), {}
    old = _interrupt_on_termination()
    ex = ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=get_context("fork"),
                             initializer=_worker_init, initargs=(os.getpid(),))
    try:
        while todo or pending:
            while todo and len(pending) < jobs:
                key, fn, args = todo.pop(0)
                pending[ex.submit(fn, *args)] = key
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                key = pending.pop(fut)
                exc = fut.exception()
                on_done(key, None if exc is not None else fut.result(), exc)
    except KeyboardInterrupt:
        for proc in list((getattr(ex, "_processes", None) or {}).values()):
            try:
                os.kill(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
        raise
    finally:
        # Waits for the workers to finish tearing down: a second signal must not cut it short.
        if old:
            old[signal.SIGINT] = signal.getsignal(signal.SIGINT)
            for sig in old:
                signal.signal(sig, signal.SIG_IGN)
        try:
            ex.shutdown(wait=True, cancel_futures=True)
        finally:
            for sig, h in old.items():
                signal.signal(sig, h)
