"""`import-results`: other tools' result files written as a run folder of rate steps, like one of ours.

Each file is one step (the tool's run at one rate), in rate order. Where the tool saved per-request data, the step's
figures are recomputed from its records under our definitions (toolkit.method.goodput.summarize_step), and beside
each stand the tool's own figure (`<name>_as_reported`) and the same recomputed by the tool's definitions
(`<name>_reproduced`). Where it saved only aggregates, the step's figures are the tool's, and `figures_by` says so.
`compare`, `report` and `rate_sweep.ipynb` read the folder as they read ours.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.errors import ParamsError, RunRefused
from toolkit.method.goodput import RECORD_COLUMNS, ServiceLevel, summarize_step
from toolkit.rates.files import write_step, write_sweep
from toolkit.results.peers.read import read_peer_result
from toolkit.results.peers.step import QUANTITIES, PeerStep
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RUN_FILE

NO_LIMITS = ServiceLevel()  # imported steps are judged against no service level: every completed request meets it


def import_results(files: Sequence[str | Path], out: Path) -> list[dict[str, Any]]:
    """Write `files` (one tool's) into the new run folder `out`; the step rows written, in rate order.

    ParamsError when the files come from more than one tool, RunRefused when `out` holds a run already,
    ResultsError (one line naming the file) when a file is malformed or of an unknown kind.
    """
    if not files:
        raise ParamsError("files: none given; name one or more result files")
    steps = sorted((read_peer_result(f) for f in files), key=lambda s: s.offered_rate)
    if len(sources := sorted({s.source for s in steps})) > 1:
        raise ParamsError(f"files: from {' and '.join(sources)}; import one tool's files into a folder")
    if (out / RUN_FILE).exists():
        raise RunRefused(f"out: {out} already holds a run; choose another folder")
    source, model = steps[0].source, next((s.model for s in steps if s.model), None)
    names = [s.file.name for s in steps]
    RunDocument.model_validate({
        "source": "imported", "kind": "rates", "run_label": out.name, "title": f"{source} results",
        "source_file": ", ".join(names), "server": {"model": model} if model else None,
    }).save(out)  # fmt: skip
    write_sweep(out, {"source": source, "run_label": out.name, "model": model, "imported_from": names,
                      "rates": [s.offered_rate for s in steps]})  # fmt: skip
    rows = []
    for index, step in enumerate(steps):
        frame, row = step_row(index, step)
        write_step(out, index, frame, row)
        rows.append(row)
    return rows


def step_row(index: int, step: PeerStep) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The step's records (empty without per-request data) and its steps.jsonl row."""
    if step.records is not None and len(step.records):
        frame = step.records.assign(step=index, offered_rate=step.offered_rate)
        ours, by = summarize_step(frame, NO_LIMITS).row(), "toolkit"
    else:
        frame = pd.DataFrame(columns=list(RECORD_COLUMNS))
        ours = {"offered_rate": step.offered_rate, **step.reported}
        by = f"{step.source} (aggregates only: its own definitions)"
    return frame, {
        "step": index,
        "searched": False,
        **ours,
        "source": step.source,
        "source_file": step.file.name,
        "figures_by": by,
        **{f"{name}_as_reported": step.reported.get(name) for name in QUANTITIES},
        **{f"{name}_reproduced": value for name, value in step.reproduced.items()},
    }


def comparison_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """One line per imported step: our figure, the tool's own, and the tool's reproduced from its records."""
    lines = []
    for row in rows:
        rate = row["offered_rate"]
        shown = [f"step {row['step']} ({'all at once' if rate == math.inf else f'{rate:g} req/s'}, {row['source']})"]
        for name, label in (("ttft_p50_ms", "TTFT p50"), ("tpot_p50_ms", "TPOT p50"), ("itl_p50_ms", "ITL p50"),
                            ("output_tok_s", "output tok/s")):  # fmt: skip
            ours, theirs, again = row.get(name), row.get(f"{name}_as_reported"), row.get(f"{name}_reproduced")
            if ours is None and theirs is None:
                continue
            text = f"{label} {_figure(ours)}; as reported {_figure(theirs)}"
            shown.append(text + (f", reproduced {_figure(again)}" if again is not None else ""))
        lines.append(": ".join(shown[:1]) + ": " + "; ".join(shown[1:]) if len(shown) > 1 else shown[0])
    return lines


def _figure(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.2f}"
