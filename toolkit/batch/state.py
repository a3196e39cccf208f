"""batch.json: a batch's variants in order and each one's state (pending, running, done, failed, interrupted)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolkit.results.documents.batch import BATCH_FILE as STATE_FILE
from toolkit.results.documents.batch import BatchDocument

DONE, FAILED, RUNNING, PENDING, INTERRUPTED = "done", "failed", "running", "pending", "interrupted"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class BatchState:
    """batch.json: the batch's variants in order and each one's state, rewritten atomically on every change."""

    def __init__(self, out: Path, labels: Sequence[str], sweep: str, ray: str | None) -> None:
        self.path = out / STATE_FILE
        self._lock = threading.Lock()
        earlier = BatchDocument.read(self.path) if self.path.exists() else BatchDocument()
        variants = earlier.variants or {}
        self.data: dict[str, Any] = {  # built here, validated as `document` on every write
            "sweep": sweep,
            "started_at": earlier.started_at or now(),
            "driver_pid": os.getpid(),
            "driver_host": socket.gethostname(),
            "ray": ray,
            "labels": list(labels),
            "variants": {label: variants.get(label, {"state": PENDING}) for label in labels},
        }
        self._write()

    def _write(self) -> None:
        self.data["updated_at"] = now()
        self.document = BatchDocument.written(self.data, self.path)
        self.document.write(self.path)

    def update(self, label: str, **fields: Any) -> None:
        with self._lock:
            self.data["variants"][label] = {**self.data["variants"][label], **fields}
            self._write()

    def set(self, **fields: Any) -> None:
        """Batch-wide fields (the comparison's outcome)."""
        with self._lock:
            self.data.update(fields)
            self._write()

    def variant(self, label: str) -> dict[str, Any]:
        return dict(self.data["variants"][label])
