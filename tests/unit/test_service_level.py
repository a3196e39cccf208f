"""Service level: the most simultaneous requests per context whose Valid cell meets a TTFT and a speed limit."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from toolkit import cli
from toolkit.base.schema import COLUMNS, Measurement
from toolkit.reports import views
from toolkit.reports.service_level import highest_concurrency, limits_text, meets
from toolkit.results.runs import load_run

LFM = Path(__file__).resolve().parents[1] / "fixtures" / "reference-reports" / "lfm2.5-350m-h200nvl-vllm-0.26.txt"


def frame(measurements: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([m.to_dict() for m in measurements], columns=list(COLUMNS))


def levels(table: pd.DataFrame) -> list[int | None]:
    return [None if pd.isna(n) else int(n) for n in table["concurrency"]]


def reference_rows(context: str) -> list[dict[str, object]]:
    """The reference's own "All measurements" rows of one decode context: requests, status, per request, TTFT."""
    rows = []
    for line in LFM.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 12 and cells[0] == "Sustained decode" and cells[1] == context:
            number = lambda text: None if text == "—" else float(text.removesuffix(" ms").replace(",", ""))  # noqa: E731
            rows.append({"n": int(cells[2]), "status": cells[3], "total": cells[4], "per_request": number(cells[5]),
                         "ttft": number(cells[6])})  # fmt: skip
    return rows


@pytest.fixture(scope="module")
def lfm(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("lfm") / "run"
    assert cli.main(["import-report", str(LFM), "--out", str(out)]) == 0
    return load_run(out)[0]


def test_lfm_8k_at_200_ms_and_20_tok_s_matches_the_reference_rows(lfm: pd.DataFrame) -> None:
    rows = reference_rows("8K")
    assert len(rows) == 8
    meeting = [r for r in rows if r["status"] == "Valid" and r["ttft"] is not None and r["ttft"] <= 200
               and r["per_request"] is not None and r["per_request"] >= 20]  # fmt: skip
    expected = max(meeting, key=lambda r: r["n"])
    assert expected["n"] < max(r["n"] for r in rows)  # the limit binds: not simply the last column
    table = highest_concurrency(lfm, 200, 20)
    row = table[table["context"] == "8K"].iloc[0]
    assert row["concurrency"] == expected["n"]
    assert views.service_levels(table, 200, 20).data.set_index("Context").loc["8K", "Total tok/s"] == expected["total"]


def test_every_lfm_context_against_its_reference_rows(lfm: pd.DataFrame) -> None:
    table = highest_concurrency(lfm, 200, 20).set_index("context")
    for context in ["8K", "16K", "32K", "64K", "120K"]:
        meeting = [r["n"] for r in reference_rows(context) if r["status"] == "Valid" and r["ttft"] is not None
                   and r["ttft"] <= 200 and r["per_request"] is not None and r["per_request"] >= 20]  # fmt: skip
        got = table.loc[context, "concurrency"]
        assert (None if pd.isna(got) else int(got)) == (max(meeting) if meeting else None), context


CELLS = [
    Measurement("prefill", 8192, "8K", 1, "Valid", total_tok_s=17_000.0, ttft_ms=50.0),
    Measurement("decode", 8192, "8K", 1, "Valid", 40.0, 40.0, 100.0),
    Measurement("decode", 8192, "8K", 2, "Requests queued", 70.0, 35.0, 90.0),  # meets, but not Valid
    Measurement("decode", 8192, "8K", 4, "Valid", 120.0, 30.0, 300.0),
    Measurement("decode", 8192, "8K", 8, "Over capacity"),
    Measurement("decode", 32768, "32K", 1, "Valid", 20.0, 20.0, None),  # no TTFT: fails a TTFT limit
]


def test_a_missing_limit_is_not_applied() -> None:
    df = frame(CELLS)
    assert meets(df).tolist() == [False] * 6  # nothing to meet
    assert highest_concurrency(df) is None and views.service_levels(None) is None
    assert meets(df, ttft_ms=200).tolist() == [False, True, False, False, False, False]
    assert meets(df, per_request_tok_s=25).tolist() == [False, True, False, True, False, False]
    assert levels(highest_concurrency(df, per_request_tok_s=25)) == [4, None]
    both = highest_concurrency(df, 200, 25)
    assert both.loc[0, "concurrency"] == 1 and both.loc[0, "total_tok_s"] == 40.0
    assert pd.isna(both.loc[1, "concurrency"]) and both["context"].tolist() == ["8K", "32K"]


def test_runs_keep_their_order_and_the_display_says_none() -> None:
    df = frame(CELLS)
    runs = pd.concat([df.assign(run="B"), df.assign(run="A", ttft_ms=df["ttft_ms"] / 2)], ignore_index=True)
    table = highest_concurrency(runs, 200)
    assert table["run"].tolist() == ["B", "B", "A", "A"] and levels(table) == [1, None, 4, None]
    shown = views.service_levels(table, 200).data
    assert shown.columns[0] == "Run" and shown["Most requests at once"].tolist() == ["1", "—", "4", "—"]
    assert limits_text(200, 20) == "TTFT ≤ 200 ms and ≥ 20 tok/s per request" and limits_text(None, 2.5).startswith("≥")


def test_a_disturbed_cell_meets_no_limit() -> None:
    """8K × 4 meets ≥ 25 tok/s per request, but a pause hit all its windows: 8K × 1 is the highest usable cell."""
    df = frame([replace(m, disturbed="no token for 2.3 s") if m.key == ("decode", 8192, 4) else m for m in CELLS])
    assert meets(df, per_request_tok_s=25).tolist() == [False, True, False, False, False, False]
    assert levels(highest_concurrency(df, per_request_tok_s=25)) == [1, None]
