"""Reading a testbed run folder's files for its summary: a file that is there but cannot
be read is an error of the summary (`errors`), never silently missing data."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd


def trace_error(errors: list | None, path: Path, exc: BaseException) -> None:
    """Records that a trace file is there but cannot be read: an error of the summary
    (`errors`), never silently missing data."""
    if errors is not None:
        errors.append(f"{Path(path).name}: {type(exc).__name__}: {exc}")


def read_json(path: Path, errors: list | None = None):
    """The parsed JSON file, or None if it is missing; a file that is not JSON (not UTF-8,
    or nested deeper than the parser's recursion limit) is None too, and an entry in
    `errors`."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        trace_error(errors, path, exc)
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        trace_error(errors, path, exc)
        return None


def read_csv(path: Path, errors: list | None = None) -> pd.DataFrame | None:
    """The CSV as a DataFrame, or None if the file is missing; one that cannot be parsed
    (truncated, no header) is None and an entry in `errors`."""
    p = Path(path)
    if not p.exists():
        return None
    try:
        return pd.read_csv(p)
    except (OSError, ValueError, pd.errors.EmptyDataError) as exc:
        trace_error(errors, p, exc)
        return None


def read_slots(rundir: Path, errors: list | None = None) -> pd.DataFrame | None:
    """The apd's slot trace (slots.csv, or slots.csv.gz), or None if there is none."""
    for name in ("slots.csv", "slots.csv.gz"):
        p = Path(rundir) / name
        if p.exists():
            return read_csv(p, errors)
    return None


def slot_column(df: pd.DataFrame, kind: str, user: dict) -> str | None:
    """Column `kind.<user>` of slots.csv: by name, else by numeric id."""
    for key in (f"{kind}.{user['name']}", f"{kind}.{user['id']}"):
        if key in df.columns:
            return key
    return None


def _truthy(s: pd.Series) -> pd.Series:
    if s.dtype == bool:
        return s
    return s.astype(str).str.lower().isin(("1", "true", "yes", "late"))
