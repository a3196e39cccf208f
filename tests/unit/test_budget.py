"""The suite's time budget (tests/budget.py): a call past twice its ceiling fails naming both, an exception raises a
test's ceiling, and the summary sets the tier's time against its budget and lists the slowest calls and the tests
that used the most CPU (their subprocesses' included)."""

from __future__ import annotations

import re
import subprocess
import time
import types
from pathlib import Path
from typing import Any

import pytest

from tests.budget import BUDGET_FILE, CPU_PROPERTY, GATE_PASSED_KEY, Budget, BudgetPlugin

BUDGET = Budget(
    tiers={"fast": 60.0, "engine": 540.0}, ceilings={"unit": 5.0, "process": 30.0}, exceptions={"t.py::slow": 100.0}
)


def item(nodeid: str, tier: str) -> Any:
    return types.SimpleNamespace(
        nodeid=nodeid, iter_markers=lambda: [types.SimpleNamespace(name=tier)], stash=pytest.Stash()
    )


def judged(nodeid: str, tier: str, seconds: float, when: str = "call") -> pytest.TestReport:
    """The report of a passed phase after the plugin's hook wrapper has seen it."""
    report = pytest.TestReport(nodeid, ("t.py", 1, nodeid), {}, "passed", None, when, duration=seconds)
    hook = BudgetPlugin(BUDGET, "fast").pytest_runtest_makereport(item(nodeid, tier), None)  # type: ignore[arg-type]
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(types.SimpleNamespace(get_result=lambda: report))
    return report


def test_a_call_past_twice_its_ceiling_fails_naming_both() -> None:
    assert judged("t.py::quick", "unit", 9.9).passed
    late = judged("t.py::quick", "unit", 10.1)
    assert late.failed and "took 10.1 s, more than twice its ceiling of 5 s (unit tier" in str(late.longrepr)
    assert judged("t.py::kernel", "process", 59).passed and judged("t.py::kernel", "process", 61).failed


def test_only_the_call_is_held_and_an_exception_raises_the_ceiling() -> None:
    assert judged("t.py::quick", "unit", 300, when="setup").passed  # a shared fixture's set-up is shown apart
    assert judged("t.py::slow", "unit", 199).passed and judged("t.py::slow", "unit", 201).failed
    assert judged("t.py::slow[1000]", "unit", 199).passed  # an exception covers every parameter of its test


def test_the_summary_sets_the_tier_against_its_budget(capsys: pytest.CaptureFixture[str]) -> None:
    plugin = BudgetPlugin(BUDGET, "fast")
    for name, seconds in (("a", 1.5), ("b", 7.25)):
        plugin.pytest_runtest_logreport(pytest.TestReport(name, ("t.py", 1, name), {}, "passed", None, "call",
                                                          duration=seconds))  # fmt: skip
    plugin.ledger.started -= 75  # the run began 75 s ago
    lines: list[str] = []
    reporter = types.SimpleNamespace(section=lambda title: lines.append(f"== {title}"), write_line=lines.append)
    plugin.pytest_terminal_summary(reporter, types.SimpleNamespace(stash=pytest.Stash()))  # type: ignore[arg-type]
    assert lines[1] == "fast tier: 75 s of its 60 s budget (OVER it), 2 tests"
    assert lines[2:5] == ["slowest calls:", "      7.2 s  b", "      1.5 s  a"]


# A shell that counts to 300,000 (about 0.3 CPU-s here), then prints its own user and system time (`times`).
CHILD = "i=0; while ((i<300000)); do ((i++)); done; times"


def shell_cpu_s(times: str) -> float:
    """The shell's own user + system seconds from the first line of `times` (e.g. `0m0.276s 0m0.004s`)."""
    return sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", times.splitlines()[0]))


def test_a_calls_cpu_counts_its_own_and_its_ended_subprocesses_and_the_summary_lists_the_most() -> None:
    """A kernel's or a toolkit command's CPU is the test's: a call that spends a subprocess's CPU (as the subprocess
    itself counts it) and 0.2 CPU-s in its own process reports at least both; the summary sums set-up and call."""
    plugin = BudgetPlugin(BUDGET, "fast")
    busy = item("t.py::busy", "process")
    wrapper = plugin.pytest_runtest_call(busy)  # type: ignore[arg-type]
    next(wrapper)
    child = shell_cpu_s(subprocess.run(["bash", "-c", CHILD], capture_output=True, text=True, check=True).stdout)
    own = time.process_time()
    while time.process_time() - own < 0.2:
        pass
    with pytest.raises(StopIteration):
        wrapper.send(None)
    report = pytest.TestReport("t.py::busy", ("t.py", 1, "busy"), {}, "passed", None, "call", duration=1.0)
    hook = plugin.pytest_runtest_makereport(busy, None)  # type: ignore[arg-type]
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(types.SimpleNamespace(get_result=lambda: report))
    ((name, spent),) = report.user_properties
    assert name == CPU_PROPERTY and child > 0.05 and child + 0.2 <= spent < child + 0.2 + 1.0

    summary = BudgetPlugin(BUDGET, "fast")
    for nodeid, when, cpu in (("t.py::a", "setup", 2.0), ("t.py::a", "call", 1.5), ("t.py::b", "call", 9.0)):
        summary.pytest_runtest_logreport(pytest.TestReport(nodeid, ("t.py", 1, nodeid), {}, "passed", None, when,
                                                           user_properties=[(CPU_PROPERTY, cpu)]))  # fmt: skip
    lines: list[str] = []
    reporter = types.SimpleNamespace(section=lambda title: lines.append(f"== {title}"), write_line=lines.append)
    summary.pytest_terminal_summary(reporter, types.SimpleNamespace(stash=pytest.Stash()))  # type: ignore[arg-type]
    most = lines.index(next(line for line in lines if line.startswith("most CPU")))
    assert lines[most].startswith("most CPU (12 CPU-s in all")
    assert lines[most + 1 :] == ["      9.0 CPU-s  t.py::b", "      3.5 CPU-s  t.py::a"]


def test_the_engine_tiers_wait_for_the_offline_tier_is_kept_apart_from_its_time() -> None:
    """make test starts the engine tier beside the offline tier (tests/conftest.py's gate): its time counts from the
    gate; its collection and its wait, beside the offline tier, are not its time."""
    plugin = BudgetPlugin(BUDGET, "engine")
    plugin.ledger.started -= 900  # began 900 s ago, 400 of them collecting and waiting at the gate
    stash = pytest.Stash()
    stash[GATE_PASSED_KEY] = time.monotonic() - 500
    lines: list[str] = []
    reporter = types.SimpleNamespace(section=lambda title: lines.append(f"== {title}"), write_line=lines.append)
    plugin.pytest_terminal_summary(reporter, types.SimpleNamespace(stash=stash))  # type: ignore[arg-type]
    assert lines[1:3] == [
        f"engine tier: 500 s of its {BUDGET.tiers['engine']:g} s budget (within it), 0 tests",
        "(after 400 s collecting and waiting for the offline tier, its servers starting meanwhile)",
    ]


def test_the_budget_file_names_every_tier_and_real_tests(request: pytest.FixtureRequest) -> None:
    budget = Budget.load(BUDGET_FILE)
    root = Path(str(request.config.rootpath))
    named = set(re.findall(r"--budget-tier (\w+)", (root / "Makefile").read_text()))  # each tier the Makefile runs
    assert set(budget.tiers) == named == {"fast", "offline", "engine", "ray"}
    assert set(budget.ceilings) == {"unit", "component", "process", "engine"}
    for nodeid, ceiling in budget.exceptions.items():
        path, _, name = nodeid.partition("::")
        assert (root / path).is_file() and f"def {name.split('[')[0]}(" in (root / path).read_text(), nodeid
        assert ceiling > min(budget.ceilings.values())  # an exception raises a ceiling


def test_the_fast_tier_leaves_the_named_tests_to_the_offline_tier() -> None:
    """`outside_fast` names a test (all its parameters), one parameter, or a file; the fast tier deselects those and
    no other, and every name in tests/budget.toml still names a test that exists."""
    budget = Budget({}, {}, {}, frozenset({"a.py::slow", "b.py::one[2]", "c.py"}))
    assert not budget.in_fast_tier("a.py::slow") and not budget.in_fast_tier("a.py::slow[x]")
    assert not budget.in_fast_tier("b.py::one[2]") and budget.in_fast_tier("b.py::one[1]")
    assert not budget.in_fast_tier("c.py::any") and budget.in_fast_tier("a.py::slower")
    items = [item(n, "unit") for n in ("a.py::slow[x]", "a.py::quick", "c.py::t")]
    deselected: list[Any] = []
    config = types.SimpleNamespace(hook=types.SimpleNamespace(pytest_deselected=lambda items: deselected.extend(items)))
    for tier, kept in (("offline", 3), ("fast", 1)):
        run = list(items)
        BudgetPlugin(budget, tier).pytest_collection_modifyitems(config, run)  # type: ignore[arg-type]
        assert len(run) == kept
    assert [i.nodeid for i in run] == ["a.py::quick"] and [i.nodeid for i in deselected] == ["a.py::slow[x]", "c.py::t"]
    root = BUDGET_FILE.parents[1]
    for name in Budget.load().outside_fast:
        path, _, function = name.partition("::")
        assert (root / path).is_file(), name
        assert not function or f"def {function}(" in (root / path).read_text(), name
