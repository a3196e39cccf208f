"""`toolkit interleave`: two running servers measured in alternating rounds (A B B A …), then the paired report.

Each round measures the same matrix on A and on B, one after the other, into its own run folder
(`<out>/<label>-round<r>/`, a run folder like any other); the order alternates between rounds so that neither
side is always first. When every round is done, `interleaved.md` and `interleaved.csv` hold each decode cell's
paired ratio (toolkit.reports.interleaved). Running the same command again continues an interrupted comparison:
a round's folder that exists is resumed (its finished cells kept).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from toolkit.matrix.run_folder import hold
from toolkit.matrix.runner import run_matrix
from toolkit.method.paired import alternating_order
from toolkit.params import ParamsError, RunParams
from toolkit.reports.interleaved import interleaved_markdown, overall, paired_table
from toolkit.results.runs import load_run
from toolkit.results.store import RESULTS_FILE

REPORT = "interleaved.md"
TABLE = "interleaved.csv"


def round_folder(out: Path, label: str, round_: int) -> Path:
    return out / f"{label}-round{round_}"


def run_interleaved(params: dict[str, RunParams], rounds: int, out: Path, say: Callable[[str], object] = print) -> Path:
    """Measure `params` (label -> the matrix against that side's server, two sides) in alternating rounds into
    `out`; return the report's path."""
    if len(params) != 2:
        raise ParamsError(f"interleave: two sides, got {len(params)}")
    labels = list(params)
    sides = {"A": labels[0], "B": labels[1]}
    for round_, side in alternating_order(rounds):
        label = sides[side]
        folder = round_folder(out, label, round_)
        resume = (folder / RESULTS_FILE).exists()
        say(f"round {round_} {label}: {'resuming' if resume else 'measuring'} {params[label].base_url}")
        with hold(folder):
            run_matrix(params[label], folder, resume=resume)
    frames = {label: {r: load_run(round_folder(out, label, r))[0] for r in range(1, rounds + 1)} for label in labels}
    a, b = frames[labels[0]], frames[labels[1]]
    table = paired_table(a, b)
    table.to_csv(out / TABLE, index=False)
    report = out / REPORT
    report.write_text(interleaved_markdown(table, labels, rounds, overall(a, b)), encoding="utf-8")
    return report
