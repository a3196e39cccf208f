"""The method's pages quote what calibration printed: each kind's coverage range over seeds 1-3 at every level, from
the results files `benchmarks/calibration.py --windows-only --json` wrote, appears word for word in the pages that
state it. Rerunning calibration without updating the pages fails here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = [REPO / "benchmarks" / "results" / f"calibration-windows-seed{seed}.json" for seed in (1, 2, 3)]
LEVELS = ("independent", "ar1@0.25", "ar1@0.5", "ar1@0.7", "drift")
GROUPS = {  # kinds quoted together, and the pages that quote them
    "window": (("total_tok_s", "per_request_tok_s", "tbt_ms"), ("docs/method/spread.md",)),
    "ratio": (("ratio", "ratio_per_request"), ("docs/method/spread.md",)),
    "drift_ratio": (("drift_ratio",), ("docs/method/spread.md", "docs/method/drift.md")),
}


def coverages(kinds: tuple[str, ...], level: str) -> list[float]:
    """The kinds' coverage at one level on every seed's results file."""
    found = []
    for path in RESULTS:
        for entry in json.loads(path.read_text(encoding="utf-8"))["seeds"].values():
            found += [entry["levels"][level]["kinds"][kind]["coverage"] for kind in kinds]
    return found


def quoted(values: list[float]) -> str:
    """A range as the pages print it: ``0.954–0.966``."""
    return f"{min(values):.3f}–{max(values):.3f}"


@pytest.mark.parametrize("group", GROUPS)
def test_the_pages_quote_each_levels_coverage_range_as_calibration_printed_it(group: str) -> None:
    kinds, pages = GROUPS[group]
    ranges = [quoted(coverages(kinds, level)) for level in LEVELS]
    for page in pages:
        text = " ".join((REPO / page).read_text(encoding="utf-8").split())  # lines joined as the page reads
        assert [r for r in ranges if r not in text] == [], (page, ranges)


def test_the_repeat_interval_is_quoted_over_every_level() -> None:
    values = [c for level in LEVELS for c in coverages(("repeat",), level)]
    assert quoted(values) in " ".join((REPO / "docs/method/spread.md").read_text(encoding="utf-8").split())


def test_a_range_prints_as_the_pages_print_it() -> None:
    assert quoted([0.9538, 0.9661, 0.957]) == "0.954–0.966"
