"""Fan-out on Ray (`toolkit batch --ray ADDRESS`): each variant a Ray task that asks for the variant's resources.

The task runs the variant in the Ray worker process (on a real cluster, the GPU host of its server) in a
temporary folder, seeded with what the batch already holds for it (a resumed variant continues there), and
returns the folder as a tar archive; the driver unpacks it into `<out>/<label>/`. When the batch is
interrupted (Ctrl-C, SIGTERM or SIGHUP on the driver cancels the tasks), a task hands its folder to the driver's
Collector actor instead, so the cells it measured come back too. Ray is imported only here, only when --ray is
given. Worker hosts need the toolkit installed as on the driver; the API key comes from the workers' own
environment (it is never shipped).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
import tarfile
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolkit.base.api_keys import RedactingWriter, env_secret
from toolkit.base.errors import ParamsError
from toolkit.batch.sweep import Variant

RUN_LOG = "run.log"
# How long an interrupted batch waits for its tasks' folders: about 2 s on an idle 2-core machine, 7.5 s with both
# cores busy (measured); a folder not back in time loses its cells, so the wait is generous. Ctrl-C again cuts it.
INTERRUPT_WAIT_S = 60.0


def task_options(variant: Variant) -> dict[str, Any]:
    """ray.remote options from the variant's resources: CPU, GPU and memory by name, the rest custom."""
    asked = dict(variant.resources)
    options: dict[str, Any] = {"num_cpus": asked.pop("CPU", 1), "max_retries": 0}
    if "GPU" in asked:
        options["num_gpus"] = asked.pop("GPU")
    if "memory" in asked:
        options["memory"] = asked.pop("memory")
    if asked:
        options["resources"] = asked
    return options


def check_resources(variants: Sequence[Variant], nodes: Sequence[dict[str, Any]]) -> None:
    """Refuse, in one line, a variant whose resources no alive node of the cluster has (it would wait forever)."""
    alive = [node.get("Resources", {}) for node in nodes if node.get("Alive")]
    for variant in variants:
        asked = {"CPU": 1.0, **variant.resources}
        if not any(all(have.get(name, 0) >= amount for name, amount in asked.items()) for have in alive):
            shown = ", ".join(f"{name}: {amount:g}" for name, amount in asked.items())
            raise ParamsError(
                f"variant {variant.label}: resources: no node of the Ray cluster has {{{shown}}} "
                f"({len(alive)} alive node(s))"
            )


def pack(folder: Path) -> bytes | None:
    """The folder as a gzipped tar archive (paths relative to it); None when it does not exist."""
    if not folder.is_dir():
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in sorted(folder.rglob("*")):
            archive.add(path, arcname=str(path.relative_to(folder)), recursive=False)
    return buffer.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    """Replace `folder` with the archive's contents (unpacked beside it first, then swapped in); on failure
    (tarfile.TarError, OSError, ...) `folder` is left as it was."""
    incoming = folder.with_name(f".{folder.name}.incoming")
    old = folder.with_name(f".{folder.name}.old")
    for stale in (incoming, old):
        shutil.rmtree(stale, ignore_errors=True)
    incoming.mkdir(parents=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            archive.extractall(incoming, filter="data")
    except BaseException:  # a damaged archive, a full disk: the old folder stands, nothing is left beside it
        shutil.rmtree(incoming, ignore_errors=True)
        raise
    if folder.exists():
        folder.rename(old)
    incoming.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


class Collector:
    """A Ray actor of the driver's: the folders (archives) of interrupted tasks, by variant label."""

    def __init__(self) -> None:
        self._archives: dict[str, bytes] = {}

    def put(self, label: str, archive: bytes) -> None:
        self._archives[label] = archive

    def take(self, label: str) -> bytes | None:
        return self._archives.pop(label, None)


def run_in_worker(
    variant: Variant, archive: bytes | None, resume: bool, collector: Any
) -> tuple[dict[str, Any], bytes]:
    """The Ray task: run the variant in a temporary folder of this worker; its outcome and the folder's archive.

    The run's output goes to run.log in the folder (the driver shows only the batch's bars). Cancelled (a
    KeyboardInterrupt), the task gives the folder to `collector` before it ends.
    """
    import ray

    from toolkit.batch.variant import run_variant

    work = Path(tempfile.mkdtemp(prefix="toolkit-batch-"))
    try:
        folder = work / variant.label
        folder.mkdir()
        if archive is not None:
            unpack(archive, folder)
        try:
            with open(folder / RUN_LOG, "a", encoding="utf-8") as log:
                redacted = RedactingWriter(log, env_secret(variant.params.api_key_env))
                try:
                    with contextlib.redirect_stdout(redacted), contextlib.redirect_stderr(redacted):
                        outcome = run_variant(variant, folder, resume=resume)
                finally:
                    redacted.close()
        except KeyboardInterrupt:
            ray.get(collector.put.remote(variant.label, pack(folder)))
            raise
        packed = pack(folder)
        assert packed is not None
        return outcome, packed
    finally:
        shutil.rmtree(work, ignore_errors=True)


class RayTasks:
    """The driver's side: each variant a task; on an interrupt, the tasks cancelled and their folders brought back."""

    def __init__(self, ray: Any) -> None:
        self.ray = ray
        self.collector = ray.remote(Collector).options(num_cpus=0).remote()
        self._running: dict[str, tuple[Any, Path]] = {}  # label: (the task's ref, the variant's folder here)
        self._cancelled: dict[str, tuple[Any, Path]] = {}
        self._lock = threading.Lock()

    def run(self, variant: Variant, folder: Path, resume: bool) -> tuple[dict[str, Any], bytes]:
        """Run the variant as a task asking for its resources; (outcome, archive of its folder)."""
        options = task_options(variant)
        ref = self.ray.remote(run_in_worker).options(**options).remote(variant, pack(folder), resume, self.collector)
        with self._lock:
            self._running[variant.label] = (ref, folder)
        try:
            result: tuple[dict[str, Any], bytes] = self.ray.get(ref)
        except Exception:
            self._forget(variant.label)
            raise
        self._forget(variant.label)  # not on a KeyboardInterrupt: interrupt() still needs the task
        return result

    def _forget(self, label: str) -> None:
        with self._lock:
            self._running.pop(label, None)

    def cancel(self) -> None:
        """Cancel the running tasks (a thread waiting on one gets TaskCancelledError); once each."""
        with self._lock:
            running, self._running = self._running, {}
            self._cancelled.update(running)
        with contextlib.suppress(Exception):  # the cluster gone: interrupt() asks the collector all the same
            for ref, _ in running.values():
                self.ray.cancel(ref)

    def interrupt(self, wait_s: float = INTERRUPT_WAIT_S) -> dict[str, str]:
        """Cancel the running tasks and unpack, into each variant's folder, what its task hands back within
        `wait_s`; the labels whose folder did not come back, with why."""
        self.cancel()
        with self._lock:
            cancelled, self._cancelled = self._cancelled, {}
        if not cancelled:
            return {}
        print(f"interrupted: waiting up to {wait_s:g} s for the Ray workers' folders (Ctrl-C again: leave them)",
              file=sys.stderr, flush=True)  # fmt: skip
        try:
            with contextlib.suppress(Exception):
                self.ray.wait([ref for ref, _ in cancelled.values()], num_returns=len(cancelled), timeout=wait_s)
        except KeyboardInterrupt:
            return {label: "interrupted again before its folder came back from the Ray worker" for label in cancelled}
        lost: dict[str, str] = {}
        for label, (_, folder) in cancelled.items():
            try:
                archive = self.ray.get(self.collector.take.remote(label), timeout=wait_s)
                if archive is None:
                    lost[label] = f"interrupted: its folder did not come back from the Ray worker within {wait_s:g} s"
                else:
                    unpack(archive, folder)
            except Exception as exc:  # a damaged archive, a full disk, the cluster gone: the others still come back
                lost[label] = f"interrupted: cannot bring its folder back from the Ray worker: {type(exc).__name__}"
        return lost
