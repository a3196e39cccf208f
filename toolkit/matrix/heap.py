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
    Only the young generations are collected first (0.0 ms against a full pass's 69 ms on a kernel's heap of 149,000
    objects, benchmarks/setup_costs.py): garbage older than them would have waited for the next full pass anyway,
    which the unfreeze on exit leaves to come when the collector's own thresholds say.
    """
    global _depth
    if _depth == 0:
        gc.collect(1)
        gc.freeze()
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.unfreeze()
