"""Importer for published speed test matrix reports, on the two reference reports."""

import hashlib
import json
import re
import time
from pathlib import Path

import pytest

from toolkit.base.schema import Measurement
from toolkit.results.imported_reports import (
    MAX_REPORT_BYTES,
    ImportedReport,
    ReportFormatError,
    import_report_file,
    parse_report,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "reference-reports"
KIMI = FIXTURES / "kimi-k2.7-code-h200sxm-x8-vllm-0.29.txt"
LFM = FIXTURES / "lfm2.5-350m-h200nvl-vllm-0.26.txt"


# SHA-256 of the published original reports, taken from them when these copies were made (no original is read).
ORIGINAL_SHA256 = {
    KIMI.name: "17302928f9d7f144001003875dcb9aec517195a2da8c7449b59f76c072e7df5f",
    LFM.name: "95b2aec968a95be83d5a61bce4b6da79bbdb38dae35a640a8fb2c8d8b5fb13c2",
}


@pytest.fixture(scope="module")
def kimi() -> ImportedReport:
    return import_report_file(KIMI)


@pytest.fixture(scope="module")
def lfm() -> ImportedReport:
    return import_report_file(LFM)


def find(report: ImportedReport, phase: str, context: str, concurrency: int) -> Measurement:
    (m,) = [m for m in report.measurements if (m.phase, m.context, m.concurrency) == (phase, context, concurrency)]
    return m


def line_of(text: str, prefix: str) -> int:
    """1-based number of the first line starting with ``prefix``."""
    return next(i for i, line in enumerate(text.split("\n"), 1) if line.startswith(prefix))


@pytest.mark.parametrize("name", [KIMI.name, LFM.name])
def test_fixture_copies_are_the_published_originals_byte_for_byte(name: str) -> None:
    assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == ORIGINAL_SHA256[name]


@pytest.mark.parametrize(
    ("which", "phase", "context", "concurrency", "status", "tok_s", "ttft_ms"),
    [
        ("lfm", "decode", "8K", 128, "Valid", 24_300.0, 521.0),
        ("lfm", "decode", "120K", 2, "Requests queued", 1_113.1, 417.0),
        ("lfm", "decode", "120K", 128, "Over capacity", None, None),
        ("lfm", "prefill", "120K", 1, "Valid", 116_600.0, 1_036.0),
        ("lfm", "decode", "32K", 128, "Valid", 9_668.8, 2_370.0),
        ("kimi", "decode", "251K", 1, "Valid", 10.1, 821.0),
        ("kimi", "decode", "32K", 16, "Over capacity", None, None),
        ("kimi", "prefill", "251K", 1, "Valid", 8_828.0, 28_591.0),
        ("kimi", "prefill", "256K", 1, "Valid", 8_783.0, 29_311.0),
        ("kimi", "prefill", "8K", 1, "Valid", 17_700.0, 462.0),
    ],
)
def test_cells(
    request: pytest.FixtureRequest,
    which: str,
    phase: str,
    context: str,
    concurrency: int,
    status: str,
    tok_s: float | None,
    ttft_ms: float | None,
) -> None:
    m = find(request.getfixturevalue(which), phase, context, concurrency)
    assert (m.status, m.total_tok_s, m.ttft_ms) == (status, tok_s, ttft_ms)


def test_requests_queued_row_keeps_all_numbers(lfm: ImportedReport) -> None:
    m = find(lfm, "decode", "120K", 2)
    assert m == Measurement(
        phase="decode",
        context_tokens=122_880,
        context="120K",
        concurrency=2,
        status="Requests queued",
        total_tok_s=1_113.1,
        per_request_tok_s=588.1,
        ttft_ms=417.0,
        tbt_ms=1.7,
        avg_active=1.9,
        completed=8,
        output_tokens=33_392,
        measured_s=30.0,
    )


def test_over_capacity_row_has_no_numbers(kimi: ImportedReport) -> None:
    m = find(kimi, "decode", "32K", 16)
    assert m == Measurement(
        phase="decode", context_tokens=32_768, context="32K", concurrency=16, status="Over capacity"
    )


def test_prefill_row(kimi: ImportedReport) -> None:
    m = find(kimi, "prefill", "251K", 1)
    assert (m.context_tokens, m.total_tok_s, m.ttft_ms, m.completed) == (257_024, 8_828.0, 28_591.0, 1)
    assert (m.per_request_tok_s, m.tbt_ms, m.avg_active, m.output_tokens, m.measured_s) == (None,) * 5


@pytest.mark.parametrize(
    ("which", "prefill", "decode", "contexts"),
    [
        ("kimi", 7, 48, [8_192, 16_384, 32_768, 65_536, 131_072, 257_024, 262_080]),
        ("lfm", 6, 40, [8_192, 16_384, 32_768, 65_536, 122_880, 127_936]),
    ],
)
def test_row_counts_and_prefill_contexts(
    request: pytest.FixtureRequest, which: str, prefill: int, decode: int, contexts: list[int]
) -> None:
    report: ImportedReport = request.getfixturevalue(which)
    prefill_rows = [m for m in report.measurements if m.phase == "prefill"]
    assert len(prefill_rows) == prefill
    assert len([m for m in report.measurements if m.phase == "decode"]) == decode
    assert [m.context_tokens for m in prefill_rows] == contexts


def test_status_counts(kimi: ImportedReport, lfm: ImportedReport) -> None:
    def count(report: ImportedReport, status: str) -> int:
        return sum(m.status == status for m in report.measurements if m.phase == "decode")

    assert (count(kimi, "Valid"), count(kimi, "Over capacity")) == (20, 28)
    assert (count(lfm, "Valid"), count(lfm, "Requests queued"), count(lfm, "Over capacity")) == (38, 1, 1)


def test_decode_row_numbers(kimi: ImportedReport) -> None:
    m = find(kimi, "decode", "8K", 16)
    assert (m.per_request_tok_s, m.tbt_ms, m.avg_active, m.completed, m.output_tokens, m.measured_s) == (
        23.9,
        41.9,
        16.0,
        0,
        10_958,
        29.9,
    )


def test_run_info_kimi(kimi: ImportedReport) -> None:
    info = kimi.run_info
    assert info["title"] == "Kimi-K2.7-Code on H200 SXM 141GB ×8"
    assert info["summary"] == (
        "6 contexts (8K–251K) × 8 concurrency levels (1–128) · prefill at 8K, 16K, 32K, 64K, 128K, 251K, 256K"
    )
    assert info["source"] == "imported"
    assert info["max_model_len"] == 262_144
    assert info["hardware"] == {
        "Type": "Discrete GPU",
        "GPU": "H200 SXM",
        "GPU count": "8",
        "VRAM": "1128 GB (8 × 141 GB)",
        "OS": "linux",
    }
    assert list(info["engine"]) == ["Engine", "Version", "Quantization", "Backend", "Repository", "Build"]
    assert info["engine"]["Quantization"] == "INT4"
    assert info["run"]["Max output"] == "4,096 tokens"
    assert info["run"]["Benchmark tool"] == "llm-inference-bench v0.6.2"
    command = info["launch_command"]
    assert "--api-key <redacted>" in command
    assert command.startswith("env FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 ")
    assert command.endswith('"num_speculative_tokens":8}\'')  # "Prefill" glued after it is not part of it


def test_run_info_lfm(lfm: ImportedReport) -> None:
    info = lfm.run_info
    assert info["title"] == "LFM2.5-350M on H200 NVL 141GB"
    assert info["engine"]["Commit"] == "52be12cfac0c"
    assert info["engine"]["Version"] == "0.26.1rc1.dev638+g52be12cfa"
    assert "GPU count" not in info["hardware"]
    assert info["run"]["Served model"] == "lfm"
    assert info["launch_command"].endswith("--port 8000 --api-key <redacted>")
    assert info["max_model_len"] == 128_000


def test_parse_report_equals_file_import(kimi: ImportedReport) -> None:
    assert parse_report(KIMI.read_text(encoding="utf-8")) == kimi


def test_trailing_newline_and_crlf_are_accepted(lfm: ImportedReport) -> None:
    text = LFM.read_text(encoding="utf-8")
    assert parse_report(text.replace("\n", "\r\n") + "\r\n") == lfm


# --- malformed input -------------------------------------------------------------------------------------


def kimi_text() -> str:
    return KIMI.read_text(encoding="utf-8")


def lfm_text() -> str:
    return LFM.read_text(encoding="utf-8")


def replace_line(text: str, prefix: str, new: str | None) -> tuple[str, int]:
    """Replace (or with None remove) the first line starting with ``prefix``; return text and its number."""
    lines = text.split("\n")
    number = line_of(text, prefix)
    lines[number - 1 : number] = [] if new is None else [new]
    return "\n".join(lines), number


def error_of(text: str) -> str:
    with pytest.raises(ReportFormatError) as excinfo:
        parse_report(text)
    return str(excinfo.value)


def test_truncated_table_row() -> None:
    text, number = replace_line(
        kimi_text(), "| Sustained decode | 8K | 2 |", "| Sustained decode | 8K | 2 | Valid | 47.9"
    )
    assert error_of(text).startswith(f"<text>:{number}: expected a table row of 12 cells")


def test_unknown_status_word() -> None:
    row = "| Sustained decode | 8K | 4 | Fine | 91.1 | 24.8 | 382 ms | 40.3 ms | 4.0 | 0 | 2,728 | 29.9 s |"
    text, number = replace_line(kimi_text(), "| Sustained decode | 8K | 4 |", row)
    message = error_of(text)
    assert message.startswith(f"<text>:{number}: unknown status 'Fine'")
    assert "Valid, Requests queued, Over capacity, Error" in message


def test_missing_all_measurements() -> None:
    text, number = replace_line(lfm_text(), "All measurements", None)
    assert error_of(text).startswith(f"<text>:{number}: expected 'All measurements'")


def test_file_errors_name_the_path(tmp_path: Path) -> None:
    text, number = replace_line(lfm_text(), "All measurements", None)
    path = tmp_path / "report.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ReportFormatError, match=rf"^{path}:{number}: expected 'All measurements'"):
        import_report_file(path)


@pytest.mark.parametrize(
    ("prefix", "old", "new", "message"),
    [
        # The matrix shows 24.4 where All measurements has 24.3.
        (
            "| 8K | 24.3136",
            "| 8K | 24.3136",
            "| 8K | 24.4136",
            "decode matrix 8K × 1 shows '24.4136 ms TTFT'",
        ),
        ("| 8K | 24.3136", "136 ms TTFT | 47.9", "137 ms TTFT | 47.9", "decode matrix 8K × 1 shows"),
        (
            "| 8K | 24.3136",
            "| Over capacity | Over capacity | Over capacity |",
            "| Over capacity | Over capacity | 1.0 |",
            "decode matrix 8K × 128 shows '1.0'",
        ),
        ("16K context", "18.7K867", "18.7K868", "Prefill 16K shows '18.7K868 ms TTFT'"),
        (
            "| Sustained decode | 8K | 1 |",
            "| 24.3 |",
            "| 24,3 |",
            "Total tok/s: '24,3' is not a displayed number",
        ),
        ("| Sustained decode | 8K | 1 |", "| 136 ms |", "| 136 s |", "TTFT: '136 s' is not a number in ms"),
        (
            "| Sustained decode | 8K | 1 |",
            "| Sustained decode | 8K |",
            "| Decode | 8K |",
            "unknown phase 'Decode'",
        ),
        ("| Sustained decode | 8K | 1 |", "| 8K | 1 |", "| 8.5K | 1 |", "'8.5K' is not a context"),
        (
            "| Sustained decode | 8K | 1 |",
            "| 8K | 1 |",
            "| 8K | 0 |",
            "Requests at once: '0' is not a positive",
        ),
        (
            "| Sustained decode | 8K | 32 |",
            "| — | — | — | — |",
            "| 1.0 | — | — | — |",
            "an Over capacity row must show — for every number",
        ),
        ("| Sustained decode | 8K | 2 |", "| 8K | 2 |", "| 8K | 1 |", "duplicate of the row on line"),
        ("- GPU count", "- GPU count", "GPU count", "expected 'Engine', found 'GPU count'"),
        ("Hardware", "Hardware", "Hardware:", "expected 'Hardware', found 'Hardware:'"),
        ("Speed test matrix", "Speed test matrix", "Speed matrix", "expected 'Speed test matrix'"),
        (
            "|---|---|---|---|---|---|---|---|---|---|",
            "|---|",
            "|-x-|",
            "expected the All measurements table separator",
        ),
    ],
)
def test_malformed_lines(prefix: str, old: str, new: str, message: str) -> None:
    text = kimi_text()
    number = line_of(text, prefix)
    lines = text.split("\n")
    assert old in lines[number - 1]
    lines[number - 1] = lines[number - 1].replace(old, new, 1)
    assert error_of("\n".join(lines)).startswith(f"<text>:{number}: {message}")


def test_status_mismatch_is_reported_on_matrix_line() -> None:
    text = lfm_text()
    row = "| Sustained decode | 120K | 2 | Requests queued |"
    text = text.replace(row, "| Sustained decode | 120K | 2 | Valid |")
    number = line_of(text, "| 120K |")
    assert error_of(text).startswith(
        f"<text>:{number}: decode matrix 120K × 2 shows '1,113.1Requests queued417 ms TTFT' "
        "but All measurements has Valid, 1113.1 tok/s, 417.0 ms TTFT"
    )


def test_measurement_missing_from_matrix() -> None:
    text, _ = replace_line(lfm_text(), "| 120K |", None)
    number = line_of(text, "| 64K |")
    assert error_of(text).startswith(f"<text>:{number}: All measurements rows missing from the decode matrix")


def test_table_row_after_footnote() -> None:
    text = kimi_text() + "\n| Sustained decode | 8K | 256 | Over capacity |"
    assert error_of(text).startswith(f"<text>:{text.count(chr(10)) + 1}: expected only footnotes")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "<text>:1: expected 'Speed test matrix', found the end of the text"),
        ("Speed test matrix\nTitle", "<text>:2: expected the summary line, found the end of the text"),
        ("hello", "<text>:1: expected 'Speed test matrix', found 'hello'"),
    ],
)
def test_short_or_unknown_text(text: str, message: str) -> None:
    assert error_of(text).startswith(message)


def test_header_without_cells() -> None:
    text, number = replace_line(kimi_text(), "total tok/s · rows", "total tok/s · rows are context length|")
    assert error_of(text).startswith(f"<text>:{number}: expected a table row '| ... |', found '|'")


def test_truncated_report() -> None:
    lines = kimi_text().split("\n")
    number = line_of(kimi_text(), "Sustained decode")
    text = "\n".join(lines[: number + 1])  # matrix header, then nothing
    assert error_of(text).startswith(f"<text>:{number + 1}: expected the decode matrix table separator")


# --- hostile sizes -------------------------------------------------------------------------------------


BIG = 64 * 1024


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("| 959.947 ms TTFT |", f"| {'9' * BIG} ms TTFT |",
         r"^<text>:55: decode matrix 8K × 1 shows '9{57}\.\.\.' but All measurements has Valid, 959\.9 tok/s"),
        ("| Valid | 959.9 | 972.0 |", f"| Valid | 959.9 | {'1' * BIG} |",
         r"^<text>:71: Per request tok/s: '1{37}\.\.\.' is not a displayed number"),
    ],
    ids=["matrix-digits", "table-digits"],
)  # fmt: skip
def test_a_64_kb_cell_is_refused_in_linear_time(old: str, new: str, message: str) -> None:
    text = lfm_text()
    assert old in text
    started = time.perf_counter()
    error = error_of(text.replace(old, new, 1))
    assert time.perf_counter() - started < 1.0  # quadratic before: about a minute for the matrix cells
    assert re.match(message, error) and len(error) < 300, error[:300]


def test_a_64_kb_cell_padded_with_spaces_parses_in_linear_time(lfm: ImportedReport) -> None:
    text = lfm_text().replace("| 959.947 ms TTFT |", f"| 959.9{' ' * BIG}47 ms TTFT |", 1)
    started = time.perf_counter()
    assert parse_report(text) == lfm  # the cell still shows 959.9 tok/s and 47 ms TTFT
    assert time.perf_counter() - started < 1.0


def test_a_file_larger_than_any_report_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.txt"
    path.write_bytes(LFM.read_bytes() + b"\n" + b"x" * MAX_REPORT_BYTES)
    with pytest.raises(ReportFormatError, match=rf"^{path}: larger than 1,048,576 bytes, which no speed test"):
        import_report_file(path)


def test_a_published_command_that_holds_a_key_is_imported_redacted(tmp_path: Path) -> None:
    text = LFM.read_text().replace("--api-key <redacted>", "--api-key sk-published-2b7e91 --hf-token=hf_leaked_77")
    copy = tmp_path / "leaky.txt"
    copy.write_text(text)
    imported = import_report_file(copy)
    command = imported.run_info["launch_command"]
    assert "sk-published-2b7e91" not in command and "hf_leaked_77" not in command
    assert "--api-key <redacted>" in command and "--hf-token=<redacted>" in command
    assert import_report_file(LFM).run_info["launch_command"].endswith("--api-key <redacted>")  # unchanged


def test_credentials_in_a_reports_blocks_are_imported_redacted(tmp_path: Path) -> None:
    leaky = "- linux via https://user:mirrorpass77@mirror.local/ --hf-token hf_blocktoken_88"
    text = LFM.read_text().replace("- linux", leaky)
    copy = tmp_path / "blocks.txt"
    copy.write_text(text)
    imported = import_report_file(copy)
    shown = json.dumps(imported.run_info)
    assert "mirrorpass77" not in shown and "hf_blocktoken_88" not in shown
    assert "https://<redacted>@mirror.local/ --hf-token <redacted>" in shown
