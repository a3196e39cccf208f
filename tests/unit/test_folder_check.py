"""`check`: a run folder validated whole, one line per problem and exit status 2; old folders read as before.

The fixture `unversioned-run` is a matrix run (prefill and decode, 64 and 128 tokens × 1 and 2 streams, a control)
made against the fault server, with the `schema_version` its run.json got when written taken out again: a folder
from before documents were stamped.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.rate_folders import write_rate_sweep
from toolkit.base.errors import RateSweepError
from toolkit.cli import main
from toolkit.results.rate_runs import load_rate_sweep
from toolkit.results.runs import load_run
from toolkit.results.store import RUN_FILE

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "folders" / "unversioned-run"
REFERENCE = Path(__file__).resolve().parents[1] / "fixtures" / "reference-reports"


@pytest.fixture
def run(tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURE, tmp_path / "run"))


def check(capsys: pytest.CaptureFixture[str], *folders: Path) -> tuple[int, list[str]]:
    code = main(["check", *map(str, folders)])
    return code, capsys.readouterr().out.splitlines()


def test_a_folder_from_before_versions_reads_as_version_1_and_checks_clean(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "schema_version" not in json.loads((run / RUN_FILE).read_text())
    frame, info = load_run(run)
    assert len(frame) == 6 and set(frame["status"]) == {"Valid"}
    assert info["source"] == "toolkit"
    assert check(capsys, run) == (0, [f"clean: {run}"])


def test_an_imported_report_and_a_rate_sweep_check_clean(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    imported = tmp_path / "imported"
    report = next(REFERENCE.glob("*.txt"))
    assert main(["import-report", str(report), "--out", str(imported)]) == 0  # its launch command: --api-key <redacted>
    rates = write_rate_sweep(tmp_path / "rates")
    assert load_rate_sweep(rates).steps is not None
    capsys.readouterr()
    assert check(capsys, imported, rates) == (0, [f"clean: {imported}, {rates}"])


def test_each_kind_of_damage_is_one_line_and_exit_status_2(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    results.write_text("\n".join([lines[0], lines[1][:50], *lines[2:]]) + "\n")  # a line cut short
    cut_cell = json.loads(lines[1])
    trace = run / "traces" / "decode-128x2.parquet"
    trace.unlink()
    (run / "notes.md").write_text("tried with\ncurl -H 'Authorization: Bearer 5f2b9c0e11aa47d3'\n")
    code, printed = check(capsys, run)
    assert code == 2
    cell = f"{cut_cell['phase']} {cut_cell['context_tokens']} ×{cut_cell['concurrency']}"
    assert printed == [
        f"{results}:2: a cut or damaged line (not JSON)",
        f"{results}: 1 planned cells have no record ({cell}); --resume measures them",
        f"{trace}: missing: decode 128 ×2 ran but its trace is not there",
        f"{run / 'notes.md'}:2: holds a key-shaped string (a key, token or password)",
    ]
    assert "5f2b9c0e" not in capsys.readouterr().err


def test_a_newer_schema_version_and_a_foreign_run_json_are_refused(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = json.loads((run / RUN_FILE).read_text())
    (run / RUN_FILE).write_text(json.dumps({**document, "schema_version": 2}))
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / RUN_FILE).write_text(json.dumps({"model": "m", "output_throughput": 812.5}))
    code, printed = check(capsys, run, foreign)
    assert code == 2
    assert printed == [
        f"{run / RUN_FILE}: schema_version 2 is newer than this toolkit reads (up to 1); upgrade vllm-speedtest to "
        "read it",
        f"{foreign / RUN_FILE}: not a toolkit run.json: none of its fields are the toolkit's (it holds model, "
        "output_throughput)",
    ]
    with pytest.raises(Exception, match="schema_version 2 is newer"):  # every reader refuses it, not only check
        load_run(run)


def test_a_record_outside_the_plan_and_a_sweep_of_a_newer_version(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run / "results.jsonl"
    extra = {**json.loads(results.read_text().splitlines()[-1]), "context_tokens": 512}
    results.write_text(results.read_text() + json.dumps(extra) + "\n")
    rates = write_rate_sweep(tmp_path / "rates")
    sweep = rates / "rates" / "sweep.json"
    sweep.write_text(json.dumps({**json.loads(sweep.read_text()), "schema_version": 7}))
    code, printed = check(capsys, run, rates)
    assert code == 2
    assert printed == [
        f"{results}: decode 512 ×2 is not a cell of the run's plan",
        f"{run / 'traces' / 'decode-512x2.parquet'}: missing: decode 512 ×2 ran but its trace is not there",
        f"{sweep}: schema_version 7 is newer than this toolkit reads (up to 1); upgrade vllm-speedtest to read it",
    ]
    with pytest.raises(RateSweepError, match="schema_version 7 is newer"):  # and so does every reader
        load_rate_sweep(rates)


def test_a_cell_over_capacity_has_no_window_and_needs_no_trace(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    over = {**json.loads(lines[-1]), "status": "Over capacity", "total_tok_s": None, "cell_wall_s": None}
    results.write_text("\n".join([*lines[:-1], json.dumps(over)]) + "\n")
    (run / "traces" / f"decode-{over['context_tokens']}x{over['concurrency']}.parquet").unlink()
    assert check(capsys, run) == (0, [f"clean: {run}"])


def test_not_a_run_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert check(capsys, tmp_path) == (
        2,
        [f"{tmp_path}: not a run folder (no run.json) nor a batch folder (no batch.json)"],
    )
