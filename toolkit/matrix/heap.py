"""The runner's garbage-collector policy while it measures: the heap that existed before is frozen."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_depth = 0


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects alive on entry out of the cyclic GC's full passes until the (outermost) exit.

    A full collection walks every tracked object (a notebook's heap: hundreds of thousands); measured here, that
    stalled the event loop 50-110 ms, so several tokens of every stream came in one read and lost their own
    arrival times. Frozen objects are still freed by reference counting; new ones are collected as usual.
    """
    global _depth
    if _depth == 0:
        gc.collect()
        gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
