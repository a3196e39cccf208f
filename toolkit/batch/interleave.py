"""`toolkit interleave`: two running servers measured in alternating rounds (A B B A …), then the paired report.

Each round measures the same matrix on A and on B, one after the other, into its own run folder
(`<out>/<label>-round<r>/`, a run folder like any other); the order alternates between rounds so that neither
side is always first. When every round is done, `interleaved.md` and `interleaved.csv` hold each decode cell's
paired ratio (toolkit.reports.interleaved). Running the same command again continues an interrupted comparison:
a round's folder that exists is resumed (its finished cells kept). The rounds are even (A B, B A, …: each side
first as often as the other); an odd count is refused before anything is measured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from toolkit.base.folder_lock import hold
from toolkit.matrix.runner import run_matrix
from toolkit.method.paired import alternating_order, rounds_problem
from toolkit.params import ParamsError, RunParams
from toolkit.reports.interleaved import interleaved_markdown, overall, overall_design, paired_table
from toolkit.results.runs import load_run
from toolkit.results.store import RESULTS_FILE

REPORT = "interleaved.md"
TABLE = "interleaved.csv"  # the paired table beside the report (paired_report)
# What both sides must ask alike: the paired ratio compares the servers, so the requests and the plan are one
SAME_ON_BOTH_SIDES = ("endpoint", "batch_size", "response_format", "tools", "tool_choice", "contexts",
                      "prefill_only_contexts", "concurrency", "duration_s", "max_output")  # fmt: skip


def round_folder(out: Path, label: str, round_: int) -> Path:
    return out / f"{label}-round{round_}"


def run_interleaved(params: dict[str, RunParams], rounds: int, out: Path, say: Callable[[str], object] = print) -> Path:
    """Measure `params` (label -> the matrix against that side's server, two sides) in alternating rounds into
    `out`; return the report's path."""
    if len(params) != 2:
        raise ParamsError(f"interleave: two sides, got {len(params)}")
    if (different := sides_differ(*params.values())) is not None:
        raise ParamsError(different)
    if (problem := rounds_problem(rounds)) is not None:
        raise ParamsError(f"rounds: {rounds}; allowed: {problem}")
    labels = list(params)
    sides = {"A": labels[0], "B": labels[1]}
    for round_, side in alternating_order(rounds):
        label = sides[side]
        folder = round_folder(out, label, round_)
        resume = (folder / RESULTS_FILE).exists()
        say(f"round {round_} {label}: {'resuming' if resume else 'measuring'} {params[label].base_url}")
        with hold(folder):
            run_matrix(params[label], folder, resume=resume)
    folders = {label: {r: round_folder(out, label, r) for r in range(1, rounds + 1)} for label in labels}
    return paired_report(folders, out, REPORT.removesuffix(".md"))[0]


def sides_differ(a: RunParams, b: RunParams) -> str | None:
    """One line naming the first of SAME_ON_BOTH_SIDES that the two sides set differently; None when none."""
    for name in SAME_ON_BOTH_SIDES:
        if (mine := getattr(a, name)) != (theirs := getattr(b, name)):
            return (f"interleave: the sides' {name} differ ({mine!r} and {theirs!r}); a paired comparison sends "
                    "the same requests to both servers")  # fmt: skip
    return None


def paired_report(
    folders: Mapping[str, Mapping[int, Path]], into: Path, stem: str
) -> tuple[Path, dict[str, tuple[float, float, int]], dict[str, float]]:
    """`<into>/<stem>.md` and `.csv`: the paired comparison of two sides' run folders (label -> round -> folder;
    the first side is A) over the rounds both measured; returns the report's path, the overall ratios and each
    quantity's minimum detectable effect in % (80 % power, from the rounds' spread; toolkit.method.paired)."""
    (a_label, a_rounds), (b_label, b_rounds) = folders.items()
    rounds = sorted(set(a_rounds) & set(b_rounds))
    a = {r: load_run(a_rounds[r])[0] for r in rounds}
    b = {r: load_run(b_rounds[r])[0] for r in rounds}
    table, sums = paired_table(a, b), overall(a, b)
    table.to_csv(into / f"{stem}.csv", index=False)
    report = into / f"{stem}.md"
    design = overall_design(a, b)
    report.write_text(interleaved_markdown(table, [a_label, b_label], len(rounds), sums, design), encoding="utf-8")
    detectable = {q: d.detectable.effect for q, d in design.items() if d.detectable is not None}
    return report, sums, detectable
