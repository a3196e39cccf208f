"""The runner's loop over what is left to measure, round after round, with the drift control between rounds."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from tqdm import tqdm

from toolkit.matrix.control import Control
from toolkit.method.capacity import is_over_capacity
from toolkit.method.contexts import format_context
from toolkit.results.store import ResultStore

if TYPE_CHECKING:
    from toolkit.matrix.runner import _Runner

Todo = Sequence[tuple[tuple[str, int, int], int]]


async def measure_in_rounds(
    runner: _Runner, todo: Todo, store: ResultStore, bar: tqdm, repeats: int, control: Control | None
) -> None:
    """Measure each (cell, round) in order, appending each record at once (with its round when repeats > 1).

    The control cell, when there is one, is measured before the first cell and after the last cell of each round;
    not at all when no decode cell sends load (all Over capacity, or none left).
    """
    if not any(_sends_load(runner, key) for key, _round in todo):
        control = None
    if control is not None:
        await control.measure(runner, rounds_done=todo[0][1] - 1)
    for i, (key, r) in enumerate(todo):
        bar.set_postfix_str(f"{key[0]} {format_context(key[1])} ×{key[2]}" + (f" round {r}" if repeats > 1 else ""))
        m = await runner.measure(key)
        store.append(replace(m, round=r) if repeats > 1 else m)
        bar.update(1)
        if control is not None and (i + 1 == len(todo) or todo[i + 1][1] != r):
            await control.measure(runner, rounds_done=r)


def _sends_load(runner: _Runner, key: tuple[str, int, int]) -> bool:
    """A decode cell that will stream (not Over capacity by the server's KV budget)."""
    phase, ctx, n = key
    budget = runner.server.kv_budget_tokens
    return phase == "decode" and (budget is None or not is_over_capacity(n, ctx, runner.params.max_output, budget))
