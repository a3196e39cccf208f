"""A batch's terminal: one bar for the batch (variants done / total) and, below it, each running variant's bar.

While variants run, sys.stdout and sys.stderr are relays: papermill writes each notebook kernel's output to
them, from the thread that runs that variant. Whole lines go above the bars (and to the variant's log file);
a progress bar being redrawn (text after a carriage return) becomes that variant's line below the batch bar.
"""

from __future__ import annotations

import contextlib
import io
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from toolkit.base.api_keys import redact, redact_and_cut


class BatchProgress:
    """The batch bar at the top, one status line per job slot under it."""

    def __init__(self, total: int, done: int, jobs: int, *, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar = tqdm(
            total=total, initial=done, desc="batch", unit="variant", position=0, file=self.stream, dynamic_ncols=True
        )
        self.lines = [
            tqdm(total=0, position=slot + 1, bar_format="{desc}", leave=False, file=self.stream) for slot in range(jobs)
        ]
        self._local = threading.local()
        self._lock = threading.Lock()
        self._logs: dict[int, TextIO] = {}

    def begin(self, slot: int, label: str, log: Path | None = None) -> None:
        """The calling thread runs `label` in job `slot` from now on; its output lines are appended to `log`."""
        self._local.slot = slot
        self.status(slot, f"{label}: starting")
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            self._logs[slot] = open(log, "a", encoding="utf-8")  # noqa: SIM115 (closed by end())

    def end(self, slot: int, label: str, state: str) -> None:
        self.status(slot, "")
        if (log := self._logs.pop(slot, None)) is not None:
            log.close()
        self.write(f"{label}: {state}")
        with self._lock:
            self.bar.update(1)

    def status(self, slot: int, text: str) -> None:
        with self._lock:
            self.lines[slot].set_description_str(redact_and_cut(text, 200), refresh=True)

    def write(self, line: str) -> None:
        """A line above the bars (and in the calling variant's log), redacted."""
        line = redact(line)
        slot = getattr(self._local, "slot", None)
        if slot is not None and (log := self._logs.get(slot)) is not None:
            log.write(line + "\n")
            log.flush()
        with self._lock:
            tqdm.write(line, file=self.stream)

    def relay_text(self, text: str, buffer: list[str]) -> None:
        """Text a notebook kernel wrote: whole lines above the bars, a redrawn bar on its job's line."""
        pending = buffer.pop() if buffer else ""
        *lines, rest = (pending + text).split("\n")
        for line in lines:
            self.write(line.rsplit("\r", 1)[-1])
        if "\r" in rest:
            rest = "\r" + rest.rsplit("\r", 1)[-1]
            slot = getattr(self._local, "slot", None)
            if slot is not None:
                self.status(slot, rest.strip("\r"))
        buffer.append(rest)

    @contextlib.contextmanager
    def relaying(self) -> Iterator[None]:
        """sys.stdout and sys.stderr relayed while the variants run (restored on exit)."""
        out, err = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Relay(self), _Relay(self)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = out, err

    def close(self) -> None:
        for line in self.lines:
            line.close()
        self.bar.close()


class _Relay(io.TextIOBase):
    """A text stream whose writes go to BatchProgress, with a pending partial line per thread."""

    def __init__(self, progress: BatchProgress) -> None:
        super().__init__()
        self.progress = progress
        self._pending = threading.local()

    def write(self, text: str) -> int:
        buffer: list[str] = self._pending.__dict__.setdefault("buffer", [])
        self.progress.relay_text(text, buffer)
        return len(text)

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False
