"""One results folder, one writer: `hold(folder)` keeps `<folder>/.lock` locked (flock) for as long as a run, a
batch, an import or a compare writes there; the file holds the writer's pid, so a second writer on that folder is
refused naming it, while the notebook kernels of a run write inside their parent's lock."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

from toolkit.base.errors import RunRefused

__all__ = ["LOCK_FILE", "hold", "holder_pid"]

LOCK_FILE = ".lock"


@contextlib.contextmanager
def hold(folder: Path) -> Iterator[None]:
    """Hold `folder`'s lock while the block runs; refuse (RunRefused, one line) while another process holds it.

    The holder may be this process or one of its ancestors (the run whose notebook kernel calls this): the block
    then runs under that lock. `folder` is created if missing, and removed again if the block left it empty.
    """
    created = not folder.exists()
    path = folder / LOCK_FILE
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = _lock(path)
    except OSError as exc:  # before any load: a folder we cannot write would lose every measurement
        raise RunRefused(f"out: {folder} is not writable: {exc.strerror or exc}") from None
    try:
        yield
    finally:
        if fd is not None:
            path.unlink(missing_ok=True)  # while still locked: a waiting process re-checks the file it locked
            os.close(fd)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()


def _lock(path: Path) -> int | None:
    """The locked file's descriptor, or None when this process or an ancestor holds the lock already."""
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise
            raise RunRefused(
                f"out: {path} is a symbolic link; the lock must be a plain file (remove the link)"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid = holder_pid(path)
            if pid is not None and pid in _self_and_ancestors():
                return None
            who = f"pid {pid}" if pid is not None else "pid unknown"
            raise RunRefused(
                f"out: {path.parent} is in use by another toolkit run ({who}); wait for it to end "
                "or choose another folder"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)  # the holder removed the file as it let go: lock the one there now


def holder_pid(path: Path, wait_s: float = 1.0) -> int | None:
    """The pid written in a lock file (its holder writes it right after locking: wait up to `wait_s`)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def _self_and_ancestors() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.parents())}
