"""Fan-out on Ray (`toolkit batch --ray ADDRESS`): each variant a Ray task that asks for the variant's resources.

The task runs the variant in the Ray worker process (on a real cluster, the GPU host of its server) in a
temporary folder, seeded with what the batch already holds for it (a resumed variant continues there), and
returns the folder as a tar archive; the driver unpacks it into `<out>/<label>/`. Ray is imported only here,
only when --ray is given. Worker hosts need the toolkit installed as on the driver; the API key comes from
the workers' own environment (it is never shipped).
"""

from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolkit.sweep import Variant

INSTALL_HINT = "--ray: Ray is not installed; install it with `.venv/bin/pip install -e '.[ray]'` (ray>=2.9)"
RUN_LOG = "run.log"


def connect(address: str) -> Any:
    """Connect this process to the Ray cluster at `address` as a driver; the `ray` module.

    A cluster on a loopback address is reached on loopback only (this driver binds 127.0.0.1 too).
    """
    host = address.rsplit(":", 1)[0].removeprefix("ray://")
    loopback = host == "localhost" or _is_loopback(host)
    if loopback:  # Ray otherwise swaps 127.0.0.1 for this host's network address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    extra: dict[str, Any] = {"_node_ip_address": "127.0.0.1"} if loopback else {}
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, **extra)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ValueError(f"--ray: cannot connect to the Ray cluster at {address}: {str(exc).splitlines()[0]}") from None
    return ray


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
            raise ValueError(f"variant {variant.label}: resources: no node of the Ray cluster has {{{shown}}} "
                             f"({len(alive)} alive node(s))")  # fmt: skip


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


def run_in_worker(variant: Variant, archive: bytes | None, resume: bool) -> tuple[dict[str, Any], bytes]:
    """The Ray task: run the variant in a temporary folder of this worker; its outcome and the folder's archive.

    The run's output goes to run.log in the folder (the driver shows only the batch's bars).
    """
    from toolkit.batch import run_variant

    work = Path(tempfile.mkdtemp(prefix="toolkit-batch-"))
    try:
        folder = work / variant.label
        folder.mkdir()
        if archive is not None:
            unpack(archive, folder)
        with (open(folder / RUN_LOG, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log),
              contextlib.redirect_stderr(log)):  # fmt: skip
            outcome = run_variant(variant, folder, resume=resume)
        packed = pack(folder)
        assert packed is not None
        return outcome, packed
    finally:
        shutil.rmtree(work, ignore_errors=True)


def submit(ray: Any, variant: Variant, archive: bytes | None, resume: bool) -> Any:
    """Start the variant's task on the cluster; an object ref of (outcome, archive)."""
    return ray.remote(run_in_worker).options(**task_options(variant)).remote(variant, archive, resume)
