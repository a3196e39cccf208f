"""Fuzz of the readers `--resume` trusts (issue 40): damaged steps.jsonl and results.jsonl files never raise out of
the toolkit, every refusal is one line naming the file, its line and the field, and every record accepted holds
finite numbers of its schema's types, in range.

Each reader gets CASES files, seeded (tests/file_fuzz.py), made from real lines (tests/fixtures): a field replaced by
a value of another type, NaN, an infinity, a huge or negative number or deep nesting (two fields at times), the line
replaced whole, or the file's text cut short, nested 200,000 deep or made not UTF-8.
"""

from __future__ import annotations

import json
import math
import random
import warnings
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from tests.file_fuzz import damaged_text, damaged_value, each_case, one_line_refusal, paths, text_of
from toolkit.base.errors import RateSweepError, ResultsError
from toolkit.base.schema import PHASES, STATUSES, Measurement
from toolkit.rates.files import STEPS_FILE, rates_dir, read_steps
from toolkit.results.limits import MAX_FIGURE
from toolkit.results.step_row import StepRow, SweepStep
from toolkit.results.store import RESULTS_FILE, ResultStore

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CASES = 1000  # per reader, in CHUNKS tests
CHUNKS = 2
STEP = json.loads((FIXTURES / "peers" / "toolkit-4rps" / "rates" / STEPS_FILE).read_text().splitlines()[0])
STEPS = [STEP, {**STEP, "step": 1, "offered_rate": "inf", "searched": True}]
RESULTS = [
    json.loads(line) for line in (FIXTURES / "folders" / "unversioned-run" / RESULTS_FILE).read_text().splitlines()[:3]
]


def write_lines(rng: random.Random, path: Path, rows: list[Any]) -> None:
    """`rows` as JSONL, one of them damaged, or the whole text damaged."""
    rows = list(rows)
    if rng.random() < 0.85:
        at = rng.randrange(len(rows))
        rows[at] = damaged_value(rng, rows[at], paths(rows[at]))
        path.write_text("".join(text_of(row, rng) + "\n" for row in rows))
    else:
        path.write_bytes(damaged_text(rng, "".join(json.dumps(row) + "\n" for row in rows)))


def read_or_refuse(path: Path, seed: int, read: Callable[[], list[Any]]) -> list[Any] | None:
    """What `read` accepted, or None after checking its refusal is one line naming the file and line; a warning
    (a cut last line, dropped) is one line naming them too."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        try:
            return read()
        except Exception as exc:  # any other kind is a bug: one_line_refusal says which
            one_line_refusal(exc, seed, f"{path}:")
            return None
        finally:
            for warning in said:
                assert str(warning.message).startswith(f"{path}:") and "\n" not in str(warning.message), seed


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def step_case(model: type[StepRow], tmp_path: Path) -> Callable[[int, random.Random], bool]:
    def case(seed: int, rng: random.Random) -> bool:
        out = tmp_path / str(seed)
        rates_dir(out).mkdir(parents=True)
        write_lines(rng, rates_dir(out) / STEPS_FILE, STEPS)
        rows = read_or_refuse(rates_dir(out) / STEPS_FILE, seed, lambda: read_steps(out, model))
        for row in rows or []:
            assert isinstance(row["step"], int) and row["step"] >= 0, (seed, row)
            for key, value in row.items():
                if is_number(value):
                    assert math.isfinite(value) or (key == "offered_rate" and value == math.inf), (seed, key, value)
                    assert value >= 0 or key.startswith("lag_"), (seed, key, value)
                    assert abs(value) <= MAX_FIGURE or value == math.inf, (seed, key, value)
        return rows is not None

    return case


@pytest.mark.parametrize("part", range(CHUNKS))
@pytest.mark.parametrize("model", [StepRow, SweepStep], ids=["read", "resume"])
def test_steps_files_damaged_every_way_are_read_or_refused_in_one_line(
    model: type[StepRow], part: int, tmp_path: Path
) -> None:
    size = CASES // CHUNKS
    each_case(range(part * size, (part + 1) * size), step_case(model, tmp_path))


def measurement_case(tmp_path: Path) -> Callable[[int, random.Random], bool]:
    def case(seed: int, rng: random.Random) -> bool:
        folder = tmp_path / str(seed)
        folder.mkdir()
        write_lines(rng, folder / RESULTS_FILE, RESULTS)
        records = read_or_refuse(folder / RESULTS_FILE, seed, ResultStore(folder).load)
        for m in records or []:
            assert m.phase in PHASES and m.status in STATUSES, seed
            assert type(m.context_tokens) is int and type(m.concurrency) is int and m.concurrency >= 1, seed
            for field in fields(Measurement):
                value = getattr(m, field.name)
                if is_number(value):
                    assert math.isfinite(value) and 0 <= value <= MAX_FIGURE, (seed, field.name, value)
        return records is not None

    return case


@pytest.mark.parametrize("part", range(CHUNKS))
def test_results_files_damaged_every_way_are_read_or_refused_in_one_line(part: int, tmp_path: Path) -> None:
    size = CASES // CHUNKS
    each_case(range(part * size, (part + 1) * size), measurement_case(tmp_path))


@pytest.mark.parametrize(
    ("line", "said"),
    [({"step": 0}, "offered_rate: missing"),
     ({"step": 0, "offered_rate": 2.0}, "searched: missing"),
     ({**STEP, "step": "zero"}, "step: 'zero' should be a whole number"),
     ({**STEP, "offered_rate": -4}, 'offered_rate: -4 should be a rate above 0 and at most 1e+06 req/s, or "inf"'),
     ({**STEP, "ttft_p50_ms": -5000}, "ttft_p50_ms: -5000 should be greater than or equal to 0"),
     ({**STEP, "completed": 1e9}, "completed: 1000000000.0 should be less than or equal to 100000000"),
     ({k: v for k, v in STEP.items() if k != "request_throughput"} | {"offered_rate": "inf"},
      "request_throughput: missing; the search bounds an all-at-once step by it")],
    ids=["no rate", "no searched", "a text step", "rate -4", "TTFT -5000 ms", "1e9 completed", "inf, no throughput"],
)  # fmt: skip
def test_resuming_a_sweep_refuses_a_wrong_line_naming_file_line_and_field(
    line: dict[str, Any], said: str, tmp_path: Path
) -> None:
    steps = rates_dir(tmp_path) / STEPS_FILE
    steps.parent.mkdir(parents=True)
    steps.write_text(json.dumps(STEP) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(RateSweepError) as raised:
        read_steps(tmp_path, SweepStep)
    assert str(raised.value) == f"{steps}:2: {said}"


@pytest.mark.parametrize(
    ("change", "said"),
    [({"concurrency": [2]}, "concurrency: [2] should be a whole number"),
     ({"context_tokens": "64"}, "context_tokens: '64' should be a whole number"),
     ({"phase": 3}, "phase: 3 should be 'prefill', 'decode' or 'embeddings'"),
     ({"ttft_ms": -5.0}, "ttft_ms: -5.0 should be greater than or equal to 0"),
     ({"total_tok_s": math.inf}, "total_tok_s: Infinity should be a finite number"),
     ({"schema_version": "2"}, "schema_version: '2' should be a whole number")],
    ids=["a list", "a text", "a number for a phase", "negative TTFT", "infinite throughput", "a text version"],
)  # fmt: skip
def test_resuming_a_matrix_refuses_a_wrong_record_naming_file_line_and_field(
    change: dict[str, Any], said: str, tmp_path: Path
) -> None:
    (tmp_path / RESULTS_FILE).write_text(json.dumps(RESULTS[0]) + "\n" + json.dumps({**RESULTS[1], **change}) + "\n")
    with pytest.raises(ResultsError) as raised:
        ResultStore(tmp_path).load()
    assert str(raised.value) == f"{tmp_path / RESULTS_FILE}:2: {said}"


def test_a_record_missing_its_cell_is_refused_naming_the_field(tmp_path: Path) -> None:
    (tmp_path / RESULTS_FILE).write_text(json.dumps({"phase": "decode"}) + "\n")
    with pytest.raises(ResultsError, match=rf"^{tmp_path / RESULTS_FILE}:1: context_tokens: missing$"):
        ResultStore(tmp_path).load()
