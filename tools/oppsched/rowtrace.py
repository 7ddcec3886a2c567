"""A CSV trace written whole rows at a time, for the Python processes of a run (the PHY's
slot trace): what host/daemon/common/oppsched/daemon/csv_writer.h does for the daemons.

Rows are buffered and written with write(2) when the buffer passes `buffer_bytes` and on
flush(). A write that fails (a full disk) loses the buffered rows, counted in `errors` (the
failed writes) and `rows_lost`; the file is cut back to its last whole row, so what was
written before is kept and a later write continues a well-formed trace. The process puts
the counts in its stats (traces.<name>_errors, traces.<name>_rows_lost), which summary.json
turns into errors naming the trace (tools/oppsched/experiments/testbed/traces.py)."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path


class RowTrace:
    def __init__(self, path: str | Path, header: list[str], buffer_bytes: int = 1 << 16):
        self.path = Path(path)
        self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buffer_bytes = buffer_bytes
        self.rows = self.errors = self.rows_lost = 0
        self.size = 0  # bytes of whole rows in the file
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf, lineterminator="\n")
        self._csv.writerow(header)
        self._header = self._buf.getvalue()
        self.flush()

    def row(self, values) -> None:
        self._csv.writerow(values)
        self.rows += 1
        if self._buf.tell() >= self.buffer_bytes:
            self.flush()

    def flush(self) -> bool:
        if self.fd < 0:
            return False
        text = self._buf.getvalue()
        self._buf.seek(0)
        self._buf.truncate()
        if not text:
            return True
        data = text.encode()
        try:
            view = memoryview(data)
            while view:  # write(2) may write part of it
                n = os.write(self.fd, view)
                view = view[n:]
            self.size += len(data)
            return True
        except OSError:
            self.errors += 1
            lines = text.count("\n")
            if self.size == 0:  # the header, never written: written first next time
                lines -= 1
                self._buf.write(self._header)
            self.rows_lost += lines
            try:
                os.ftruncate(self.fd, self.size)
                os.lseek(self.fd, self.size, os.SEEK_SET)
            except OSError:
                pass
            return False

    def close(self) -> None:
        if self.fd >= 0:
            self.flush()
            os.close(self.fd)
            self.fd = -1

    def counts(self, name: str) -> dict:
        """The counters for a stats file's `traces` (traces.<name>_rows, _errors, _rows_lost)."""
        return {f"{name}_rows": self.rows, f"{name}_errors": self.errors,
                f"{name}_rows_lost": self.rows_lost}
