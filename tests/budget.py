"""The suite's time budget (tests/budget.toml), held at the end of every run.

Each test's call (its body, not its fixtures) has a ceiling by tier, or a named exception with its measured cost;
a call past twice its ceiling fails, naming both, so a new slow test is seen by its author. At the end of a run the
tier's wall time is printed against its budget (`--budget-tier`, which the Makefile gives each tier), with the
ten slowest calls and the ten slowest fixture set-ups (a shared vLLM or pipeline is paid in one set-up).
"""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BUDGET_FILE = Path(__file__).with_name("budget.toml")
TIERS = ("unit", "component", "process", "engine")
SHOWN = 10


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
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
        """A call past twice its ceiling fails (on the worker that ran it, so xdist reports it so)."""
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
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
