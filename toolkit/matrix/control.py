"""The drift control: a short decode cell (smallest context, 1 stream) measured at a run's start, after each round
and at its end; its records in control.jsonl, its summary (change, drift) in run.json (toolkit.method.drift)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm import tqdm

from toolkit.base.schema import Measurement
from toolkit.matrix.decode import drain, measure_decode_cell
from toolkit.matrix.failures import EXPECTED_FAILURES
from toolkit.method.contexts import format_context
from toolkit.method.drift import trend
from toolkit.results.documents.run_blocks import ControlBlock, ControlReading
from toolkit.results.run_document import RunDocument
from toolkit.results.store import ResultStore

if TYPE_CHECKING:
    from toolkit.matrix.runner import _Runner

CONTROL_FILE = "control.jsonl"


def control_store(out: Path) -> ResultStore:
    """control.jsonl, appended like results.jsonl."""
    store = ResultStore(out)
    store.path = out / CONTROL_FILE
    return store


class Control:
    """Measures the control cell of one run folder and keeps run.json's summary of it current."""

    def __init__(self, out: Path, context_tokens: int, window_s: float) -> None:
        self.out, self.context_tokens, self.window_s = out, context_tokens, window_s
        self.store = control_store(out)

    async def measure(self, runner: _Runner, rounds_done: int) -> Measurement:
        """One control window on the runner's server; an Error when it fails (the run goes on)."""

        ctx, label, params = self.context_tokens, format_context(self.context_tokens), runner.params
        try:
            prompts = await runner.cell_prompts(ctx, 1)
            spec = runner.cell_spec(prompts, self.window_s)
            m, _trace = await measure_decode_cell(
                runner.client,
                runner.api,
                spec,
                context_tokens=ctx,
                context=label,
                use_metrics=runner.server.metrics_available,
                retries=params.disturbed_retries,
            )
        except EXPECTED_FAILURES as exc:
            await drain(runner.api, 30.0, runner.server.metrics_available)
            m = Measurement(
                phase="decode",
                context_tokens=ctx,
                context=label,
                concurrency=1,
                status="Error",
                error=f"{type(exc).__name__}: {exc}",
            )
        m = runner.stamp(replace(m, round=rounds_done))
        self.store.append(m)
        self._summarize()
        shown = f"{m.total_tok_s:,.1f} tok/s" if m.total_tok_s else m.status
        tqdm.write(f"control {label} ×1 after round {rounds_done}: {shown}", file=sys.stderr)
        return m

    def _summarize(self) -> None:
        """run.json's `control` block, rewritten through the document's one owner (RunDocument)."""
        document = RunDocument.load(self.out)
        document.control = control_block(self.store.load(), self.window_s)
        document.save(self.out)


def control_reading(m: Measurement) -> ControlReading:
    """One control measurement as run.json's control block keeps it."""
    return ControlReading(
        after_round=m.round or 0,
        started_at=m.started_at,
        status=m.status,
        total_tok_s=m.total_tok_s,
        total_tok_s_ci=m.total_tok_s_ci,
        sub_windows=m.sub_windows,
        window_dof=m.window_dof,
        disturbed=m.disturbed,
    )


def control_block(records: Sequence[Measurement], window_s: float) -> ControlBlock:
    """run.json's `control` block: the cell, its window, every control measurement, and over the usable ones the
    machine's change with its interval and the drift (None with fewer than two)."""
    first = records[0] if records else None
    shown = [control_reading(m) for m in records]
    change = trend(shown)
    return ControlBlock(
        cell=f"{first.context} × 1" if first else None,
        context_tokens=first.context_tokens if first else None,
        window_s=window_s,
        measurements=shown,
        change=None if change is None else change[0],
        change_low=None if change is None else change[1],
        change_high=None if change is None else change[2],
        drift=None if change is None else abs(change[0]),
        drift_basis="trend",
    )


def make_control(out: Path, decode_contexts: tuple[int, ...], duration_s: float, window_s: float) -> Control | None:
    """The run's control (its smallest decode context, a window of min(window_s, duration_s)); None when off."""
    if window_s <= 0 or not decode_contexts:
        return None
    return Control(out, min(decode_contexts), min(window_s, duration_s))
