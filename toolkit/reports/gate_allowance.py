"""`gate allowance`: a between-run allowance measured by repeated A/A runs of one configuration, and its file.

Each run's overall value of a gated quantity is the one the gate gives a side (toolkit.reports.gate_ratios: the
geometric mean over the decode cells every run measured undisturbed; goodput, where every run holds a rate sweep
with an SLO: the geometric mean over the offered rates every run met requests at); the allowance is the 95 %
prediction bound of the ratio of two new runs measured apart (toolkit.method.allowance). The file (`--save FILE`)
is a typed, versioned document (stamped and scrubbed as every document of the toolkit,
toolkit.results.store.write_json_atomic; read back validated, one line when it cannot be) that
`gate --between-runs FILE` widens each quantity by.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolkit import CONSOLE_SCRIPT, __version__
from toolkit.base.errors import ParamsError, ResultsError
from toolkit.method.allowance import ALLOWANCE_LEVEL, MIN_RUNS, runs_spread
from toolkit.method.gate import QUANTITIES, percent
from toolkit.reports.gate_rates import RATE_QUANTITIES, has_limits, level_text, same_rate
from toolkit.reports.gate_ratios import BetweenRuns, decode_values, overall_logs
from toolkit.results.store import read_json, write_json_atomic
from toolkit.results.validation import validated

GOODPUT = "goodput"  # the one rate quantity with an allowance: a search's bracket has no value to spread
_HINT = f"give a percentage (10%) or the file of `{CONSOLE_SCRIPT} gate allowance RUN RUN RUN --save FILE`"


class AllowanceRun(BaseModel):
    """One A/A run: its folder as given, its run id and start time when run.json has them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    run_id: str | None = None
    started_at: str | None = None


class AllowanceQuantity(BaseModel):
    """One quantity over the runs: the sample sd of their log values (k − 1 dof), k, the cells (goodput: the offered
    rates), the allowance."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str
    title: str
    sd: float = Field(ge=0)  # of the runs' log overall values
    runs: int = Field(ge=MIN_RUNS)
    cells: int = Field(ge=1)  # the decode cells (goodput: offered rates) every run measured (the overall value's)
    level: float = Field(gt=0, lt=1)  # of the prediction bound
    allowance: float = Field(ge=0)  # a fraction: the ratio of two runs apart lies within [1/(1+a), 1+a]

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in (*QUANTITIES, GOODPUT):
            raise ValueError(f"should be one of {', '.join((*QUANTITIES, GOODPUT))}")
        return value


class AllowanceDocument(BaseModel):
    """gate-allowance.json."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: Literal["gate-allowance"] = "gate-allowance"
    toolkit_version: str = __version__
    created_at: str
    runs: list[AllowanceRun] = Field(min_length=MIN_RUNS)
    quantities: list[AllowanceQuantity]
    schema_version: int | None = None  # stamped on save

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.model_dump(mode="json"))

    @classmethod
    def load(cls, path: str | Path) -> AllowanceDocument:
        """The file read back; ResultsError, one line, when it is missing, not JSON, of a newer schema version or
        damaged (naming the field)."""
        path = Path(path)
        if not path.is_file():
            raise ResultsError(f"between-runs: {path}: no such file; {_HINT}")
        try:
            data = read_json(path)
        except ResultsError as exc:
            raise ResultsError(f"between-runs: {exc.line}") from None
        document = validated(cls, data, lambda loc: f"between-runs: {path}")
        names = [q.name for q in document.quantities]
        if len(set(names)) != len(names):
            raise ResultsError(f"between-runs: {path}: quantities: a quantity given twice ({', '.join(names)})")
        if any(q.runs != len(document.runs) for q in document.quantities):
            raise ResultsError(f"between-runs: {path}: quantities: a quantity's runs differ from the "
                               f"{len(document.runs)} runs listed; the file is damaged")  # fmt: skip
        return document

    def between_runs(self, shown: str) -> BetweenRuns:
        """The allowances the gate widens by, `shown` the file as its line names it."""
        return BetweenRuns({q.name: q.allowance for q in self.quantities}, shown, len(self.runs))


def measure_allowance(folders: Sequence[str], now: datetime | None = None) -> AllowanceDocument:
    """The allowance of each gated quantity from three or more run folders of one configuration measured apart:
    the decode quantities, and goodput where every run holds a rate sweep with an SLO; ParamsError or ResultsError,
    one line, for fewer folders, another configuration, nothing measured in common."""
    from toolkit.results.gate_inputs import allowance_runs

    runs = allowance_runs(folders)
    paths = [Path(run.path) for run in runs]
    goodput = _goodput_logs(paths)
    try:
        found = _decode_logs(paths)
    except ResultsError:
        if goodput is None:
            raise
        found = {}  # rate sweeps alone: their goodput
    if goodput is not None:
        found[GOODPUT] = goodput
    quantities = []
    for name, (logs, cells) in found.items():
        spread = runs_spread([math.exp(x) for x in logs], ALLOWANCE_LEVEL)
        title = RATE_QUANTITIES[name].title if name == GOODPUT else QUANTITIES[name].title
        quantities.append(AllowanceQuantity(name=name, title=title, sd=spread.sd, runs=spread.runs, cells=cells,
                                            level=spread.level, allowance=spread.allowance))  # fmt: skip
    if not quantities:
        raise ResultsError(f"gate allowance: the {len(runs)} runs measured no gated quantity in the cells they share")
    stamp = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    listed = [AllowanceRun(path=str(r.path), run_id=r.run_id, started_at=r.started_at) for r in runs]
    return AllowanceDocument(created_at=stamp, runs=listed, quantities=quantities)


def _decode_logs(paths: Sequence[Path]) -> dict[str, tuple[list[float], int]]:
    """Each decode quantity's overall log value per run over the cells they all share (ResultsError: none)."""
    from toolkit.results.runs import load_run
    from toolkit.results.store import RESULTS_FILE

    if missing := [p for p in paths if not (p / RESULTS_FILE).is_file()]:
        raise ResultsError(f"gate allowance: {missing[0]} holds no decode cell ({RESULTS_FILE})")
    names = list(QUANTITIES)
    sides = [decode_values(load_run(p)[0], names) for p in paths]
    return overall_logs(sides, names, f"the {len(paths)} runs")


def _goodput_logs(paths: Sequence[Path]) -> tuple[list[float], int] | None:
    """Each run's overall log goodput (the mean of its pooled logs over the offered rates where every run has a
    goodput above 0) and how many rates; None unless every run holds a rate sweep with an SLO and they share a
    rate. ParamsError, one line, when the sweeps were judged against different SLOs."""
    from toolkit.reports.gate_sweeps import sweep_goodputs
    from toolkit.results.rate_runs import has_rates, load_rate_sweep

    if not all(has_rates(p) for p in paths):
        return None
    sweeps = [load_rate_sweep(p) for p in paths]
    if not all(has_limits(s.level) for s in sweeps):
        return None
    if differ := [s for s in sweeps[1:] if s.level != sweeps[0].level]:
        raise ParamsError(f"gate allowance: {differ[0].folder}'s rate sweep was judged against another SLO "
                          f"({level_text(differ[0].level)}; {level_text(sweeps[0].level)}); give runs of one "
                          "configuration")  # fmt: skip
    each = [sweep_goodputs(s) for s in sweeps]
    rates = [r for r in each[0] if all(g.get(same_rate(r, g)) is not None for g in each)]
    if not rates:
        return None
    logs = [statistics.fmean(_log(g, r) for r in rates) for g in each]
    return logs, len(rates)


def _log(goodputs: dict[float, tuple[float, float] | None], rate: float) -> float:
    found = goodputs[same_rate(rate, goodputs)]
    assert found is not None  # the rates every run has a goodput at
    return found[0]


def allowance_lines(document: AllowanceDocument) -> list[str]:
    """`total tok/s: runs spread 4.1 % (sd of log, 4 runs, 2 cells); allowance ±13.2 % between two runs measured
    apart (95 %)`, one per quantity."""
    return [
        f"{q.title}: runs spread {100 * q.sd:.1f} % (sd of log, {q.runs} runs, {q.cells} "
        f"{'rate' if q.name == GOODPUT else 'cell'}{'s' * (q.cells != 1)}); "
        f"allowance ±{100 * q.allowance:.1f} % between two runs measured apart ({100 * q.level:g} %)"
        for q in document.quantities
    ]


def between_runs(text: str | None) -> BetweenRuns | None:
    """`--between-runs`: a percentage (`10%`: every quantity alike, the rate quantities too) or the file of
    `gate allowance --save` (each quantity its own); None when not given. ParamsError or ResultsError, one line,
    for anything else."""
    if not text:
        return None
    shown = text.strip()
    if shown.endswith("%"):
        return BetweenRuns(dict.fromkeys([*QUANTITIES, *RATE_QUANTITIES], percent(shown, "between-runs")))
    path = Path(shown)
    if path.exists() or "/" in shown or shown.lower().endswith(".json"):
        return AllowanceDocument.load(path).between_runs(shown)
    try:
        return BetweenRuns(dict.fromkeys([*QUANTITIES, *RATE_QUANTITIES], percent(shown, "between-runs")))
    except ParamsError as exc:
        raise ParamsError(f"{exc.line}; or {_HINT.removeprefix('give a percentage (10%) or ')}") from None
