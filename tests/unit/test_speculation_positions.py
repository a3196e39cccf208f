"""Speculative decoding by draft position: the requests' acceptance histograms summed per decode cell, the rate of
each draft position (toolkit.method.speculation), the text results.jsonl keeps, and the Extras column."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from toolkit.base.errors import ResultsError
from toolkit.base.schema import Measurement
from toolkit.loadgen.server_timing import ServerTiming
from toolkit.loadgen.stream_events import StreamResult
from toolkit.matrix.cell_timing import cell_breakdown, cell_speculation, ended_inside
from toolkit.method.speculation import position_rates, positions_text, read_positions, summed_histogram
from toolkit.reports.extras import extras_table
from toolkit.results.measurement_row import validated_measurement
from toolkit.results.runs import _csv_measurements
from toolkit.results.store import to_dataframe

# ---- the rates ----------------------------------------------------------------------------------------------------


def test_position_k_is_the_share_of_steps_that_accepted_k_or_more() -> None:
    """[6, 2, 2] + [1, 3, 0] = [7, 5, 2] over 14 steps: position 1 accepted in 5 + 2 steps, position 2 in 2."""
    total = summed_histogram([(6, 2, 2), (1, 3, 0)])
    assert total == (7, 5, 2)
    rates = position_rates(total)
    assert rates == pytest.approx((7 / 14, 2 / 14))
    assert positions_text(rates) == "0.500,0.143"  # type: ignore[arg-type]
    # their mean is accepted / (K x steps): (5 + 2 x 2) / (2 x 14)
    assert sum(rates) / 2 == pytest.approx(9 / 28)  # type: ignore[arg-type]


def test_a_shorter_histogram_counts_nothing_past_its_end() -> None:
    """A request of one draft token ([2, 1]) beside ones of two: its steps accepted no second token."""
    assert summed_histogram([(7, 5, 2), (2, 1)]) == (9, 6, 2)
    assert position_rates((9, 6, 2)) == pytest.approx((8 / 17, 2 / 17))


def test_no_histogram_and_no_step_give_no_rates() -> None:
    assert summed_histogram([]) is None
    assert position_rates((0, 0, 0)) is None
    assert position_rates((0, 4)) == (1.0,) and position_rates((3, 0, 0)) == (0.0, 0.0)


@pytest.mark.parametrize(("value", "rates"), [
    ("0.620,0.310", (0.62, 0.31)), ("1.000", (1.0,)), (0.62, (0.62,)), ("", None), (None, None), ("62%", None),
    (True, None),
])  # fmt: skip
def test_the_text_reads_back(value: object, rates: tuple[float, ...] | None) -> None:
    assert read_positions(value) == rates


# ---- a cell's requests --------------------------------------------------------------------------------------------


def stream(last: float, histogram: tuple[int, ...] | None, *, timing: bool = True, error: str | None = None,
           done: bool = True) -> StreamResult:  # fmt: skip
    """Sent 0.5 s before `last`, first token 0.1 s later, its last token at `last`."""
    server = ServerTiming(queue_ms=1.0, ttft_ms=20.0, generation_ms=380.0, itl_ms=10.0) if timing else ServerTiming()
    server = replace(server, acceptance_histogram=histogram)
    return StreamResult(started=last - 0.5, first_token_at=last - 0.4, token_events=[(last - 0.4, 1), (last, 40)],
                        completion_tokens=40, done=done, error=error, server_timing=server)  # fmt: skip


def test_the_cell_sums_the_histograms_of_the_requests_that_ended_inside() -> None:
    results = [
        stream(10.5, (6, 2, 2)),
        stream(10.9, (1, 3, 0), timing=False),  # only the histogram: still counted
        stream(10.7, None),  # no speculation said: not counted
        stream(11.5, (0, 0, 50)),  # ended after the window
        stream(9.5, (0, 0, 50)),  # before it
        stream(10.6, (0, 0, 50), error="server error in stream: boom"),
        stream(10.6, (0, 0, 50), done=False),
    ]
    assert ended_inside(results, 10.0, 11.0) == results[:3]
    assert cell_speculation(results, 10.0, 11.0) == {"spec_acceptance_by_position": "0.500,0.143",
                                                     "spec_request_steps": 14}  # fmt: skip
    # the breakdown takes the same requests: the one without timing among them, its figures NaN
    assert cell_breakdown(results, 10.0, 11.0, None, None)["breakdown_basis"] == "per-request"


def test_a_cell_without_histograms_leaves_both_columns_empty() -> None:
    empty = {"spec_acceptance_by_position": None, "spec_request_steps": None}
    assert cell_speculation([], 10.0, 11.0) == empty
    assert cell_speculation([stream(10.5, None), stream(12.0, (1, 1))], 10.0, 11.0) == empty
    no_step = cell_speculation([stream(10.5, (0, 0, 0))], 10.0, 11.0)
    assert no_step == {"spec_acceptance_by_position": None, "spec_request_steps": 0}


# ---- results.jsonl, results.csv and the Extras column -------------------------------------------------------------

CELL = {"phase": "decode", "context_tokens": 1024, "context": "1K", "concurrency": 2, "status": "Valid"}


def where(loc: Any) -> str:
    return "results.jsonl:1"


@pytest.mark.parametrize("text", ["0.620,0.310", "1.000,0.000", "0.5", "1", ",".join(["0.1"] * 64)])
def test_the_validator_takes_comma_separated_fractions(text: str) -> None:
    line = {**CELL, "spec_acceptance_by_position": text, "spec_request_steps": 14}
    measurement = validated_measurement(line, where)
    assert (measurement.spec_acceptance_by_position, measurement.spec_request_steps) == (text, 14)


@pytest.mark.parametrize("value", ["62%,31%", "1.5", "0.6,", "", "-0.1", " 0.5", "0.5;0.2", "1.01", 0.62,
                                   ",".join(["0.1"] * 65)])  # fmt: skip
def test_the_validator_refuses_anything_else(value: object) -> None:
    with pytest.raises(ResultsError, match=r"^results\.jsonl:1: spec_acceptance_by_position: "):
        validated_measurement({**CELL, "spec_acceptance_by_position": value}, where)
    with pytest.raises(ResultsError, match=r"spec_request_steps"):
        validated_measurement({**CELL, "spec_request_steps": -1}, where)


def test_extras_show_the_positions_after_the_draft_acceptance() -> None:
    cell = Measurement("decode", 1024, "1K", 2, "Valid", total_tok_s=341.0, spec_acceptance_rate=0.45,
                       spec_acceptance_by_position="0.620,0.310", spec_request_steps=14)  # fmt: skip
    extras = extras_table(to_dataframe([cell]))
    columns = list(extras.columns)
    assert columns[columns.index("Draft acceptance") + 1] == "Draft acceptance by position"
    assert extras.iloc[0]["Draft acceptance by position"] == "62 % · 31 %"
    bare = to_dataframe([Measurement("decode", 1024, "1K", 2, "Valid", total_tok_s=341.0)])
    assert "Draft acceptance by position" not in extras_table(bare).columns


def test_one_position_survives_results_csv_as_text(tmp_path: Path) -> None:
    """A CSV reader would take "0.620" for a number: the column is read as text."""
    cells = [Measurement("decode", 1024, "1K", n, "Valid", spec_acceptance_by_position=text, spec_request_steps=9)
             for n, text in ((1, "0.620"), (2, None))]  # fmt: skip
    to_dataframe(cells).to_csv(tmp_path / "results.csv", index=False)
    read = _csv_measurements(tmp_path / "results.csv")
    assert [m.spec_acceptance_by_position for m in read] == ["0.620", None]
    assert extras_table(pd.DataFrame([m.to_dict() for m in read])).iloc[0]["Draft acceptance by position"] == "62 %"
