"""`python -m toolkit import-report` on the two reference reports, and the report rebuilt from the import.

The round trip: our markdown report of an imported run shows every decode matrix cell and every
"All measurements" row exactly as the reference text does.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from toolkit import cli
from toolkit.base.schema import COLUMNS
from toolkit.reports import tables as report_tables
from toolkit.results.runs import load_run

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "reference-reports"
REPORTS = {"kimi": FIXTURES / "kimi-k2.7-code-h200sxm-x8-vllm-0.29.txt",
           "lfm": FIXTURES / "lfm2.5-350m-h200nvl-vllm-0.26.txt"}  # fmt: skip
GLUE = " · "  # our cells separate tok/s, status and TTFT; the reference text has them glued together

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = {}
    for name, path in REPORTS.items():
        out[name] = tmp_path_factory.mktemp(name) / "run"
        assert cli.main(["import-report", str(path), "--out", str(out[name])]) == 0
    return out


def results(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "results.csv")


def one(frame: pd.DataFrame, phase: str, context: str, concurrency: int) -> pd.Series:
    rows = frame[(frame["phase"] == phase) & (frame["context"] == context) & (frame["concurrency"] == concurrency)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """(header, rows) of every pipe table; text glued before a header or after the last row is cut off."""
    found: list[tuple[list[str], list[list[str]]]] = []
    lines = text.splitlines()
    rows: list[list[str]] | None = None
    for line, following in zip(lines, [*lines[1:], ""], strict=True):
        if "|" in line and following.startswith("|---"):
            rows = []
            found.append(([cell.strip() for cell in line[line.index("|") :].split("|")[1:-1]], rows))
        elif line.startswith("|---"):
            continue
        elif line.startswith("|") and rows is not None:
            rows.append([cell.strip() for cell in line[: line.rindex("|")].split("|")[1:]])
        else:
            rows = None
    return found


def table(text: str, first: str, second: str) -> list[list[str]]:
    """Rows of the one table whose header starts with ``first | second``."""
    (rows,) = [rows for header, rows in tables(text) if header[:2] == [first, second]]
    return rows


@pytest.mark.parametrize(
    ("name", "phase", "context", "concurrency", "status", "tok_s", "ttft_ms"),
    [
        ("lfm", "decode", "8K", 128, "Valid", 24_300.0, 521.0),
        ("lfm", "decode", "120K", 2, "Requests queued", 1_113.1, 417.0),
        ("kimi", "decode", "251K", 1, "Valid", 10.1, 821.0),
        ("kimi", "decode", "32K", 16, "Over capacity", None, None),
        ("kimi", "prefill", "251K", 1, "Valid", 8_828.0, 28_591.0),
    ],
)
def test_imported_cells_in_results_csv(
    imported: dict[str, Path], name: str, phase: str, context: str, concurrency: int, status: str,
    tok_s: float | None, ttft_ms: float | None,
) -> None:  # fmt: skip
    row = one(results(imported[name]), phase, context, concurrency)
    assert row["status"] == status
    assert (None if pd.isna(row["total_tok_s"]) else row["total_tok_s"]) == tok_s
    assert (None if pd.isna(row["ttft_ms"]) else row["ttft_ms"]) == ttft_ms


def test_results_csv_has_the_schema_columns_and_run_json_the_source(imported: dict[str, Path]) -> None:
    for name, folder in imported.items():
        assert list(results(folder).columns) == list(COLUMNS)
        info = json.loads((folder / "run.json").read_text())
        assert info["source"] == "imported" and info["source_file"] == REPORTS[name].name
        assert not (folder / "results.jsonl").exists()
    assert json.loads((imported["kimi"] / "run.json").read_text())["max_model_len"] == 262_144
    assert len(results(imported["kimi"])) == 7 + 6 * 8 and len(results(imported["lfm"])) == 6 + 5 * 8


@pytest.mark.parametrize("name", list(REPORTS))
def test_markdown_report_reproduces_the_reference_tables(imported: dict[str, Path], name: str) -> None:
    reference = REPORTS[name].read_text(encoding="utf-8")
    frame, run_info = load_run(imported[name])
    ours = report_tables.report_markdown(frame, run_info)
    matrix = table(reference, "Context", "1")
    assert [[cell.replace(GLUE, "") for cell in row] for row in table(ours, "Context", "1")] == matrix
    assert len(matrix) == (6 if name == "kimi" else 5) and all(len(row) == 9 for row in matrix)
    measurements = table(reference, "Phase", "Context")
    assert table(ours, "Phase", "Context") == measurements
    assert len(measurements) == len(frame) and all(len(row) == 12 for row in measurements)


def test_prefill_table_matches_the_reference_prefill_list(imported: dict[str, Path]) -> None:
    text = REPORTS["kimi"].read_text(encoding="utf-8")
    frame, _ = load_run(imported["kimi"])
    for context, tok_s, ttft in report_tables.prefill_table(frame).values.tolist():
        assert f"{context} context{tok_s}{ttft} TTFT" in text


@pytest.mark.process
def test_report_flag_writes_the_html_and_markdown_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "lfm"
    assert cli.main(["import-report", str(REPORTS["lfm"]), "--out", str(out), "--report"]) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    for text in ("Speed test matrix", "LFM2.5-350M on H200 NVL 141GB", "24.3K · 521 ms TTFT",
                 "1,113.1 · Requests queued · 417 ms TTFT", "Over capacity"):  # fmt: skip
        assert text in html
    markdown = (out / "report.md").read_text(encoding="utf-8")
    assert "| 120K | 687.9 · 443 ms TTFT | 1,113.1 · Requests queued · 417 ms TTFT |" in markdown
    assert {"prefill.png", "decode.png", "scaling.png"} <= {p.name for p in out.iterdir()}
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', html)  # the HTML's figures, in page order
    assert [base64.b64decode(png) for png in embedded] == [(out / f"{k}.png").read_bytes()
                                                          for k in ("prefill", "decode", "scaling")]  # fmt: skip
    assert [x for x in markdown.splitlines() if x.startswith("![")] == [
        "![Prefill](prefill.png)", "![Sustained decode heatmaps](decode.png)",
        "![Total tok/s by simultaneous requests](scaling.png)"]  # fmt: skip
    assert "report.html" in capsys.readouterr().out


def test_import_refuses_a_measured_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "results.jsonl").write_text("")
    assert cli.main(["import-report", str(REPORTS["lfm"]), "--out", str(tmp_path)]) == 2
    assert "already holds a measured run" in capsys.readouterr().err


@pytest.mark.process
@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Hello\nworld\n", r"^error: .*bad\.txt:1: expected 'Speed test matrix', found 'Hello'$"),
        ("Speed test matrix\nA on B\n", r"^error: .*bad\.txt:3: expected the summary line, found the end of the text$"),
    ],
)
def test_malformed_input_is_one_line_with_the_line_number_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text(text, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "toolkit", "import-report", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert re.match(message, done.stderr.strip()), done.stderr
    assert not (tmp_path / "o").exists()


def test_a_matrix_cell_that_disagrees_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lines = REPORTS["kimi"].read_text(encoding="utf-8").split("\n")
    row = next(i for i, line in enumerate(lines) if line.startswith("| 16K |"))
    lines[row] = lines[row].replace("| 46.8281 ms TTFT |", "| 46.9281 ms TTFT |")
    bad = tmp_path / "kimi.txt"
    bad.write_text("\n".join(lines), encoding="utf-8")
    assert cli.main(["import-report", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {bad}:{row + 1}: decode matrix 16K × 2 shows") and err.count("\n") == 1


def test_missing_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["import-report", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'none.txt'}: cannot read: No such file or directory\n"


@pytest.mark.process
def test_import_and_compare_take_the_folder_lock_and_compare_never_writes_into_a_compared_run(
    tmp_path: Path, imported: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every writer into a folder takes its lock: while another process holds it, `import-report --out` and
    `compare --out` are refused in one line and write nothing; `compare --out` one of its runs is refused."""
    busy = tmp_path / "busy"
    hold_it = ("import sys, time; from pathlib import Path; from toolkit.base.folder_lock import hold\n"
               "with hold(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(120)")  # fmt: skip
    holder = subprocess.Popen([sys.executable, "-c", hold_it, str(busy)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"  # the lock is held from here
        before = sorted(p.name for p in busy.iterdir())
        assert cli.main(["import-report", str(REPORTS["lfm"]), "--out", str(busy)]) == 2
        assert cli.main(["compare", str(imported["kimi"]), str(imported["lfm"]), "--out", str(busy)]) == 2
        assert sorted(p.name for p in busy.iterdir()) == before == [".lock"]
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all(f"out: {busy} is in use by another toolkit run (pid {holder.pid})" in line
                                   for line in lines), lines  # fmt: skip
    assert cli.main(["compare", str(imported["kimi"]), str(imported["lfm"]), "--out", str(imported["lfm"])]) == 2
    assert capsys.readouterr().err.strip() == (f"error: out: {imported['lfm']} is one of the compared runs, whose "
                                               "figures it would overwrite; choose another")  # fmt: skip
