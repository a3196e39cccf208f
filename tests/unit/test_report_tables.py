"""Report tables and report text, cell for cell against the published reference reports."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from toolkit.base.schema import COLUMNS, PHASE_TITLES, Measurement
from toolkit.reports.extras import extras_table
from toolkit.reports.tables import (
    ALL_CAPTION,
    ALL_COLUMNS,
    DECODE_CAPTION,
    STATUS_NOTES,
    TTFT_NOTE,
    all_measurements_table,
    decode_matrix,
    engine_line,
    error_lines,
    footnotes,
    markdown_table,
    prefill_table,
    report_markdown,
    summary_line,
)

REFERENCES = Path(__file__).resolve().parents[1] / "fixtures" / "reference-reports"
KIMI = REFERENCES / "kimi-k2.7-code-h200sxm-x8-vllm-0.29.txt"
LFM = REFERENCES / "lfm2.5-350m-h200nvl-vllm-0.26.txt"
ROW = re.compile(r"^\| (Prefill|Sustained decode) \|.*\|$", re.MULTILINE)
MATRIX_ROW = re.compile(r"^\| \d+K \|.*\|$", re.MULTILINE)
KIMI_INFO = {
    "title": "Kimi-K2.7-Code on H200 SXM 141GB ×8",
    "hardware": {"Type": "Discrete GPU", "GPU": "H200 SXM", "GPU count": "8"},
    "engine": {"Engine": "vllm", "Version": "0.29.0", "Quantization": "INT4"},
    "run": {"Served model": "nvidia/Kimi-K2.7-Code-DFlash", "Time per measurement": "30 s"},
    "launch_command": "vllm serve moonshotai/Kimi-K2.7-Code --api-key <redacted>",
}


def frame(measurements: list[Measurement]) -> pd.DataFrame:
    return pd.DataFrame([m.to_dict() for m in measurements], columns=list(COLUMNS))


def _number(text: str) -> float | None:
    if text == "—":
        return None
    text = text.removesuffix(" ms").removesuffix(" s").replace(",", "")
    return float(text[:-1]) * 1000 if text.endswith("K") else float(text)


NUMERIC = (
    "total_tok_s",
    "per_request_tok_s",
    "ttft_ms",
    "tbt_ms",
    "avg_active",
    "completed",
    "output_tokens",
)


def _measurement(line: str) -> Measurement:
    """A Measurement from one row of a reference's all-measurements table."""
    phase, context, n, status, *rest = (cell.strip() for cell in line.strip("|").split("|"))
    *values, measured = (_number(c) for c in rest)
    numbers = dict(zip(NUMERIC, values, strict=True))
    for key in ("completed", "output_tokens"):
        numbers[key] = None if numbers[key] is None else int(numbers[key])
    phases = {title: key for key, title in PHASE_TITLES.items()}
    head = {"phase": phases[phase], "context_tokens": int(context[:-1]) * 1024, "context": context}
    return Measurement.from_dict({**head, "concurrency": int(n), "status": status, **numbers, "measured_s": measured})


def reference(path: Path) -> tuple[str, pd.DataFrame]:
    """The reference text and its measurements, shuffled so that ordering is the code's job."""
    text = path.read_text()
    rows = [_measurement(m.group(0)) for m in ROW.finditer(text)]
    random.Random(7).shuffle(rows)
    return text, frame(rows)


@pytest.fixture(params=[KIMI, LFM], ids=["kimi", "lfm"])
def ref(request: pytest.FixtureRequest) -> tuple[str, pd.DataFrame]:
    return reference(request.param)


def test_all_measurements_match_reference_rows(ref: tuple[str, pd.DataFrame]) -> None:
    text, df = ref
    table = all_measurements_table(df)
    assert tuple(table.columns) == ALL_COLUMNS
    rendered = markdown_table(table).splitlines()
    assert rendered[0] in text  # header, as the references print it
    assert rendered[1] == "|---|" + "---|" * 11
    assert rendered[2:] == [m.group(0) for m in ROW.finditer(text)]
    assert len(rendered) - 2 == len(df) >= 46


def test_decode_matrix_matches_reference_cells(ref: tuple[str, pd.DataFrame]) -> None:
    text, df = ref
    lines = markdown_table(decode_matrix(df), index=True).splitlines()
    assert lines[0] == "| Context | 1 | 2 | 4 | 8 | 16 | 32 | 64 | 128 |"
    # A browser's copy glues the lines of a cell; the markdown separates them with " · ".
    assert [line.replace(" · ", "") for line in lines[2:]] == [m.group(0) for m in MATRIX_ROW.finditer(text)]


def test_prefill_cards_match_reference(ref: tuple[str, pd.DataFrame]) -> None:
    text, df = ref
    for context, speed, ttft in prefill_table(df).itertuples(index=False):
        assert f"{context} context{speed}{ttft} TTFT" in text


def test_footnotes_match_reference_texts(ref: tuple[str, pd.DataFrame]) -> None:
    text, df = ref
    notes = footnotes(df[df["phase"] == "decode"])
    assert notes[-1] == TTFT_NOTE
    assert " ".join(notes[:-1]) in text
    assert TTFT_NOTE in text


def test_summary_lines_of_both_references() -> None:
    kimi = reference(KIMI)[1]
    lfm = reference(LFM)[1]
    assert summary_line(kimi) == (
        "6 contexts (8K–251K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, 64K, 128K, 251K, 256K"
    )
    assert summary_line(lfm) == (
        "5 contexts (8K–120K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, 64K, 120K, 125K"
    )


KIMI_CELLS = [
    Measurement("prefill", 8192, "8K", 1, "Valid", total_tok_s=17_731.6, ttft_ms=462.0, prompt_tokens=8190),
    Measurement("prefill", 257_024, "251K", 1, "Valid", total_tok_s=8_828.0, ttft_ms=28_591.0),
    Measurement("decode", 8192, "8K", 1, "Valid", 24.3, 25.5, 136.0, 39.2, 1.0, 0, 728, 29.9),
    Measurement("decode", 8192, "8K", 16, "Valid", 366.5, 23.9, 511.0, 41.9, 16.0, 0, 10_958, 29.9),
    Measurement("decode", 32768, "32K", 1, "Valid", 23.9, 24.7, 202.0, 40.5, 1.0, 0, 715, 29.9),
    Measurement("decode", 32768, "32K", 16, "Over capacity", kv_budget_tokens=340_000),
]


def test_kimi_cells_render_exactly() -> None:
    df = frame(KIMI_CELLS[::-1])
    lines = markdown_table(all_measurements_table(df)).splitlines()
    assert lines[2] == "| Prefill | 8K | 1 | Valid | 17.7K | — | 462 ms | — | — | 1 | — | — |"
    assert lines[3] == "| Prefill | 251K | 1 | Valid | 8,828.0 | — | 28,591 ms | — | — | 1 | — | — |"
    assert lines[4] == "| Sustained decode | 8K | 1 | Valid | 24.3 | 25.5 | 136 ms | 39.2 ms | 1.0 | 0 | 728 | 29.9 s |"
    assert lines[-1] == "| Sustained decode | 32K | 16 | Over capacity | — | — | — | — | — | — | — | — |"
    matrix = decode_matrix(df)
    assert list(matrix.index) == ["8K", "32K"]
    assert list(matrix.columns) == [1, 16]
    assert matrix.loc["8K", 1] == "24.3 · 136 ms TTFT"
    assert matrix.loc["8K", 16] == "366.5 · 511 ms TTFT"
    assert matrix.loc["32K", 16] == "Over capacity"
    assert prefill_table(df).values.tolist() == [["8K", "17.7K", "462 ms"], ["251K", "8,828", "28,591 ms"]]
    assert footnotes(df) == [STATUS_NOTES["Over capacity"], TTFT_NOTE]
    assert footnotes(df, ttft_note=False) == [STATUS_NOTES["Over capacity"]]


def test_queued_error_and_missing_cells() -> None:
    df = frame(
        [
            Measurement("decode", 122_880, "120K", 1, "Valid", 687.9, 745.9, 443.0, 1.3, 0.9, 5, 20_637, 30.0),
            Measurement("decode", 122_880, "120K", 2, "Requests queued", 1_113.1, 588.1, 417.0, 1.7, 1.9, 8),
            Measurement("decode", 131_072, "128K", 1, "Error", error="HTTP 500 | engine dead"),
            Measurement("prefill", 131_072, "128K", 1, "Error", error="timeout"),
        ]
    )
    matrix = decode_matrix(df)
    assert matrix.loc["120K", 2] == "1,113.1 · Requests queued · 417 ms TTFT"
    assert matrix.loc["128K", 1] == "Error"
    assert matrix.loc["128K", 2] == "—"  # not measured at all
    assert prefill_table(df).values.tolist() == [["128K", "Error", "—"]]
    assert footnotes(df) == [STATUS_NOTES["Requests queued"], STATUS_NOTES["Error"], TTFT_NOTE]
    assert STATUS_NOTES["Error"] == "Error: a request failed; see the error column of the results."
    prefill_row = all_measurements_table(df).iloc[0].tolist()
    assert prefill_row[:5] == ["Prefill", "128K", "1", "Error", "—"]
    assert prefill_row[9] == "—"  # no completed request to claim
    extras = extras_table(df)
    assert extras["Error"].tolist() == ["timeout", "HTTP 500 | engine dead"]
    assert "| HTTP 500 \\| engine dead |" in markdown_table(extras)
    assert error_lines(df) == ["decode 128K ×1: HTTP 500 | engine dead", "prefill 128K ×1: timeout"]
    assert error_lines(df, width=20) == ["decode 128K ×1: HTTP", "prefill 128K ×1: tim"]


def test_extras_only_columns_with_data() -> None:
    assert extras_table(frame(KIMI_CELLS[2:5])).empty
    extra = {"ttft_p90_ms": 420.4, "server_output_tokens": 2_731, "max_waiting": 0, "cached_tokens": 8_000}
    df = frame(
        [
            Measurement("decode", 8192, "8K", 4, "Valid", 91.1, 24.8, 382.0, 40.3, 4.0, 0, 2_728, 29.9, **extra),
            Measurement("decode", 8192, "8K", 8, "Valid", 186.5, 24.7, 393.0, 40.5, 8.0, 0, 5_588, 30.0),
        ]
    )
    extras = extras_table(df)
    assert list(extras.columns) == [
        "Phase", "Context", "Requests at once", "Server output tokens", "Server ÷ client tokens",
        "TTFT p90 [95 %]", "Cached tokens", "Max waiting",
    ]  # fmt: skip
    assert extras.values.tolist() == [["Sustained decode", "8K", "4", "2,731", "100.1%", "420 ms", "8,000", "0"]]


def two_decode_cells(first: dict[str, Any], second: dict[str, Any]) -> pd.DataFrame:
    """The extra columns of two decode cells of 8K (4 and 8 streams) with their own `first` and `second` fields."""
    return extras_table(frame([Measurement("decode", 8192, "8K", 4, "Valid", 91.1, 24.8, 382.0, 40.3, **first),
                               Measurement("decode", 8192, "8K", 8, "Valid", 186.5, 24.7, 393.0, 40.5,
                                           **second)]))  # fmt: skip


def test_the_gaps_percentiles_show_their_bounds() -> None:
    """TBT p99 over a window's gaps with its 95 % distribution-free interval; unbounded from too few gaps."""
    bounded = {"tbt_p99_ms": 41.26, "tbt_p99_low_ms": 40.1, "tbt_p99_high_ms": 43.04}
    short = {"tbt_p99_ms": 39.0, "tbt_p99_low_ms": 38.0, "tbt_p99_high_ms": None}
    extras = two_decode_cells(bounded, short)
    assert extras["Time between tokens p99 [95 %]"].tolist() == ["41.3 ms [40.1, 43.0]", "39.0 ms [38.0, unbounded]"]


def test_a_cells_ttft_percentiles_show_their_bounds() -> None:
    """A decode cell's TTFT p90 with its 95 % interval, as the gaps' are; unbounded above from fewer than 36."""
    bounded = {"ttft_p90_ms": 420.4, "ttft_p90_low_ms": 398.2, "ttft_p90_high_ms": 455.0}
    short = {"ttft_p90_ms": 380.0, "ttft_p90_low_ms": 350.5, "ttft_p90_high_ms": None}
    extras = two_decode_cells(bounded, short)
    assert extras["TTFT p90 [95 %]"].tolist() == ["420 ms [398, 455]", "380 ms [350, unbounded]"]


def test_engine_line_and_given_summary() -> None:
    assert engine_line(KIMI_INFO) == "vllm · 0.29.0 · INT4"
    assert engine_line({"engine": {"Engine": "vllm"}}) == "vllm"
    report = report_markdown(frame(KIMI_CELLS), {**KIMI_INFO, "summary": "a given summary"})
    assert "\n\na given summary\n\n" in report
    assert "contexts (" not in report


def test_report_markdown_sections_and_content() -> None:
    images = {"prefill": "img/prefill.png", "decode": "img/heatmaps.png", "scaling": "img/scaling.png"}
    report = report_markdown(frame(KIMI_CELLS), KIMI_INFO, images)
    headings = [line for line in report.splitlines() if line.startswith("#")]
    assert headings == [
        "# Speed test matrix", "## Hardware", "## Engine", "## Run", "## Launch command", "## Prefill",
        "## Sustained decode", "## All measurements", "## Extras",
    ]  # fmt: skip
    assert report.startswith(
        "# Speed test matrix\n\n**Kimi-K2.7-Code on H200 SXM 141GB ×8**\n\nvllm · 0.29.0 · INT4\n\n"
    )
    assert "2 contexts (8K–32K) × 2 concurrency levels (1–16) · prefill at 8K, 251K\n" in report
    assert "- **GPU**: H200 SXM\n- **GPU count**: 8\n" in report
    assert "```\nvllm serve moonshotai/Kimi-K2.7-Code --api-key <redacted>\n```" in report
    assert "| Context | Prompt tok/s | TTFT |\n|---|---|---|\n| 8K | 17.7K | 462 ms |" in report
    assert "\n\n![Prefill](img/prefill.png)\n\n## Sustained decode" in report
    assert f"## Sustained decode\n\n{DECODE_CAPTION}\n\n| Context | 1 | 16 |\n|---|---|---|\n" in report
    over, ttft = STATUS_NOTES["Over capacity"], TTFT_NOTE
    assert f"| 32K | 23.9 · 202 ms TTFT | Over capacity |\n\n{over}\n\n{ttft}\n\n![" in report
    assert "![Sustained decode heatmaps](img/heatmaps.png)\n\n![Total tok/s by simultaneous requests](img/" in report
    assert f"## All measurements\n\n{ALL_CAPTION}\n\n| Phase | Context |" in report
    assert f"| Over capacity | — | — | — | — | — | — | — | — |\n\n{over}\n\n## Extras" in report
    assert "| Prompt tokens | KV budget tokens |" in report  # only the extras recorded


def test_report_without_images_or_extras() -> None:
    report = report_markdown(frame(KIMI_CELLS[2:5]), {"title": "t"})
    assert "![" not in report
    assert "## Extras" not in report
    assert "## Hardware" not in report
    assert report.endswith("| 29.9 s |\n")  # no status notes when everything is valid


def test_concurrency_not_held_marks_valid_cells_only() -> None:
    import pandas as pd

    from toolkit.reports.tables import NOT_HELD_MARK, NOT_HELD_NOTE, decode_matrix, footnotes

    rows = [
        {"phase": "decode", "context_tokens": 1024, "context": "1K", "concurrency": 2, "status": "Valid",
         "total_tok_s": 900.0, "ttft_ms": 20.0, "concurrency_held": 0.85},
        {"phase": "decode", "context_tokens": 1024, "context": "1K", "concurrency": 4, "status": "Requests queued",
         "total_tok_s": 910.0, "ttft_ms": 900.0, "concurrency_held": 0.5},
        {"phase": "decode", "context_tokens": 1024, "context": "1K", "concurrency": 1, "status": "Valid",
         "total_tok_s": 480.0, "ttft_ms": 10.0, "concurrency_held": 0.99},
    ]  # fmt: skip
    frame = pd.DataFrame(rows)
    matrix = decode_matrix(frame)
    assert matrix.loc["1K", 2].endswith(NOT_HELD_MARK)
    assert NOT_HELD_MARK not in matrix.loc["1K", 4] and NOT_HELD_MARK not in matrix.loc["1K", 1]
    assert NOT_HELD_NOTE in footnotes(frame)
    assert NOT_HELD_NOTE not in footnotes(frame[frame.concurrency != 2])


def test_the_matrix_shows_the_spread_and_extras_show_speculation_and_energy() -> None:
    cell = Measurement("decode", 1024, "1K", 2, "Valid", total_tok_s=341.0, per_request_tok_s=170.0, ttft_ms=40.0,
                       total_tok_s_ci=4.2, per_request_tok_s_ci=2.0, sub_windows=10, spec_acceptance_rate=0.6,
                       spec_mean_accepted_len=2.8, gpu_energy_w=600.0, joules_per_token=1.76,
                       tokens_per_joule=0.568)  # fmt: skip
    df = frame([cell])
    assert decode_matrix(df).loc["1K", 2].startswith("341.0 ± 4.2 · ")
    assert any(note.startswith("±: the 95 % interval") for note in footnotes(df))
    extras = extras_table(df).iloc[0]
    assert extras["Draft acceptance"] == "60.0%" and extras["Mean accepted length"] == "2.80"
    assert extras["Energy per token"] == "1.760 J" and extras["Sub-windows"] == "10"
    bare = frame([Measurement("decode", 1024, "1K", 2, "Valid", total_tok_s=341.0, ttft_ms=40.0)])
    assert "±" not in decode_matrix(bare).loc["1K", 2]
    assert "Draft acceptance" not in extras_table(bare).columns


def test_concurrency_held_is_a_fraction_shown_as_a_percent() -> None:
    """`concurrency_held` is running / N (0-1): a held cell reads 100 %, not 1 %."""
    df = frame(
        [
            Measurement("decode", 8192, "8K", 4, "Valid", 91.1, 24.8, 382.0, 40.3, 4.0, concurrency_held=1.0),
            Measurement("decode", 8192, "8K", 8, "Valid", 91.1, 24.8, 382.0, 40.3, 4.0, concurrency_held=0.62),
        ]
    )
    held = extras_table(df)["Concurrency held"].tolist()
    assert [float(re.sub(r"[^0-9.]", "", text)) for text in held] == [100, 62], held


def test_a_cells_median_ttft_interval_is_shown_by_its_ends_or_as_recorded_before() -> None:
    """The median TTFT's 95 % interval by its own ends where the record keeps them; a record made before them, by
    the half-width it kept (the larger side)."""
    ends = {"ttft_ms_ci": 60.0, "ttft_ms_low": 361.0, "ttft_ms_high": 442.0}
    assert two_decode_cells(ends, {"ttft_ms_ci": 48.0})["TTFT median 95 %"].tolist() == ["[361, 442]", "± 48 ms"]
