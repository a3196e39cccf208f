"""rates/steps.jsonl: one line per finished step of a rate sweep, appended (fsync'd) as the step ends, by the sweep
runner (toolkit.rates.step.step_row) or `import-results` (toolkit.rates.imported.step_row).

A line carries no `schema_version` of its own: sweep.json's covers it (toolkit.results.store). JSON holds no NaN or
infinity: a missing figure is null, and a rate of infinity (all at once) is the string "inf", read back as infinity.
The limits every figure must keep are toolkit.results.step_row's (`StepRow`), which a reader may check first.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Self

from pydantic import ConfigDict, Field, ValidationError, field_validator

from toolkit.base.api_keys import scrub_tree
from toolkit.base.errors import RateSweepError
from toolkit.results.documents.base import Block, Number
from toolkit.results.step_row import StepRow, validated_step
from toolkit.results.store import append_line, read_jsonl_lines
from toolkit.results.validation import line_where

STEPS_FILE = "steps.jsonl"
RATE_FIELDS = ("offered_rate",)  # where "inf" is written for an infinite rate


class RateStep(Block):
    """One line of steps.jsonl: the fields its readers use are named; every other figure (percentiles, server
    samples, a class sweep's `classes`, an imported step's `_as_reported` figures, …) is kept as written. The named
    fields are strict: a value of another kind (text for a number, "yes" for true) is refused, never converted."""

    model_config = ConfigDict(extra="allow", strict=True)

    step: int = Field(description="The step's number, from 0 in the order run.")
    offered_rate: Number | None = Field(
        default=None, description='Req/s; infinity ("inf" in the file): all at once; None: a closed loop (imported).'
    )
    searched: bool | None = Field(default=None, description="Whether the search probed it (not a listed rate).")
    control_of: int | None = Field(default=None, description="A cold control's: the step it repeats.")
    workload: str | None = Field(default=None, description='"cold", "cold-control", or the sweep\'s workload.')
    requests: Number | None = Field(default=None, description="The requests sent.")
    completed: Number | None = Field(default=None, description="Those that completed.")
    failed: Number | None = Field(default=None, description="Those that failed.")
    request_throughput: Number | None = Field(default=None, description="Completed requests per second.")
    slo_fraction: Number | None = Field(default=None, description="The share of requests meeting the service level.")
    source: str | None = Field(default=None, description="An imported step's tool; None: measured by the toolkit.")

    def __iter__(self) -> Iterator[str]:  # type: ignore[override]  # a line's keys, as the dict it was (not pairs)
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    @field_validator("offered_rate", mode="before")
    @classmethod
    def _infinite(cls, value: object) -> object:
        return math.inf if value == "inf" else value

    @classmethod
    def of(cls, row: RateStep | Mapping[str, object], where: str | Path = STEPS_FILE) -> RateStep:
        """A producer's row (numpy scalars and NaN as computed) as a step; RateSweepError in one line naming `where`
        and the field when one does not fit."""
        if isinstance(row, RateStep):
            return row
        return cls.parsed({k: plain(v) for k, v in row.items()}, where)

    @classmethod
    def parsed(cls, data: object, where: str | Path) -> Self:
        """A line's JSON value as a step; RateSweepError in one line naming `where` (FILE:LINE) when it has no integer
        `step`, or a named field of another type."""
        if not isinstance(data, dict) or not isinstance(data.get("step"), int):
            raise RateSweepError(f"{where}: a step line needs an integer 'step'")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]  # a named field is one value: its name, not the union member that refused it
            raise RateSweepError(f"{where}: {first['loc'][0]}: {first['msg']}") from None

    def line(self) -> bytes:
        """The step as its steps.jsonl line: an infinite rate as "inf", other non-finite numbers as null, numpy
        scalars as Python numbers, every string scrubbed (no secret reaches disk)."""
        held = self.as_dict()
        clean = {k: "inf" if k in RATE_FIELDS and v == math.inf else json_safe(v) for k, v in held.items()}
        return (json.dumps(scrub_tree(clean), allow_nan=False) + "\n").encode("utf-8")

    def append(self, path: str | Path) -> None:
        """Append the step's line to the steps.jsonl at `path`, fsync'd (OSError when it cannot be written)."""
        append_line(Path(path), self.line())


# A step reads as the dict it was written from (its keys, `[]`, `get`): registered as a Mapping, so that tables
# built from steps take it as one (`pd.DataFrame([step])`: one row, a column per key; unregistered, pandas read its
# keys as the row's values).
Mapping.register(RateStep)


def plain(value: object) -> object:
    """Numpy scalars as Python numbers (NaN kept), within mappings too (a class sweep's `classes`)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if hasattr(value, "item") and not isinstance(value, list | dict | str):
        return value.item()
    return value


def json_safe(value: object) -> object:
    """`plain`, and NaN and infinity as null (JSON has neither); within mappings too."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    value = plain(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_steps(path: str | Path, check: type[StepRow] | None = None, rated: bool = False) -> list[RateStep]:
    """The steps of the steps.jsonl at `path` in file order (none when it is missing; a last line cut short is
    dropped with a warning), each first checked against `check`'s limits when given (SweepStep: every field a
    resumed sweep reads back), and holding an offered rate when `rated` (a closed loop is no rate sweep);
    RateSweepError naming the file, line and field of the first that does not fit."""
    path = Path(path)
    steps = []
    for number, row in read_jsonl_lines(path, RateSweepError):
        if check is not None:
            validated_step(row, line_where(path, number), check)
        step = RateStep.parsed(row, f"{path}:{number}")
        if rated and step.offered_rate is None:
            raise RateSweepError(f"{path}:{number}: step {step.step} has no 'offered_rate'")
        steps.append(step)
    return steps
