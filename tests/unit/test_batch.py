"""The batch's pure parts: headline numbers, index, --jobs refusals, Ray options and archives, the terminal relay."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from toolkit.base.schema import COLUMNS
from toolkit.batch import ray_runner as batch_ray
from toolkit.batch.index import headline, index_html, index_markdown
from toolkit.batch.progress import BatchProgress
from toolkit.batch.runner import _on_ray, check_jobs, check_out, one_line_error
from toolkit.batch.sweep import Variant, expand


def frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(COLUMNS))


def row(phase: str, tokens: int, n: int, status: str, total: float | None = None) -> dict[str, Any]:
    return {"phase": phase, "context_tokens": tokens, "context": f"{tokens // 1024}K", "concurrency": n,
            "status": status, "total_tok_s": total}  # fmt: skip


RESULTS = frame(
    [
        row("prefill", 1024, 1, "Valid", 900.0),
        row("prefill", 4096, 1, "Valid", 1200.0),
        row("decode", 1024, 1, "Valid", 50.0),
        row("decode", 1024, 4, "Valid", 180.0),
        row("decode", 1024, 8, "Requests queued", 400.0),
        row("decode", 4096, 8, "Over capacity"),
    ]
)


def test_headline_numbers_of_a_run() -> None:
    assert headline(RESULTS) == {
        "prefill_context": "4K", "prefill_tok_s": 1200.0,  # the largest context
        "best_total_tok_s": 180.0, "best_context": "1K", "best_concurrency": 4, "best_tied": [],  # Valid only
        "statuses": {"Valid": 4, "Requests queued": 1, "Over capacity": 1}, "disturbed": 0,
    }  # fmt: skip
    assert headline(RESULTS[RESULTS["phase"] == "prefill"])["best_total_tok_s"] is None


def test_the_best_cell_is_tied_with_cells_within_the_runs_drift_or_its_interval() -> None:
    close = frame([row("decode", 1024, 1, "Valid", 165.0), row("decode", 1024, 4, "Valid", 180.0),
                   row("decode", 1024, 2, "Valid", 120.0)])  # fmt: skip
    assert headline(close)["best_tied"] == []  # no intervals, no drift: 180 beats 165
    assert headline(close, drift=0.1)["best_tied"] == ["1K × 1"]  # 165 / 180 = 0.917: within a 10 % drift
    spread = close.assign(total_tok_s_ci=[15.0, 15.0, 15.0])
    assert headline(spread)["best_tied"] == ["1K × 1"]  # 180 ± 15 and 165 ± 15: not significant; 120: it is
    tied = {"label": "v", "state": "done", "error": None, "headline": headline(close, drift=0.1), "report": False,
            "duration_s": None}  # fmt: skip
    assert "| 180.0 at 1K × 4 (tied with 1K × 1) |" in index_markdown([tied], None, "s")


def test_disturbed_measurements_give_no_headline_number_and_are_counted() -> None:
    paused = RESULTS.astype({"disturbed": object})
    paused.loc[(paused["phase"] == "decode") & (paused["concurrency"] == 4), "disturbed"] = "no token for 2.1 s"
    paused.loc[(paused["phase"] == "prefill") & (paused["context_tokens"] == 4096), "disturbed"] = "no token for 1.5 s"
    head = headline(paused)
    assert (head["prefill_context"], head["prefill_tok_s"]) == ("1K", 900.0)  # the largest undisturbed context
    assert (head["best_total_tok_s"], head["best_concurrency"]) == (50.0, 1)  # 180 at ×4 was disturbed
    assert head["disturbed"] == 2 and head["statuses"]["Valid"] == 4  # statuses unchanged, disturbed counted
    row = {"label": "v", "state": "done", "error": None, "headline": head, "report": True, "duration_s": None}
    assert "| 900 at 1K | 50.0 at 1K × 1 | Valid 4 · Requests queued 1 · Over capacity 1 · 2 disturbed |" in (
        index_markdown([row], None, "s")
    )


def test_the_index_links_reports_and_says_why_a_variant_failed() -> None:
    rows = [
        {"label": "max_num_seqs=1", "state": "done", "error": None, "headline": headline(RESULTS), "report": True,
         "duration_s": 12.5},
        {"label": "b<x>", "state": "failed", "error": "base_url: cannot connect", "headline": None, "report": False,
         "duration_s": 0.4},
    ]  # fmt: skip
    compare = {"state": "done", "labels": ["max_num_seqs=1", "b<x>"]}
    md = index_markdown(rows, compare, "sweep.yaml")
    assert "| [max_num_seqs=1](max_num_seqs=1/report.md) | done (12.5 s) | 1,200 at 4K | 180.0 at 1K × 4 |" in md
    assert "Valid 4 · Requests queued 1 · Over capacity 1" in md
    assert "| b&lt;x&gt; | failed (0.4 s) | — | — | — | base_url: cannot connect |" in md  # inert in Markdown too
    assert "[compare.md](compare/compare.md)" in md
    page = index_html(rows, compare, "sweep.yaml")
    assert '<a href="max_num_seqs%3D1/report.html">max_num_seqs=1</a>' in page
    assert "b&lt;x&gt;" in page and "<x>" not in page
    assert 'href="compare/compare.html"' in page
    assert "No comparison: fewer than two" in index_markdown(rows[:1], None, "s")
    failed = {"state": "failed", "error": "the compare report failed: boom"}
    assert "No comparison: the compare report failed: boom." in index_markdown(rows, failed, "s")


def test_the_index_of_an_interleaved_batch_sums_up_each_paired_report() -> None:
    compare = {"state": "done", "labels": ["a", "b"], "interleaved": [
        {"label": "b", "baseline": "a", "rounds": 3, "report": "compare/b-vs-a.md",
         "overall": {"total_tok_s": [1.052, 0.031, 2], "ttft_ms": [0.98, 0.1, 2]}}]}  # fmt: skip
    line = "b / a over 3 interleaved rounds, paired: Total tok/s 1.05× ±0.03 (2 cells); TTFT 0.980× ±0.10 (2 cells)"
    assert f"- [b-vs-a.md](compare/b-vs-a.md): {line}" in index_markdown([], compare, "s")
    assert f'<li><a href="compare/b-vs-a.md">b-vs-a.md</a>: {line}</li>' in index_html([], compare, "s")
    # the smallest change the rounds detect at 80 % power, where batch.json holds it (older ones do not)
    compare["interleaved"][0]["detectable"] = {"total_tok_s": 1.234}
    assert ("paired: Total tok/s 1.05× ±0.03 (2 cells, detects ±1.2 %); TTFT 0.980× ±0.10 (2 cells)"
            in index_markdown([], compare, "s"))  # fmt: skip


def variants(data: dict[str, Any]) -> list[Variant]:
    return expand(data)


def test_jobs_refuse_variants_on_one_server_and_launched_servers_here() -> None:
    same = variants({"variants": [{"label": "a"}, {"label": "b", "duration_s": 3}]})
    check_jobs(same, 1, ray=False)
    with pytest.raises(
        ValueError,
        match=r"^--jobs 2: variants a and b measure the same server "
        r"\(http://127\.0\.0\.1:8000\); .* one at a time \(--jobs 1\)$",
    ):
        check_jobs(same, 2, ray=False)
    with pytest.raises(ValueError, match=r"same server"):
        check_jobs(same, 2, ray=True)  # on Ray too: a running server is the same wherever the task runs
    two = variants({"base_url": "http://127.0.0.1:{port}", "grid": {"port": [8001, 8002]}})
    check_jobs(two, 2, ray=False)
    launched = variants({"server": {"command": "vllm serve m"}, "grid": {"max_num_seqs": [1, 2]},
                         "title": "{max_num_seqs}"})  # fmt: skip
    with pytest.raises(ValueError, match=r"^--jobs 3: variant max_num_seqs=1 launches its server"):
        check_jobs(launched, 3, ray=False)
    check_jobs(launched, 3, ray=True)  # their Ray resources place them
    rounds = variants({"variants": [{"label": "a"}, {"label": "b", "base_url": "http://127.0.0.1:8001"}],
                       "interleave": 2})  # fmt: skip
    with pytest.raises(ValueError, match=r"^--jobs 2: an interleaved sweep measures its rounds one at a time"):
        check_jobs(rounds, 2, ray=True)


def test_out_without_resume_must_hold_no_batch(tmp_path: Path) -> None:
    vs = variants({"variants": [{"label": "a"}]})
    check_out(tmp_path, vs, resume=False)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "run.json").write_text("{}")
    with pytest.raises(ValueError, match=r"already holds a run; pass --resume"):
        check_out(tmp_path, vs, resume=False)
    (tmp_path / "batch.json").write_text("{}")
    with pytest.raises(ValueError, match=r"already holds a batch; pass --resume"):
        check_out(tmp_path, vs, resume=False)
    check_out(tmp_path, vs, resume=True)


def test_ray_task_options_and_resource_check() -> None:
    gpu, custom, cpu = variants({"variants": [
        {"label": "gpu", "resources": {"GPU": 8}},
        {"label": "custom", "resources": {"CPU": 2, "h200_host": 1, "memory": 1e9}},
        {"label": "cpu"},
    ]})  # fmt: skip
    assert batch_ray.task_options(gpu) == {"num_cpus": 1, "max_retries": 0, "num_gpus": 8}
    assert batch_ray.task_options(custom) == {"num_cpus": 2, "max_retries": 0, "memory": 1e9,
                                              "resources": {"h200_host": 1}}  # fmt: skip
    assert batch_ray.task_options(cpu) == {"num_cpus": 1, "max_retries": 0}
    nodes = [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 2e9, "h200_host": 1.0}},
             {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}}]  # fmt: skip
    batch_ray.check_resources([custom, cpu], nodes)
    with pytest.raises(
        ValueError,
        match=r"^variant gpu: resources: no node of the Ray cluster has \{CPU: 1, GPU: 8\} "
        r"\(1 alive node\(s\)\)$",
    ):
        batch_ray.check_resources([cpu, gpu], nodes)


def test_a_folder_travels_as_an_archive_and_replaces_the_old_one(tmp_path: Path) -> None:
    source = tmp_path / "worker" / "a"
    (source / "traces").mkdir(parents=True)
    (source / "results.jsonl").write_text('{"x": 1}\n')
    (source / "traces" / "decode-64x1.parquet").write_bytes(b"\x00\x01")
    data = batch_ray.pack(source)
    assert data is not None and batch_ray.pack(tmp_path / "missing") is None
    target = tmp_path / "batch" / "a"
    target.mkdir(parents=True)
    (target / "stale.txt").write_text("old")
    batch_ray.unpack(data, target)
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == [
        "results.jsonl", "traces", "traces/decode-64x1.parquet"]  # fmt: skip
    assert (target / "traces" / "decode-64x1.parquet").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in target.parent.iterdir()) == ["a"]  # nothing left beside it


class FakeRay:
    """`ray.remote(f).options(...).remote(...)` gives a ref (or the collector actor), `ray.get(ref)` the task's
    canned reply."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply

    def remote(self, *args: Any) -> FakeRay:
        return self

    def options(self, **options: Any) -> FakeRay:
        return self

    def get(self, ref: Any) -> Any:
        return self.reply


@pytest.mark.parametrize("archive", [b"not a gzip archive", b"\x1f\x8b\x08\x00"], ids=["garbage", "cut"])
def test_an_archive_that_cannot_be_unpacked_is_the_variants_failure(archive: bytes, tmp_path: Path) -> None:
    folder = tmp_path / "batch" / "a"
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text('{"x": 1}\n')
    (variant,) = expand({"variants": [{"label": "a"}]})
    execute = _on_ray(batch_ray.RayTasks(FakeRay(({"state": "done", "error": None}, archive))))
    outcome = execute(variant, folder, False, 0)
    assert outcome["state"] == "failed" and outcome["ray"] is True
    assert re.fullmatch(r"cannot unpack the variant's folder from the Ray worker: \w+: .+", outcome["error"])
    assert "\n" not in outcome["error"]
    assert (folder / "results.jsonl").read_text() == '{"x": 1}\n'  # what the batch held for it stands
    assert sorted(p.name for p in folder.parent.iterdir()) == ["a"]  # nothing half-unpacked beside it


def test_one_line_errors() -> None:
    assert one_line_error(ValueError("base_url: cannot connect\nmore")) == "base_url: cannot connect"
    assert one_line_error(RuntimeError("sk-SECRET in it"), "sk-SECRET") == "RuntimeError: <redacted> in it"
    from papermill.exceptions import PapermillExecutionError

    from toolkit.base.errors import NotebookError
    from toolkit.jupyter.execute import failure_line

    cause = PapermillExecutionError(3, 4, "x = 1", "ValueError", "bad\nline", [])
    exc = NotebookError(failure_line(Path("/runs/a/report.ipynb"), cause))
    assert one_line_error(exc) == (
        "report.ipynb: cell 4 failed: ValueError: bad; the executed notebook, its traceback in it, is "
        "/runs/a/report.ipynb"
    )


def test_kernel_output_lines_go_above_the_bars_and_a_redrawn_bar_to_its_line(tmp_path: Path) -> None:
    terminal = io.StringIO()
    progress = BatchProgress(total=1, done=0, jobs=1, stream=terminal)
    progress.begin(0, "a", tmp_path / "a" / "run.log")
    buffer: list[str] = []
    progress.relay_text("\ra:   0%|  | 0/2", buffer)
    progress.relay_text("\ra:  50%|# | 1/2\ra: 100%|##| 2/2", buffer)
    assert progress.lines[0].desc == "a: 100%|##| 2/2"
    progress.relay_text("\noverhead: measured 2 s\nno GPU", buffer)
    progress.relay_text(" telemetry\n", buffer)
    progress.end(0, "a", "done (3 s)")
    progress.close()
    assert (tmp_path / "a" / "run.log").read_text() == ("a: 100%|##| 2/2\noverhead: measured 2 s\n"
                                                        "no GPU telemetry\n")  # fmt: skip
    shown = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", terminal.getvalue())
    assert "overhead: measured 2 s\n" in shown and "a: done (3 s)\n" in shown
    assert "batch: 100%" in shown


KEY = "sk-batch-DISTINCTIVE-5150"


def test_a_variant_failure_carrying_the_key_is_stored_redacted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The error file, the outcome (batch.json, index) and the lines shown: escaped and URL-encoded forms too."""
    import toolkit.matrix.runner
    from toolkit.base import api_keys as secrets
    from toolkit.batch import runner as batch
    from toolkit.params import make_params

    monkeypatch.setattr(secrets, "_KNOWN", set())
    monkeypatch.setenv("BATCH_TEST_KEY", KEY + "\r")

    def fails(params: Any, api_key: str | None) -> None:
        raise RuntimeError(f"Illegal header value {('Bearer ' + KEY + chr(13)).encode()!r} at /x?k={KEY}%0D")

    monkeypatch.setattr(toolkit.matrix.runner, "preflight", fails)
    variant = Variant(label="a", params=make_params({"api_key_env": "BATCH_TEST_KEY"}))
    outcome = batch.run_variant(variant, tmp_path / "a", resume=False)
    assert outcome["state"] == "failed" and outcome["error"].startswith("RuntimeError: Illegal header value b'Bearer ")
    assert KEY not in outcome["error"] and KEY not in (tmp_path / "a" / batch.ERROR_FILE).read_text()

    # An outcome from elsewhere (a Ray worker) is redacted before it is stored or shown.
    terminal = io.StringIO()
    progress = BatchProgress(total=1, done=0, jobs=1, stream=terminal)
    state = batch.BatchState(tmp_path, ["a"], "sweep.yaml", None)
    raw = {"state": "failed", "error": f"from a worker: {KEY!r}", "duration_s": 1.0}
    batch._schedule([variant], tmp_path, state, progress, lambda *_: dict(raw), 1, logs=True)
    secrets.api_key_from_env("BATCH_TEST_KEY")  # as the batch's checks do before any variant runs
    progress.write(f"a kernel line holding {KEY}")
    progress.close()
    assert state.variant("a")["error"] == "from a worker: '<redacted>'"
    assert KEY not in (tmp_path / batch.STATE_FILE).read_text()
    assert KEY not in terminal.getvalue() and KEY not in (tmp_path / "a" / batch.RUN_LOG).read_text()


class InterruptedAgain(FakeRay):
    """A cluster whose cancelled task is still ending when the user presses Ctrl-C a second time."""

    def cancel(self, ref: Any) -> None:
        pass

    def wait(self, refs: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt

    def get(self, ref: Any, timeout: float | None = None) -> Any:
        raise AssertionError("nothing is asked of the cluster after the second Ctrl-C")


def test_a_second_ctrl_c_leaves_the_workers_folders_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tasks = batch_ray.RayTasks(InterruptedAgain(None))
    tasks._running["a"] = (object(), tmp_path / "a")  # a task the driver waits on
    lost = tasks.interrupt(wait_s=60)
    assert lost == {"a": "interrupted again before its folder came back from the Ray worker"}
    assert capsys.readouterr().err == (
        "interrupted: waiting up to 60 s for the Ray workers' folders (Ctrl-C again: leave them)\n"
    )
