"""A gate over folders on disk, as the command and the notebooks call it: read the sides, judge each quantity.

`gate_folders` reads the run folders (toolkit.results.gate_inputs, toolkit.results.runs) and returns each gated
quantity's verdict (toolkit.reports.gate_ratios) with the context its text needs (toolkit.reports.gate_text).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from toolkit import CONSOLE_SCRIPT
from toolkit.base.errors import ParamsError, ResultsError
from toolkit.method.gate import Verdict, family_level, gated
from toolkit.reports.gate_allowance import between_runs as allowance_given
from toolkit.reports.gate_rates import (
    RATE_QUANTITIES,
    Limits,
    bracket,
    goodput_ratio,
    has_limits,
    judge_goodput,
    judge_slo_rate,
    level_text,
    rate_goodputs,
    rate_list,
    split_limits,
)
from toolkit.reports.gate_ratios import BetweenRuns, Found, Judged, decode_values, judge
from toolkit.reports.gate_text import GateContext
from toolkit.results.gate_inputs import INTERLEAVED, GateInput, gate_input

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from toolkit.results.rate_runs import RateSweep

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
    rate quantities too where both folders hold a rate sweep with an SLO (toolkit.reports.gate_rates). Bad input
    raises a ParamsError or ResultsError (one line), before any folder is read when it is in the arguments."""
    limits = split_limits(max_regression)
    allowance = allowance_given(between_runs)
    counts_as = Verdict(inconclusive)
    found = gate_input(list(folders), baseline, candidate)
    sweeps = _rate_sweeps(found, limits)
    rate_limits = _rate_limits(limits, sweeps)
    quantities = gated(limits.decode)
    if rate_limits and not limits.decode_named and not _share_decode(found, [q.name for q in quantities]):
        quantities = []  # sweeps without decode cells in common: a bare limit gates what both measured
    level = family_level(len(quantities) + len(rate_limits))
    names = [q.name for q in quantities]
    command, rounds = None, 0
    intervals: dict[str, Found] = {}
    if found.design == INTERLEAVED:
        intervals, rounds = _interleaved(found, names, level)
    elif names:
        intervals, command = _apart(found, names, level)
    context = GateContext(found.design, *found.labels, rounds, level, counts_as, command)
    judged = judge(intervals, quantities, limits.decode, allowance)
    if sweeps is not None:
        judged += _judge_rates(sweeps, rate_limits, level, allowance)
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
        params = RunDocument.load(folder).params or {}
        url = params.get("base_url")
        urls.append(str(url) if isinstance(url, str) and url.startswith("http") else f"URL_{side}")
    return f"{CONSOLE_SCRIPT} interleave --a-url {urls[0]} --b-url {urls[1]} --rounds 4 --out OUT"


def _rate_sweeps(found: GateInput, limits: Limits) -> tuple[RateSweep, RateSweep] | None:
    """Both sides' rate sweeps when a rate quantity may be gated; ParamsError or ResultsError, one line, where one
    is named and a side has no sweep or no SLO, or the sweeps were judged against different SLOs (a bare limit then
    gates none of them)."""
    from toolkit.results.rate_runs import has_rates, load_rate_sweep

    named = ", ".join(limits.rates)
    if found.design == INTERLEAVED or not (named or limits.bare is not None):
        if named:
            raise ParamsError(f"max-regression: {named}: gated between two folders that hold rate sweeps "
                              "(BASELINE CANDIDATE), not in an interleaved folder")  # fmt: skip
        return None
    folders = (found.baseline[1], found.candidate[1])
    if missing := [f for f in folders if not has_rates(f)]:
        if named:
            raise ResultsError(f"max-regression: {named}: {missing[0]} holds no rate sweep (no rates/sweep.json)")
        return None
    sweeps = (load_rate_sweep(folders[0]), load_rate_sweep(folders[1]))
    if classed := [s for s in sweeps if s.sweep.get("classes")]:
        if named or not _share_decode(found, [q.name for q in gated(limits.decode)]):
            raise ResultsError(f"gate: {classed[0].folder}'s rate sweep has traffic classes, each judged against "
                               "its own SLO: the gate does not judge class sweeps yet; compare them "
                               "(vllm-speedtest compare), or gate the runs' decode cells")  # fmt: skip
        return None  # a bare limit gates the decode cells both runs measured
    if unjudged := [s for s in sweeps if not has_limits(s.level)]:
        if named:
            raise ResultsError(f"max-regression: {named}: {unjudged[0].folder}'s rate sweep has no SLO "
                               "(slo_ttft_ms, slo_tpot_ms, slo_e2e_ms): no request meets or fails one")  # fmt: skip
        return None
    if sweeps[0].level != sweeps[1].level:
        if not named:  # a bare limit gates the rate quantities only where one SLO judged both sweeps
            return None
        raise ResultsError(f"gate: the rate sweeps were judged against different SLOs ({level_text(sweeps[0].level)}"
                           f"; {level_text(sweeps[1].level)}); judge both against one")  # fmt: skip
    return sweeps


def _rate_limits(limits: Limits, sweeps: tuple[RateSweep, RateSweep] | None) -> dict[str, float]:
    """The rate quantities gated: those named, and with a bare limit goodput and (where both sweeps searched)
    the highest rate meeting the SLO."""
    if sweeps is None:
        return {}
    wanted = dict(limits.rates)
    if limits.bare is not None:
        wanted.setdefault("goodput", limits.bare)
        if all(s.search is not None for s in sweeps):
            wanted.setdefault("slo_rate", limits.bare)
    return {name: wanted[name] for name in RATE_QUANTITIES if name in wanted}


def _share_decode(found: GateInput, names: list[str]) -> bool:
    """Whether the two folders measured apart have a decode cell in common (run undisturbed)."""
    from toolkit.results.runs import load_run

    if not names:
        return False
    sides = [decode_values(load_run(side[1])[0], names) for side in (found.baseline, found.candidate)]
    return bool(set(sides[0]) & set(sides[1]))


def _judge_rates(sweeps: tuple[RateSweep, RateSweep], limits: dict[str, float], level: float,
                 allowance: BetweenRuns | None) -> list[Judged]:  # fmt: skip
    """The rate quantities' verdicts; ResultsError, one line, when the sweeps share no offered rate."""
    base, cand = sweeps
    out = []
    if "goodput" in limits:
        a, b = (rate_goodputs(s.steps.to_dict("records")) for s in sweeps)
        try:
            found = goodput_ratio(a, b, level)
        except ValueError:
            raise ResultsError(f"gate: the rate sweeps share no offered rate with a goodput ({rate_list(sorted(a))} "
                               f"and {rate_list(sorted(b))} req/s); nothing to compare") from None  # fmt: skip
        out.append(judge_goodput(found, limits["goodput"], allowance))
    if "slo_rate" in limits:
        out.append(judge_slo_rate(bracket(base.search), bracket(cand.search), limits["slo_rate"], allowance))
    return out
