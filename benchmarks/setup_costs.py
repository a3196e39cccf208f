"""Fixed CPU costs around a measurement: an httpx client's TLS context, the garbage collection that `frozen_heap`
(toolkit.matrix.heap) makes before it freezes the heap, and a `toolkit` command's exit.

In one process holding a notebook kernel's heap (the notebooks' first-cell imports and a results frame), alternating
A B B A ... so the machine's drift falls on both, median CPU seconds over `--rounds`:
- an `httpx.AsyncClient` that makes its own verifying context (httpx's default) against one given the shared
  `toolkit.base.tls.tls_context()`;
- a full collection (`gc.collect()`, what `frozen_heap` made until 2026-12-06) against the young generations'
  (`gc.collect(1)`, what it makes now), each after the same cyclic garbage is made;
- `frozen_heap()` entered and left, as the runner does once per measuring notebook;
- a Python process that imports what a `toolkit run` imports and exits, its heap left to the interpreter's teardown
  against frozen first (what `python -m toolkit` does since 2026-12-06): its whole CPU, from the children's usage.

    .venv/bin/python benchmarks/setup_costs.py --rounds 20

The last line: `setup_costs: objects=<tracked> client_own_ms=<ms> client_shared_ms=<ms> collect_full_ms=<ms>
collect_young_ms=<ms> frozen_heap_ms=<ms> exit_ms=<ms> exit_frozen_ms=<ms>`.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import httpx
import pandas as pd

from toolkit.base.tls import tls_context
from toolkit.jupyter import notebook  # noqa: F401 (a notebook kernel's heap: its first cell's imports)
from toolkit.matrix.heap import frozen_heap
from toolkit.method.paired import a_first
from toolkit.reports import plots, views  # noqa: F401
from toolkit.results import runs  # noqa: F401

GARBAGE_CYCLES = 20_000  # cyclic garbage made before each collection: a previous cell's leftovers
COMMAND_IMPORTS = "import toolkit.jupyter.execute, toolkit.jupyter.convert, toolkit.matrix.runner, toolkit.results.runs"


def cpu_ms(action: Callable[[], object]) -> float:
    """CPU milliseconds `action` takes in this process."""
    start = time.process_time()
    action()
    return (time.process_time() - start) * 1000


def make_garbage() -> None:
    """Unreachable reference cycles, as a finished cell may leave them."""
    for _ in range(GARBAGE_CYCLES):
        a: list[object] = []
        a.append(a)


def client_ms(shared: bool) -> float:
    """CPU ms to make one client as ServerAPI makes it (closed after, outside the time)."""
    kwargs = {"verify": tls_context()} if shared else {}
    start = time.process_time()
    client = httpx.AsyncClient(base_url="http://127.0.0.1:1", trust_env=False, **kwargs)
    took = (time.process_time() - start) * 1000
    asyncio.run(client.aclose())
    return took


def collect_ms(generation: int) -> float:
    make_garbage()
    return cpu_ms(lambda: gc.collect(generation))


def frozen_heap_ms() -> float:
    make_garbage()

    def enter_and_leave() -> None:
        with frozen_heap():
            pass

    return cpu_ms(enter_and_leave)


def exit_ms(frozen: bool) -> float:
    """CPU ms of a process that imports what a `toolkit run` imports and ends (its heap frozen first or not)."""
    code = COMMAND_IMPORTS + ("\nimport gc; gc.freeze()" if frozen else "")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    _frame = pd.DataFrame({"x": range(100_000), "y": [str(i) for i in range(100_000)]})  # a results frame's objects
    tls_context()  # made once, before the rounds, as a process's first client would
    samples: dict[str, list[float]] = {
        name: [] for name in ("own", "shared", "full", "young", "frozen", "exit", "exit_frozen")
    }
    for round_ in range(1, args.rounds + 1):
        pairs = [("own", lambda: client_ms(False)), ("shared", lambda: client_ms(True))]
        collections = [("full", lambda: collect_ms(2)), ("young", lambda: collect_ms(1))]
        exits = [("exit", lambda: exit_ms(False)), ("exit_frozen", lambda: exit_ms(True))]
        for pair in (pairs, collections, exits):
            for name, measure in pair if a_first(round_) else reversed(pair):
                samples[name].append(measure())
        samples["frozen"].append(frozen_heap_ms())
    median = {name: statistics.median(values) for name, values in samples.items()}
    print(
        f"setup_costs: objects={len(gc.get_objects())} client_own_ms={median['own']:.2f} "
        f"client_shared_ms={median['shared']:.2f} collect_full_ms={median['full']:.1f} "
        f"collect_young_ms={median['young']:.1f} frozen_heap_ms={median['frozen']:.1f} "
        f"exit_ms={median['exit']:.0f} exit_frozen_ms={median['exit_frozen']:.0f}"
    )


if __name__ == "__main__":
    main()
