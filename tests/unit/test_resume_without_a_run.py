"""`--resume` where there is nothing to continue: `run --resume` without `--out` is refused in one line (as `batch`
refuses it), and `run`, `matrix`, `rates` and `batch` given a folder that holds no run, sweep or batch say in one line
that a new one starts there, instead of measuring everything again without a word."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError, RunRefused
from toolkit.base.folder_lock import LOCK_FILE
from toolkit.batch import runner
from toolkit.cli import main
from toolkit.cli.measure import _say_if_nothing_to_resume

pytestmark = pytest.mark.unit


def sweep_file(folder: Path) -> Path:
    path = folder / "sweep.yaml"
    path.write_text(json.dumps({"base_url": "http://127.0.0.1:9", "contexts": ["64"], "concurrency": [1],
                                "variants": [{"label": "a"}]}))  # fmt: skip
    return path


def test_run_resume_without_out_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = sweep_file(tmp_path)  # a params file as well: its variants aside, a run's fields
    assert main(["run", str(sweep), "--resume"]) == 2
    assert capsys.readouterr().err == "error: --resume: give the run's folder with --out\n"
    assert main(["batch", str(sweep), "--resume"]) == 2  # as batch refuses it
    assert capsys.readouterr().err == "error: --resume: give the batch's folder with --out\n"


def test_a_folder_without_a_run_says_a_new_one_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _say_if_nothing_to_resume(tmp_path, resume=True)
    assert capsys.readouterr().err == (
        f"resume: {tmp_path} holds no run.json; nothing to continue, a new run starts there\n"
    )
    _say_if_nothing_to_resume(tmp_path, resume=False)  # a fresh run: nothing to say
    (tmp_path / "run.json").write_text("{}")
    _say_if_nothing_to_resume(tmp_path, resume=True)  # a run to continue: nothing to say
    assert capsys.readouterr().err == ""


def held_by_another_process(folder: Path) -> int:
    """`folder`'s lock taken as another toolkit run holds it (its pid in the file: not this process's ancestor)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, b"999999\n")
    return fd


def test_batch_resume_into_a_folder_without_a_batch_says_so_once_it_holds_the_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sweep = sweep_file(tmp_path)
    ran: list[tuple[Path, bool]] = []
    monkeypatch.setattr(runner, "_run_batch", lambda variants, out, **kw: ran.append((out, kw["resume"])) or 0)
    out = tmp_path / "out"
    assert runner.main(str(sweep), out=str(out), outputs="outputs", resume=True, jobs=1, ray=None) == 0
    assert capsys.readouterr().err == (
        f"resume: {out} holds no batch.json; nothing to continue, a new batch starts there\n"
    )
    assert ran == [(out, True)]
    out.mkdir()
    (out / "batch.json").write_text("{}")
    runner.main(str(sweep), out=str(out), outputs="outputs", resume=True, jobs=1, ray=None)
    assert capsys.readouterr().err == ""
    busy = tmp_path / "busy"
    fd = held_by_another_process(busy)
    try:
        with pytest.raises(RunRefused, match=r"is in use by another toolkit run \(pid 999999\)"):
            runner.main(str(sweep), out=str(busy), outputs="outputs", resume=True, jobs=1, ray=None)
    finally:
        os.close(fd)
    assert capsys.readouterr().err == ""  # refused: no new batch starts there, and nothing says one does
    assert len(ran) == 2


def test_rates_resume_into_a_folder_without_a_sweep_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from toolkit.rates import runner as rates_runner

    def stop_here(measure: object) -> None:
        raise ParamsError("stopped before any load")

    monkeypatch.setattr(rates_runner, "run_sync", stop_here)
    command = ["rates", "--base-url", "http://127.0.0.1:9", "--rates", "1", "--out", str(tmp_path), "--resume"]
    assert main(command) == 2
    assert capsys.readouterr().err == (
        f"resume: {tmp_path} holds no rate sweep; nothing to continue, a new sweep starts there\n"
        "error: stopped before any load\n"
    )
