"""batch.json: a batch's variants in order and each one's state (pending, running, done, failed, interrupted), and
the comparison's outcome; rewritten atomically on every change by the batch's driver (toolkit.batch.state)."""

from __future__ import annotations

from pydantic import Field, JsonValue

from toolkit.results.documents.base import Document

BATCH_FILE = "batch.json"


class BatchDocument(Document):
    """A batch folder's batch.json."""

    sweep: str | None = Field(default=None, description="The sweep file the batch runs.")
    started_at: str | None = Field(default=None, description="When the batch first started (ISO 8601, UTC).")
    updated_at: str | None = Field(default=None, description="When the file was last written (ISO 8601, UTC).")
    driver_pid: int | None = Field(default=None, description="The driver's process id.")
    driver_host: str | None = Field(default=None, description="The driver's host name.")
    ray: str | None = Field(default=None, description="The Ray cluster's address; None: run locally.")
    labels: list[str] | None = Field(default=None, description="The variants' labels, in the sweep's order.")
    variants: dict[str, dict[str, JsonValue]] | None = Field(
        default=None, description="Each variant's state (and error, duration_s, started_at, slot, …) by label."
    )
    compare: dict[str, JsonValue] | None = Field(
        default=None, description="The comparison's outcome (state, labels or error); None: nothing to compare."
    )
