"""The suite's time budget (tests/budget.toml), held at the end of every run.

Each test's call (its body, not its fixtures) has a ceiling by tier, or a named exception with its measured cost;
a call past twice its ceiling fails, naming both, so a new slow test is seen by its author. At the end of a run the
tier's wall time is printed against its budget (`--budget-tier`, which the Makefile gives each tier), with the
ten slowest calls and the ten slowest fixture set-ups (a shared vLLM or pipeline is paid in one set-up), and the
ten tests that used the most CPU: on two cores the offline tier is bound by CPU, not by any one test's wall time, and
most of its CPU is spent in subprocesses (notebook kernels, toolkit commands) that a call's duration does not show.
"""

from __future__ import annotations

import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from toolkit.jupyter import kernel_forks
from toolkit.jupyter.kernel_zygote import cpu_seconds as own_and_ended_cpu_seconds

BUDGET_FILE = Path(__file__).with_name("budget.toml")
TIERS = ("unit", "component", "process", "engine")
SHOWN = 10
CPU_PROPERTY = "cpu_s"  # a set-up's or call's CPU seconds, in its report's user_properties (xdist carries them)


@dataclass(frozen=True)
class Budget:
    """tests/budget.toml: seconds per tier run, per test call by tier, the named exceptions, and the tests (or test
    files) the fast tier leaves to the offline tier."""

    tiers: dict[str, float]
    ceilings: dict[str, float]
    exceptions: dict[str, float]
    outside_fast: frozenset[str] = frozenset()

    @classmethod
    def load(cls, path: Path = BUDGET_FILE) -> Budget:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        exceptions = {name: float(entry["ceiling_s"]) for name, entry in data.get("exceptions", {}).items()}
        return cls(
            {k: float(v) for k, v in data["tiers"].items()},
            {k: float(v) for k, v in data["ceilings"].items()},
            exceptions,
            frozenset(data.get("outside_fast", {})),
        )

    def in_fast_tier(self, nodeid: str) -> bool:
        """Whether the fast tier runs the test: not named in `outside_fast` (by its id, its function's, or its file)."""
        return not {nodeid, nodeid.split("[", 1)[0], nodeid.split("::", 1)[0]} & self.outside_fast

    def ceiling_s(self, nodeid: str, tier: str) -> float:
        """The test's own ceiling (an exception names a test, or all its parameters), else its tier's."""
        named = self.exceptions.get(nodeid, self.exceptions.get(nodeid.split("[", 1)[0]))
        return self.ceilings[tier] if named is None else named


# When the engine tier passed its gate (time.monotonic(); tests/conftest.py): its time counts from there, what came
# before (collecting and waiting beside the offline tier, its servers starting meanwhile) is shown apart.
GATE_PASSED_KEY = pytest.StashKey[float]()


@dataclass
class Ledger:
    """What a run spent: each test's call and set-up, by node id; the run's start."""

    started: float = field(default_factory=time.monotonic)
    calls: dict[str, float] = field(default_factory=dict)
    setups: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # set-up and call together


def cpu_seconds() -> float:
    """CPU seconds of this process and of the subprocesses it has waited for (theirs that they waited for too), and
    of its kernel zygote with the kernels that one has reaped (toolkit.jupyter.kernel_forks)."""
    return own_and_ended_cpu_seconds() + kernel_forks.cpu_seconds()


CPU_SPENT_KEY = pytest.StashKey[dict[str, float]]()


def tier_of(item: pytest.Item) -> str:
    return next((mark.name for mark in item.iter_markers() if mark.name in TIERS), "unit")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--budget-tier", default=None, help="the tier of tests/budget.toml this run is held to")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(BudgetPlugin(Budget.load(), config.getoption("--budget-tier")), "time-budget")


class BudgetPlugin:
    """Holds the run to its budget: fails calls past twice their ceiling, sums up at the end."""

    def __init__(self, budget: Budget, tier: str | None) -> None:
        self.budget, self.tier, self.ledger = budget, tier, Ledger()

    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """The fast tier leaves the tests named in `outside_fast` to the offline tier (reported as deselected)."""
        if self.tier != "fast":
            return
        left = [item for item in items if not self.budget.in_fast_tier(item.nodeid)]
        if left:
            config.hook.pytest_deselected(items=left)
            items[:] = [item for item in items if self.budget.in_fast_tier(item.nodeid)]

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Iterator[None]:
        yield from self._count_cpu(item, "setup")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Iterator[None]:
        yield from self._count_cpu(item, "call")

    @staticmethod
    def _count_cpu(item: pytest.Item, when: str) -> Iterator[None]:
        """The phase's CPU: the worker's own (its threads included, a session fixture's server among them) and that
        of the subprocesses that ended within it. A subprocess still running when the phase ends is not counted."""
        before = cpu_seconds()
        yield
        item.stash.setdefault(CPU_SPENT_KEY, {})[when] = cpu_seconds() - before

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
        """A call past twice its ceiling fails (on the worker that ran it, so xdist reports it so); the set-up's and
        the call's CPU go into their reports."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        spent = item.stash.get(CPU_SPENT_KEY, {}).get(report.when)
        if spent is not None:  # a new list: the report's is the item's own, which later reports copy
            report.user_properties = [*report.user_properties, (CPU_PROPERTY, spent)]
        if report.when != "call" or not report.passed:
            return
        ceiling = self.budget.ceiling_s(item.nodeid, tier_of(item))
        if report.duration > 2 * ceiling:
            report.outcome = "failed"
            report.longrepr = (
                f"{item.nodeid} took {report.duration:.1f} s, more than twice its ceiling of {ceiling:g} s "
                f"({tier_of(item)} tier, tests/budget.toml): make it cheaper, or name it an exception with its cost"
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.ledger.calls[report.nodeid] = report.duration
        elif report.when == "setup":
            self.ledger.setups[report.nodeid] = report.duration
        for name, value in report.user_properties:
            if name == CPU_PROPERTY:
                self.ledger.cpu[report.nodeid] = self.ledger.cpu.get(report.nodeid, 0.0) + float(value)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):  # an xdist worker: the controller sums up
            return
        since = config.stash.get(GATE_PASSED_KEY, self.ledger.started)
        waited, spent, write = since - self.ledger.started, time.monotonic() - since, terminalreporter.write_line
        terminalreporter.section("time budget (tests/budget.toml)")
        count = len(self.ledger.calls)
        if self.tier in self.budget.tiers:
            allowed = self.budget.tiers[self.tier]
            verdict = "within it" if spent <= allowed else "OVER it"
            write(f"{self.tier} tier: {spent:.0f} s of its {allowed:g} s budget ({verdict}), {count} tests")
            if waited:
                write(
                    f"(after {waited:.0f} s collecting and waiting for the offline tier, its servers starting "
                    "meanwhile)"
                )
        else:
            write(f"{spent:.0f} s, {count} tests (no --budget-tier: no tier budget applies)")
        for title, times in (("slowest calls", self.ledger.calls), ("slowest set-ups", self.ledger.setups)):
            write(f"{title}:")
            for nodeid, seconds in sorted(times.items(), key=lambda kv: -kv[1])[:SHOWN]:
                write(f"  {seconds:7.1f} s  {nodeid}")
        if self.ledger.cpu:
            write(
                f"most CPU ({sum(self.ledger.cpu.values()):.0f} CPU-s in all: each test's set-up and call, in its "
                "process and the subprocesses that ended in them):"
            )
            for nodeid, seconds in sorted(self.ledger.cpu.items(), key=lambda kv: -kv[1])[:SHOWN]:
                write(f"  {seconds:7.1f} CPU-s  {nodeid}")
