"""batch.json: a batch's variants in order and each one's state (pending, running, done, failed, interrupted), and
the comparison's outcome (an interleaved batch's: each configuration's paired comparison with the first); rewritten
atomically on every change by the batch's driver (toolkit.batch.state)."""

from __future__ import annotations

from pydantic import Field, JsonValue

from toolkit.results.documents.base import Block, Document, Number

BATCH_FILE = "batch.json"


class PairedComparison(Block):
    """An interleaved batch's comparison of one configuration with the first over the rounds both measured
    (toolkit.batch.runner.compare_rounds; the paired report: toolkit.batch.interleave.paired_report)."""

    label: str = Field(description="The configuration compared.")
    baseline: str = Field(description="The configuration it is compared with (the batch's first).")
    rounds: int = Field(description="The rounds both have results for.")
    report: str = Field(description="The paired report's path in the batch folder (compare/<label>-vs-<baseline>.md).")
    overall: dict[str, list[Number]] | None = Field(
        default=None, description="Per quantity: [label / baseline ratio, its 95 % half-width, decode cells]."
    )
    detectable: dict[str, Number] | None = Field(
        default=None,
        description="Per quantity: the smallest change the rounds detect at 80 % power, in %; None: a "
        "batch.json written before it was kept.",
    )


class CompareBlock(Block):
    """A batch's comparison: done (the labels compared; an interleaved batch's paired comparisons) or failed (why)."""

    state: str | None = Field(default=None, description='"done" or "failed".')
    labels: list[str] | None = Field(default=None, description="The variants (or configurations) compared.")
    error: str | None = Field(default=None, description="Why there is no comparison.")
    interleaved: list[PairedComparison] | None = Field(
        default=None, description="An interleaved batch's: each configuration against the first, paired by round."
    )


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
    compare: CompareBlock | None = Field(
        default=None, description="The comparison's outcome (state, labels or error); None: nothing to compare."
    )
