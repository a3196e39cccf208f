"""gate.json: a gate's verdicts as a typed, versioned document (written stamped and scrubbed as every document of
the toolkit, toolkit.results.store.write_json_atomic; read back validated)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from toolkit import __version__
from toolkit.method.gate import Verdict
from toolkit.reports.gate_ratios import Judged
from toolkit.reports.gate_text import GateContext, driving_cells, failing_rates, gate_line, gate_status
from toolkit.results.store import read_json, write_json_atomic


class GateCell(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    context: str
    concurrency: int
    ratio: float


class GateRate(BaseModel):
    """One offered rate both sweeps ran, behind a failed rate quantity: each side's value there (`value`: goodput
    in req/s, or slo_fraction) and candidate / baseline (None: no ratio)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate: float
    value: Literal["goodput", "slo_fraction"]
    baseline: float | None
    candidate: float | None
    ratio: float | None


class GateQuantity(BaseModel):
    """One gated quantity: candidate / baseline with its interval, the limit and the verdict."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    title: str
    higher_is_better: bool
    limit: float  # the regression allowed, a fraction
    allowed_ratio: float
    verdict: Verdict
    ratio: float | None
    low: float | None
    high: float | None
    cells: int
    rounds: int  # 0: two runs measured apart
    between_runs: float | None  # the allowance the interval was widened by (apart)
    between_runs_file: str | None = None  # the allowance file it was stored in (None: given by hand)
    basis: str | None = None  # what a rate quantity's ratio is over (`over 3 common rates`); None: decode cells
    reason: str | None
    more_rounds: int | None
    line: str
    failing_cells: list[GateCell]
    failing_rates: list[GateRate] = []  # a failed rate quantity's values per common rate


class GateDocument(BaseModel):
    """gate.json."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["gate"] = "gate"
    toolkit_version: str = __version__
    design: Literal["interleaved", "apart"]
    baseline: str
    candidate: str
    rounds: int
    level: float  # of each interval
    inconclusive_counts_as: Verdict
    exit_status: int
    quantities: list[GateQuantity]
    schema_version: int | None = None  # stamped on save

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def load(cls, path: str | Path) -> GateDocument:
        return cls.model_validate(read_json(path))


def gate_document(judged: list[Judged], context: GateContext) -> GateDocument:
    quantities = [
        GateQuantity(
            name=j.quantity.name,
            title=j.quantity.title,
            higher_is_better=j.quantity.higher_is_better,
            limit=j.limit,
            allowed_ratio=j.bound,
            verdict=j.verdict,
            ratio=j.interval.ratio if j.interval else None,
            low=j.interval.low if j.interval else None,
            high=j.interval.high if j.interval else None,
            cells=j.cells,
            rounds=j.interval.rounds if j.interval else context.rounds,
            between_runs=j.allowance,
            between_runs_file=j.allowance_stored,
            basis=j.basis,
            reason=j.reason,
            more_rounds=j.more_rounds,
            line=gate_line(j, context),
            failing_cells=[
                GateCell(context=c.context, concurrency=c.concurrency, ratio=c.ratio)
                for c in (driving_cells(j) if j.verdict is Verdict.FAIL else [])
            ],
            failing_rates=[
                GateRate(
                    rate=r.rate,
                    value="goodput" if r.value == "goodput" else "slo_fraction",
                    baseline=r.baseline,
                    candidate=r.candidate,
                    ratio=r.ratio,
                )
                for r in failing_rates(j)
            ],
        )
        for j in judged
    ]
    return GateDocument(design="interleaved" if context.design == "interleaved" else "apart",
                        baseline=context.baseline, candidate=context.candidate, rounds=context.rounds,
                        level=context.level, inconclusive_counts_as=context.inconclusive,
                        exit_status=gate_status(judged, context), quantities=quantities)  # fmt: skip
