"""`check`: a run folder validated whole, one line per problem and exit status 2; old folders read as before.

The fixture `unversioned-run` is a matrix run (prefill and decode, 64 and 128 tokens × 1 and 2 streams, a control)
made against the fault server, with the `schema_version` its run.json got when written taken out again: a folder
from before documents were stamped.
"""

from __future__ import annotations

import json
import math
import shutil
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from tests.rate_folders import write_rate_sweep
from toolkit.base.errors import RateSweepError
from toolkit.cli import main
from toolkit.folder_check import check_folder
from toolkit.results.folder_files import CHUNK_CHARS
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


def test_a_folder_of_neither_kind_says_so_before_the_links_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, outside = tmp_path / "folder", tmp_path / "elsewhere"
    folder.mkdir()
    outside.mkdir()
    (folder / "venv-python").symlink_to(outside)
    assert check(capsys, folder) == (
        2,
        [
            f"{folder}: not a run folder (no run.json) nor a batch folder (no batch.json)",
            f"{folder / 'venv-python'}: a link to {outside}, outside the folder; not followed",
        ],
    )


KEY = "sk-" + "q7Vw2" * 5  # key-shaped (toolkit.base.api_keys), made up


def test_a_steps_line_of_another_type_is_named_and_not_taken_for_a_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rates = write_rate_sweep(tmp_path / "rates")
    steps = rates / "rates" / "steps.jsonl"
    whole = len(steps.read_text().splitlines())
    steps.write_text(steps.read_text() + '{"step": "zero"}\n{"step": 0}\n{"step": 9, "offered_rate": NaN}\n')
    code, printed = check(capsys, rates)
    assert code == 2
    assert printed == [
        f"{steps}:{whole + 1}: step: 'zero' should be a whole number",
        f"{steps}:{whole + 2}: offered_rate: missing",
        f'{steps}:{whole + 3}: offered_rate: NaN should be a rate above 0 and at most 1e+06 req/s, or "inf"',
    ]


def test_a_record_of_another_type_or_out_of_range_is_named_with_its_field(
    run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run / "results.jsonl"
    lines = results.read_text().splitlines()
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    lines[0] = json.dumps({**first, "ttft_ms": -5000})
    lines[-1] = json.dumps({**last, "concurrency": [last["concurrency"]]})
    results.write_text("\n".join(lines) + "\n")
    code, printed = check(capsys, run)
    cells = [f"{c['phase']} {c['context_tokens']} ×{c['concurrency']}" for c in (first, last)]
    assert code == 2
    assert printed == [
        f"{results}:1: ttft_ms: -5000 should be greater than or equal to 0",
        f"{results}:{len(lines)}: concurrency: [{last['concurrency']}] should be a whole number",
        f"{results}: 2 planned cells have no record ({', '.join(cells)}); --resume measures them",
    ]


def test_parquet_records_are_scanned_for_keys_and_infinities_and_a_damaged_one_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rates = write_rate_sweep(tmp_path / "rates")
    first, second = sorted((rates / "rates").glob("step-*.parquet"))[:2]
    records = pd.read_parquet(first)
    records.loc[3, "error"] = f"HTTP 401: bad key {KEY}"
    records.loc[5, "sent_s"] = math.inf
    records["offered_rate"] = math.inf  # a step of all at once: the one infinity allowed
    records.to_parquet(first)
    second.write_bytes(b"PAR1 not parquet")
    code, printed = check(capsys, rates)
    assert code == 2
    assert printed == [
        f"{first}: column sent_s: holds an infinity; expected finite numbers (NaN where a value is missing)",
        f"{first}: column error, row 3: holds a key-shaped string (a key, token or password)",
        f"{second}: not a readable Parquet file (ArrowInvalid)",
    ]
    assert KEY not in "\n".join(printed)


def test_a_link_out_of_the_folder_is_named_and_not_followed(
    run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "notes.md").write_text(f"the key: {KEY}\n")
    (run / "notes.md").symlink_to(outside / "notes.md")
    (run / "logs").symlink_to(outside, target_is_directory=True)
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / RUN_FILE).symlink_to(run / RUN_FILE)
    code, printed = check(capsys, run, linked)
    assert code == 2
    assert printed == [
        f"{run / 'logs'}: a link to {outside}, outside the folder; not followed",
        f"{run / 'notes.md'}: a link to {outside / 'notes.md'}, outside the folder; not followed",
        f"{linked / RUN_FILE}: a link to {run / RUN_FILE}, outside the folder; not followed",
    ]


def test_a_large_log_is_read_in_bounded_memory_and_a_key_cut_between_two_pieces_is_found(run: Path) -> None:
    assert check_folder(run) == []  # what a check imports (pyarrow) is imported before memory is traced
    size = 4 * 1024 * 1024
    at = (size // CHUNK_CHARS - 1) * CHUNK_CHARS - len(KEY) // 2  # the key straddles the last two pieces read
    log = run / "server.log"
    log.write_text("INFO started\n" + "x" * (at - 1) + f" {KEY} " + "y" * (size - at - len(KEY)))  # a 4 MB line
    tracemalloc.start()
    try:
        problems, peak = check_folder(run), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert problems == [f"{log}:2: holds a key-shaped string (a key, token or password)"]
    # Read whole, the line alone is 4 MB and its copy as a line 4 MB more; a piece at a time, its scan holds a few
    # copies of one piece of CHUNK_CHARS (about 2 MB where the process remembers keys: they are looked for too).
    assert peak < size, peak
