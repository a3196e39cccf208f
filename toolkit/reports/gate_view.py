"""A gate over folders on disk, as the command and the notebooks call it: read the sides, judge each quantity.

`gate_folders` reads the run folders (toolkit.results.gate_inputs, toolkit.results.runs) and returns each gated
quantity's verdict (toolkit.reports.gate_ratios) with the context its text needs (toolkit.reports.gate_text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit import CONSOLE_SCRIPT
from toolkit.base.errors import ResultsError
from toolkit.method.gate import Verdict, family_level, gated, parse_limits
from toolkit.reports.gate_allowance import between_runs as allowance_given
from toolkit.reports.gate_ratios import Found, Judged, judge
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
    `max_regression` as `--max-regression` takes it (`3%`, `total_tok_s=3%,ttft_ms=10%`), `between_runs` as
    `--between-runs` (`10%`, or the file of `gate allowance --save`). Bad input raises a ParamsError or
    ResultsError (one line), before any folder is read when it is in the arguments."""
    limits = parse_limits(max_regression)
    allowance = allowance_given(between_runs)
    counts_as = Verdict(inconclusive)
    found = gate_input(list(folders), baseline, candidate)
    quantities = gated(limits)
    level = family_level(len(quantities))
    names = [q.name for q in quantities]
    command, rounds = None, 0
    if found.design == INTERLEAVED:
        intervals, rounds = _interleaved(found, names, level)
    else:
        intervals, command = _apart(found, names, level)
    context = GateContext(found.design, *found.labels, rounds, level, counts_as, command)
    return judge(intervals, quantities, limits, allowance), context


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
        params = RunDocument.load(folder).params or {}
        url = params.get("base_url")
        urls.append(str(url) if isinstance(url, str) and url.startswith("http") else f"URL_{side}")
    return f"{CONSOLE_SCRIPT} interleave --a-url {urls[0]} --b-url {urls[1]} --rounds 4 --out OUT"
