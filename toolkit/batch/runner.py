"""`toolkit batch SWEEP.yaml`: every variant of a sweep run as `toolkit run` would, into `<out>/<label>/`.

Variants run one after another (`--jobs N`: up to N at once, each measuring a server of its own), here or
as Ray tasks (toolkit.batch.ray_runner). batch.json in `<out>` records each variant's state; `--resume` skips the
finished ones and continues the others in their folders. A failed variant is recorded with its one-line
error and the batch goes on. Then index.html / index.md (toolkit.batch.index) and the compare report.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.base.api_keys import SecretError, env_secret, redact
from toolkit.base.errors import ParamsError, RunRefused
from toolkit.batch.progress import BatchProgress
from toolkit.batch.state import DONE, FAILED, INTERRUPTED, RUNNING, STATE_FILE, BatchState, now
from toolkit.batch.sweep import Variant
from toolkit.batch.variant import ERROR_FILE, one_line_error, run_variant
from toolkit.jupyter.kernels import resolve_lazy_classes
from toolkit.results.documents.batch import CompareBlock, PairedComparison
from toolkit.results.store import RUN_FILE, check_writable, nothing_to_resume

if TYPE_CHECKING:
    from toolkit.batch.ray_runner import RayTasks

__all__ = ["ERROR_FILE", "STATE_FILE", "BatchState", "main", "one_line_error", "run_batch", "run_variant"]

RUN_LOG = "run.log"
COMPARE_DIR = "compare"
STOP_WAIT_S = 15.0  # how long an interrupted batch waits for its threads to see their variants end


def check_jobs(variants: Sequence[Variant], jobs: int, ray: bool) -> None:
    """Refuse, in one line, variants that must not run at the same time under `--jobs > 1`.

    Two variants that measure the same running server would disturb each other; a server the toolkit launches
    here could share GPUs and ports with another (on Ray, the variant's resources place it instead).
    """
    if jobs <= 1:
        return
    if any(variant.round is not None for variant in variants):
        raise ParamsError(f"--jobs {jobs}: an interleaved sweep measures its rounds one at a time, in order (--jobs 1)")
    found: dict[str, str] = {}
    for variant in variants:
        if variant.launched:
            if not ray:
                raise ParamsError(
                    f"--jobs {jobs}: variant {variant.label} launches its server (server:); launched "
                    "servers run one at a time here (--jobs 1), or side by side on Ray (--ray)"
                )
            continue
        url = variant.params.base_url
        if url in found:
            raise ParamsError(
                f"--jobs {jobs}: variants {found[url]} and {variant.label} measure the same server "
                f"({url}); variants sharing a base_url must run one at a time (--jobs 1)"
            )
        found[url] = variant.label


def check_out(out: Path, variants: Sequence[Variant], resume: bool) -> None:
    """Without --resume, `out` must hold no batch and no variant's run."""
    if resume:
        return
    if (out / STATE_FILE).exists():
        raise RunRefused(f"out: {out} already holds a batch; pass --resume to continue it or choose another folder")
    for variant in variants:
        if (out / variant.label / RUN_FILE).exists():
            raise RunRefused(f"out: {out / variant.label} already holds a run; pass --resume or choose another folder")


def finished(out: Path, entry: dict[str, Any], label: str) -> bool:
    """A variant that --resume skips: recorded done, its report written."""
    return entry.get("state") == DONE and (out / label / "report.html").exists()


Runner = Callable[[Variant, Path, bool, int], dict[str, Any]]


def run_batch(
    variants: Sequence[Variant],
    out: Path,
    *,
    sweep: str,
    resume: bool = False,
    jobs: int = 1,
    ray_address: str | None = None,
) -> int:
    """Run the batch; write index and compare. 0 when every variant is done, 1 when one failed."""
    from toolkit.base.folder_lock import hold

    if jobs < 1:
        raise ParamsError(f"--jobs: {jobs}; allowed: an integer >= 1")
    check_jobs(variants, jobs, ray_address is not None)
    with hold(out):  # one batch at a time writes into `out`
        if resume and not (out / STATE_FILE).exists():
            print(nothing_to_resume(out, STATE_FILE, "batch"), file=sys.stderr)
        return _run_batch(variants, out, sweep=sweep, resume=resume, jobs=jobs, ray_address=ray_address)


def _run_batch(variants: Sequence[Variant], out: Path, *, sweep: str, resume: bool, jobs: int,
               ray_address: str | None) -> int:  # fmt: skip
    check_out(out, variants, resume)
    if ray_address is None:
        _check_variants(variants)  # on Ray, the key comes from the workers' environment and is checked there
        return _run_with(variants, out, sweep=sweep, resume=resume, jobs=jobs, ray_address=None, tasks=None)
    from toolkit.base.ray_driver import ray_driver
    from toolkit.batch import ray_runner as batch_ray

    with ray_driver(ray_address, "--ray") as ray:
        batch_ray.check_resources(variants, ray.nodes())
        tasks = batch_ray.RayTasks(ray)
        return _run_with(variants, out, sweep=sweep, resume=resume, jobs=jobs, ray_address=ray_address, tasks=tasks)


def _run_with(variants: Sequence[Variant], out: Path, *, sweep: str, resume: bool, jobs: int,
              ray_address: str | None, tasks: RayTasks | None) -> int:  # fmt: skip
    """The batch proper: each variant in its own folder, locally or as a Ray task (`tasks`); the index last."""
    from toolkit.batch.index import write_index
    from toolkit.servers.launch import stop_signals_as_interrupt

    execute: Runner = _on_ray(tasks) if tasks is not None else _local
    check_writable(out)
    where = f" on the Ray cluster at {ray_address}" if ray_address else ""
    print(f"batch: {len(variants)} variants into {out}{where}", file=sys.stderr, flush=True)
    state = BatchState(out, [v.label for v in variants], sweep, ray_address)
    todo = [v for v in variants if not (resume and finished(out, state.variant(v.label), v.label))]
    progress = BatchProgress(total=len(variants), done=len(variants) - len(todo), jobs=min(jobs, max(len(todo), 1)))
    # On Ray, SIGTERM and SIGHUP too must not end the driver before the tasks' folders are back.
    restore = stop_signals_as_interrupt() if tasks is not None else None
    try:
        with progress.relaying():
            _schedule(todo, out, state, progress, execute, jobs, logs=tasks is None,
                      on_stop=tasks.cancel if tasks is not None else None)  # fmt: skip
    except BaseException:
        lost = tasks.interrupt() if tasks is not None else {}  # the cells measured on Ray workers come back
        for label, entry in (state.document.variants or {}).items():
            if entry.get("state") == RUNNING:
                state.update(label, state=INTERRUPTED, **({"error": lost[label]} if label in lost else {}))
        raise
    finally:
        progress.close()
        if restore is not None:
            restore()
    compare_variants(out, variants, state)
    paths = write_index(out, variants, state.document)
    for name, path in paths.items():
        print(f"{name}: {path}")
    states = [state.variant(v.label)["state"] for v in variants]
    compared = state.document.compare
    return 0 if all(s == DONE for s in states) and (compared is None or compared.state != FAILED) else 1


def compare_variants(out: Path, variants: Sequence[Variant], state: BatchState) -> None:
    """The compare report over every variant with results (the first is the baseline), into <out>/compare/;
    an interleaved sweep's paired reports instead (compare_rounds)."""
    from toolkit.jupyter.reports import write_compare

    ready = [v.label for v in variants if (out / v.label / RUN_FILE).exists() and _has_results(out / v.label)]
    if any(v.round is not None for v in variants):
        compare_rounds(out, [v for v in variants if v.label in ready], state)
        return
    if len(ready) < 2:
        state.set(compare=None)
        return
    try:
        paths = write_compare([out / label for label in ready], out / COMPARE_DIR, ready)
    except Exception as exc:  # the variants' own reports stand; the index says why there is no comparison
        state.set(compare={"state": FAILED, "error": f"the compare report failed: {one_line_error(exc)}"})
        return
    state.set(compare={"state": DONE, "labels": ready})
    for name, path in paths.items():
        print(f"{name}: {path}")


def compare_rounds(out: Path, ready: Sequence[Variant], state: BatchState) -> None:
    """An interleaved sweep's comparison: each configuration against the first by their paired rounds (the rounds
    both have results for; toolkit.batch.interleave.paired_report), into <out>/compare/<b>-vs-<a>.md and .csv."""
    from toolkit.batch.interleave import paired_report

    rounds: dict[str, dict[int, Path]] = {}
    for variant in ready:
        rounds.setdefault(str(variant.configuration), {})[int(variant.round or 0)] = out / variant.label
    configurations = list(dict.fromkeys(str(v.configuration) for v in ready))
    pairs = []
    try:
        (out / COMPARE_DIR).mkdir(exist_ok=True)
        base = configurations[0] if configurations else ""
        for other in configurations[1:]:
            shared = len(set(rounds[base]) & set(rounds[other]))
            if shared < 2:
                continue
            report, sums, detectable = paired_report({base: rounds[base], other: rounds[other]},
                                                     out / COMPARE_DIR, f"{other}-vs-{base}")  # fmt: skip
            overall = {q: list(v) for q, v in sums.items()}  # [ratio, half-width, cells], as batch.json holds it
            pairs.append(PairedComparison(label=other, baseline=base, rounds=shared, report=f"{COMPARE_DIR}/"
                                          f"{report.name}", overall=overall, detectable=detectable))  # fmt: skip
            print(f"interleaved: {report}")
    except Exception as exc:  # the variants' own reports stand; the index says why there is no comparison
        state.set(compare={"state": FAILED, "error": f"the paired report failed: {one_line_error(exc)}"})
        return
    if not pairs:
        state.set(compare={"state": FAILED, "error": "fewer than two rounds of a variant and the first have results"})
        return
    state.set(compare=CompareBlock(state=DONE, labels=configurations, interleaved=pairs).as_dict())


def _has_results(folder: Path) -> bool:
    from toolkit.results.runs import load_run

    try:
        return len(load_run(folder)[0]) > 0
    except (OSError, ValueError):
        return False


def _check_variants(variants: Sequence[Variant]) -> None:
    """Each variant's key must be usable, its rate sweep block valid and a launched server's program must exist
    here, before anything runs."""
    from toolkit.jupyter.pipeline import prepare_run

    for variant in variants:
        try:
            prepare_run(variant.params, variant.server)  # again where the variant runs: a process of its own
        except (ParamsError, SecretError) as exc:
            raise ParamsError(f"variant {variant.label}: {exc}") from None


def _schedule(
    todo: Sequence[Variant],
    out: Path,
    state: BatchState,
    progress: BatchProgress,
    execute: Runner,
    jobs: int,
    *,
    logs: bool,
    on_stop: Callable[[], None] | None = None,
) -> None:
    """Run the variants: in this thread one after another, or in `jobs` threads that take the next one.

    With `logs`, each variant's output lines are also appended to run.log in its folder (on Ray, the task does).
    Interrupted, `on_stop` (on Ray: cancel the tasks) ends the variants, and the threads are waited for (a
    bounded time), since they use what the caller shuts down next.
    """
    work: queue.Queue[Variant] = queue.Queue()
    for variant in todo:
        work.put(variant)
    stopping = threading.Event()  # interrupted: what ends now is recorded by the interrupt, not by its thread

    def worker(slot: int) -> None:
        while not stopping.is_set():
            try:
                variant = work.get_nowait()
            except queue.Empty:
                return
            folder = out / variant.label
            resume = (folder / RUN_FILE).exists()
            progress.begin(slot, variant.label, folder / RUN_LOG if logs else None)
            state.update(variant.label, state=RUNNING, resumed=resume, error=None, started_at=now(), slot=slot)
            outcome = execute(variant, folder, resume, slot)
            if stopping.is_set():
                return
            if outcome.get("error"):  # from a Ray worker too: redacted here as well, before it is stored or shown
                outcome["error"] = redact(outcome["error"], env_secret(variant.params.api_key_env))
            state.update(variant.label, **outcome)
            shown = outcome["state"] + (f": {outcome['error']}" if outcome.get("error") else "")
            progress.end(slot, variant.label, f"{shown} ({outcome.get('duration_s', 0):g} s)")

    if jobs == 1:
        worker(0)
        return
    resolve_lazy_classes()  # before the threads: their first notebooks would race to resolve them
    _in_threads(worker, min(jobs, len(todo)), stopping, on_stop)


def _in_threads(
    worker: Callable[[int], None], slots: int, stopping: threading.Event, on_stop: Callable[[], None] | None
) -> None:
    """`worker(slot)` in `slots` threads, waited for; interrupted: `stopping` set, `on_stop` called, and the threads
    waited for a bounded time."""
    # One release per thread that ended. Not Thread.join: in CPython 3.11 a join that Ctrl-C interrupted marks the
    # thread ended though it still runs.
    ended = threading.Semaphore(0)

    def slot_thread(slot: int) -> None:
        try:
            worker(slot)
        finally:
            ended.release()

    threads = [
        threading.Thread(target=slot_thread, args=(slot,), name=f"batch-{slot}", daemon=True) for slot in range(slots)
    ]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            while thread.is_alive():
                thread.join(0.2)  # a short wait, so that Ctrl-C reaches this thread
    except BaseException:
        stopping.set()
        if on_stop is not None:
            on_stop()
            deadline = time.monotonic() + STOP_WAIT_S
            for _ in threads:
                ended.acquire(timeout=max(deadline - time.monotonic(), 0))
        raise


def _local(variant: Variant, folder: Path, resume: bool, slot: int) -> dict[str, Any]:
    return {**run_variant(variant, folder, resume=resume), "ray": False}


def _on_ray(tasks: RayTasks) -> Runner:
    """Run a variant as a Ray task (batch_ray.RayTasks) and bring its folder back into `folder`."""
    from toolkit.batch import ray_runner as batch_ray

    def execute(variant: Variant, folder: Path, resume: bool, slot: int) -> dict[str, Any]:
        started, clock = now(), time.monotonic()

        def failed(what: str, exc: Exception) -> dict[str, Any]:
            error = f"{what}: {one_line_error(exc, env_secret(variant.params.api_key_env))}"
            return {
                "state": FAILED,
                "error": error,
                "started_at": started,
                "finished_at": now(),
                "duration_s": round(time.monotonic() - clock, 1),
                "ray": True,
            }

        try:
            outcome, archive = tasks.run(variant, folder, resume)
        except Exception as exc:  # the task could not run (worker died, cluster gone): the batch goes on
            return failed("Ray task failed", exc)
        try:
            batch_ray.unpack(archive, folder)
        except Exception as exc:  # a damaged archive or a full disk here: this variant's failure, not the batch's
            return failed("cannot unpack the variant's folder from the Ray worker", exc)
        return {**outcome, "ray": True}

    return execute


def default_out(outputs: str | Path, sweep: str | Path) -> Path:
    """outputs/<sweep file name>/<UTC timestamp>/."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path(outputs) / Path(sweep).stem / stamp


def main(sweep_path: str, *, out: str | None, outputs: str, resume: bool, jobs: int, ray: str | None) -> int:
    """What `python -m toolkit batch` runs: load and check the sweep, then the batch."""
    from toolkit.batch.sweep import load_sweep

    variants = load_sweep(sweep_path)
    if resume and out is None:
        raise ParamsError("--resume: give the batch's folder with --out")
    folder = Path(out) if out else default_out(outputs, sweep_path)
    return run_batch(variants, folder, sweep=str(sweep_path), resume=resume, jobs=jobs, ray_address=ray)
