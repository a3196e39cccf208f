"""A gate over folders on disk, as the command and the notebooks call it: read the sides, judge each quantity.

`gate_folders` reads the run folders (toolkit.results.gate_inputs, toolkit.results.runs) and returns each gated
quantity's verdict (toolkit.reports.gate_ratios) with the context its text needs (toolkit.reports.gate_text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit import CONSOLE_SCRIPT
from toolkit.base.errors import ResultsError
from toolkit.method.gate import Verdict, family_level, gated
from toolkit.reports.gate_allowance import between_runs as allowance_given
from toolkit.reports.gate_rates import split_limits
from toolkit.reports.gate_ratios import Found, Judged, decode_values, judge
from toolkit.reports.gate_sweeps import judge_rates, rate_limits, rate_sweeps
from toolkit.reports.gate_text import GateContext
from toolkit.results.gate_inputs import INTERLEAVED, GateInput, gate_input

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = ["gate_folders", "gate_pair", "interleave_command", "round_frames"]


def gate_folders(
    folders: Sequence[str],
    max_regression: str,
    *,
    between_runs: str | None = None,
    baseline: str | None = None,
    candidate: str | None = None,
    inconclusive: str = "inconclusive",
) -> tuple[list[Judged], GateContext]:
    """Judge the candidate against the baseline: `folders` one interleaved folder or two run folders,
    `max_regression` as `--max-regression` takes it (`3%`, `total_tok_s=3%,ttft_ms=10%`, `goodput=5%`),
    `between_runs` as `--between-runs` (`10%`, or the file of `gate allowance --save`). A bare limit gates the
    rate quantities too where both folders (every round's, interleaved) hold a rate sweep with an SLO
    (toolkit.reports.gate_sweeps). Bad input
    raises a ParamsError or ResultsError (one line), before any folder is read when it is in the arguments."""
    limits = split_limits(max_regression)
    allowance = allowance_given(between_runs)
    counts_as = Verdict(inconclusive)
    found = gate_input(list(folders), baseline, candidate)
    quantities = gated(limits.decode)
    sweeps = rate_sweeps(found, limits, lambda: _share_decode(found, [q.name for q in quantities]))
    rates = rate_limits(limits, sweeps)
    if rates and not limits.decode_named and not _share_decode(found, [q.name for q in quantities]):
        quantities = []  # sweeps without decode cells in common: a bare limit gates what both measured
    level = family_level(len(quantities) + len(rates))  # the family: every quantity gated, each class's too
    names = [q.name for q in quantities]
    command, rounds = None, 0
    intervals: dict[str, Found] = {}
    if found.design == INTERLEAVED and names:
        intervals, rounds = _interleaved(found, names, level)
    elif found.design == INTERLEAVED and sweeps is not None:
        rounds = len(sweeps.rounds)  # rate sweeps alone, paired over the rounds
    elif names:
        intervals, command = _apart(found, names, level)
    context = GateContext(found.design, *found.labels, rounds, level, counts_as, command)
    judged = judge(intervals, quantities, limits.decode, allowance)
    if sweeps is not None:
        judged += judge_rates(sweeps, rates, level, allowance)
    return judged, context


def gate_pair(
    baseline: str, candidate: str, max_regression: str, between_runs: str | None = None, title: str | None = None
) -> tuple[str, Figure]:
    """The gate's view of one run folder against the baseline's, as the compare notebook shows it: the command's
    lines (one per quantity) and each interval against its allowed band, coloured by verdict."""
    from toolkit.reports.gate_plots import gate_figure
    from toolkit.reports.gate_text import gate_line

    judged, context = gate_folders([baseline, candidate], max_regression, between_runs=between_runs)
    return "\n".join(gate_line(item, context) for item in judged), gate_figure(judged, title)


def _interleaved(found: GateInput, names: list[str], level: float) -> tuple[dict[str, Found], int]:
    """The intervals over the rounds both sides have results for, and how many."""
    from toolkit.reports.gate_ratios import interleaved_intervals

    a, b = round_frames(found)
    measured = [r for r in found.rounds if len(a[r]) and len(b[r])]  # a failed round's folder holds no results
    if len(measured) < 2:
        raise ResultsError(f"{found.labels[0]} and {found.labels[1]} have results in {len(measured)} common "
                           "round(s); a paired gate needs two or more")  # fmt: skip
    return interleaved_intervals({r: a[r] for r in measured}, {r: b[r] for r in measured}, names, level), len(measured)


def round_frames(found: GateInput) -> tuple[dict[int, pd.DataFrame], dict[int, pd.DataFrame]]:
    """An interleaved folder's results by round: the baseline's, then the candidate's."""
    from toolkit.results.runs import load_run

    return ({r: load_run(found.baseline[r])[0] for r in found.rounds},
            {r: load_run(found.candidate[r])[0] for r in found.rounds})  # fmt: skip


def _apart(found: GateInput, names: list[str], level: float) -> tuple[dict[str, Found], str]:
    from toolkit.reports.compare import ratio_table
    from toolkit.reports.compare_overall import overall_ratios
    from toolkit.reports.gate_ratios import apart_intervals, common_cells, decode_values
    from toolkit.results.runs import load_runs

    frame = load_runs([found.baseline[1], found.candidate[1]], labels=["baseline", "candidate"])
    common_cells([decode_values(frame[frame["run"] == side], names) for side in ("baseline", "candidate")])
    table = ratio_table(frame, "baseline", "candidate", quantities=names)
    decode = table[table["phase"] == "decode"]
    intervals = apart_intervals(table, overall_ratios(decode, names) if len(decode) else {}, names, level)
    return intervals, interleave_command(found)


def interleave_command(found: GateInput) -> str:
    """The `interleave` command that would measure the two runs' servers so that the machine's change cancels."""
    from toolkit.results.run_document import RunDocument

    urls = []
    for side, folder in (("A", found.baseline[1]), ("B", found.candidate[1])):
        params = RunDocument.load(folder).params
        url = params.base_url if params is not None else None
        urls.append(str(url) if isinstance(url, str) and url.startswith("http") else f"URL_{side}")
    return f"{CONSOLE_SCRIPT} interleave --a-url {urls[0]} --b-url {urls[1]} --rounds 4 --out OUT"


def _share_decode(found: GateInput, names: list[str]) -> bool:
    """Whether the two folders measured apart have a decode cell in common (run undisturbed)."""
    from toolkit.results.runs import load_run

    if not names:
        return False
    sides = [decode_values(load_run(side[1])[0], names) for side in (found.baseline, found.candidate)]
    return bool(set(sides[0]) & set(sides[1]))
