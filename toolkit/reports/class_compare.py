"""Class sweeps of several runs side by side: each class's TTFT at each common offered rate, run by run, with each
run's scheduling policy where its launch was recorded (the priority comparison of issue 47: the same classes on an
fcfs server and on one run with `--scheduling-policy priority`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.loadgen.images import DEFAULT_SIZE
from toolkit.method.goodput import CLASS_COLUMN, STEADY_TRIM, percentile_of, request_latencies, steady_mask
from toolkit.method.percentile_ratio import percentile_ratio_interval
from toolkit.method.quantile_bounds import QuantileBounds, quantile_bounds
from toolkit.reports import rate_tables
from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import bounds_note, format_bounded, format_ms
from toolkit.reports.tables import markdown_table
from toolkit.results.documents.server import read_server_record
from toolkit.results.documents.sweep import SweepDocument
from toolkit.results.rate_runs import RateSweep

__all__ = [
    "CLASS_BOUNDS_NOTE",
    "CLASS_TTFT_CAPTION",
    "QUANTILE",
    "class_ttft_comparison",
    "images_line",
    "rates_markdown",
    "run_policies",
    "scheduling_policy",
]

QUANTILE = 90.0  # the TTFT percentile compared, as the class table and benchmarks/class_priority.py show it
CLASS_TTFT_CAPTION = (
    "Each traffic class's TTFT p90 (from the scheduled arrival, over its steady requests at that offered rate, the "
    "rate's steps pooled) run by run, with each run's scheduling policy where its launch was recorded; ratio: the "
    "second run's over the first's, in brackets its 95 % interval (a bootstrap of both runs' requests, from 36 a "
    "side; it holds the requests' noise, not a change of the machine between the runs: for that, run the two in "
    "alternating rounds, benchmarks/class_priority.py)"
)
CLASS_BOUNDS_NOTE = bounds_note(QUANTILE).capitalize() + "."  # under the table: what its brackets mean
_POLICY = re.compile(r"--scheduling-policy[= ]+(\S+)")


def scheduling_policy(command: str | None) -> str | None:
    """The vLLM scheduling policy of a recorded launch command (vLLM's default, fcfs, when it names none); None when
    no launch was recorded (a server found running)."""
    if command is None:
        return None
    found = _POLICY.search(command)
    return found.group(1).strip("'\"") if found else "fcfs"


def run_policies(sweeps: Mapping[str, RateSweep]) -> dict[str, str | None]:
    """Each run's scheduling policy, from the launch its folder recorded (server.json; None: not recorded)."""
    return {label: scheduling_policy(_command(s.folder)) for label, s in sweeps.items()}


Found = tuple[float | None, QuantileBounds, pd.Series]  # a class's TTFT percentile, its bounds, its TTFTs


def _class_ttft(sweep: RateSweep) -> dict[tuple[str, float], Found]:
    """(class, offered rate) -> the TTFT percentile of the class's steady, completed requests at that rate, its
    95 % distribution-free bounds, and those requests' TTFTs."""
    records = sweep.records
    if CLASS_COLUMN not in records or not len(records):
        return {}
    measured = set(sweep.steps["step"])  # not the cold controls
    trim = float(STEADY_TRIM if sweep.sweep.steady_trim is None else sweep.sweep.steady_trim)
    parts = [part[steady_mask(part, trim)] for step, part in records.groupby("step") if step in measured]
    if not parts:
        return {}
    steady = pd.concat(parts)
    latencies = request_latencies(steady)
    ttft = latencies.loc[latencies["ok"], "ttft_sched_ms"]
    keys = steady.loc[ttft.index, [CLASS_COLUMN, "offered_rate"]]
    found: dict[tuple[str, float], Found] = {}
    for (name, rate), group in ttft.groupby([keys[CLASS_COLUMN], keys["offered_rate"]]):
        found[(str(name), float(rate))] = percentile_of(group, QUANTILE), quantile_bounds(group, QUANTILE), group
    return found


def class_ttft_comparison(
    sweeps: Mapping[str, RateSweep], policies: Mapping[str, str | None] | None = None
) -> pd.DataFrame | None:
    """Display strings: one row per class the runs share and offered rate they share, each run's TTFT p90 with its
    95 % bounds (``812 ms [640, unbounded]``; its column named by its label and `policies`' entry), and with two
    runs the second's over the first's (the point values'); None unless
    two or more runs hold class sweeps with a class and a rate in common."""
    if len(sweeps) < 2:
        return None
    each = {label: _class_ttft(sweep) for label, sweep in sweeps.items()}
    if not all(each.values()):
        return None
    common = sorted(set.intersection(*(set(found) for found in each.values())), key=lambda k: (k[1], k[0]))
    if not common:
        return None
    order = list(dict.fromkeys(name for sweep in sweeps.values() for name in _class_order(sweep)))
    common.sort(key=lambda k: (order.index(k[0]) if k[0] in order else len(order), k[1]))
    priorities = {c.get("name"): c.get("priority") for s in sweeps.values() for c in s.sweep.classes or []}
    labels = list(sweeps)
    columns = [f"TTFT p90 · {label}" + (f" ({policy})" if (policy := (policies or {}).get(label)) else "")
               for label in labels]  # fmt: skip
    rows = []
    for name, rate in common:
        found = [each[label][(name, rate)] for label in labels]
        values = [value for value, _, _ in found]
        shown = [format_bounded(value, bounds.low, bounds.high, format_ms) for value, bounds, _ in found]
        priority = priorities.get(name)
        row = [inert(name), "-" if priority is None else str(priority), f"{rate:g}", *shown]
        if len(labels) == 2:
            row.append(_ratio_text(values, found[0][2], found[1][2]))
        rows.append(row)
    head = ["Class", "Priority", "Offered req/s", *columns, *(["Ratio"] if len(labels) == 2 else [])]
    return pd.DataFrame(rows, columns=head, dtype=object)


def _ratio_text(values: list[float | None], first: pd.Series, second: pd.Series) -> str:
    """``0.557×``, with ``[0.41, 0.78]`` (toolkit.method.percentile_ratio) where both runs have enough requests;
    ``-`` without both values."""
    a, b = values
    if not a or b is None:
        return "-"
    interval = percentile_ratio_interval(first, second, QUANTILE)
    return f"{b / a:.3f}×" + ("" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]")


def _class_order(sweep: RateSweep) -> list[str]:
    return [str(c.get("name")) for c in sweep.sweep.classes or []]


def sweep_summary(sweep: RateSweep) -> str:
    """The service level a sweep was judged against and the highest rate meeting it, one line; then the images
    each request carried, if any."""
    line = rate_tables.search_line(sweep.steps, sweep.search, sweep.sweep.search_precision, sweep.level.target)
    return f"{rate_tables.level_line(sweep.level, sweep.sweep.classes)} {line}{images_line(sweep.sweep)}"


def images_line(sweep: SweepDocument) -> str:
    """`` Each request carried 2 images of 224x224 pixels (synthetic PNGs).``; a class sweep whose classes carried
    different ones, each class's: `` Each request carried, by class: chat none; vision 1 image of 448x448 pixels
    (synthetic PNGs).``; "" without images."""
    own = (sweep.images or 0, sweep.image_size)
    each = {str(c.get("name")): _images(c, own) for c in sweep.classes or []}
    if len(set(each.values())) > 1:
        parts = [f"{inert(name)} {_images_text(*images)}" for name, images in each.items()]
        return f" Each request carried, by class: {'; '.join(parts)} (synthetic PNGs)."
    count, size = next(iter(each.values()), own)
    return f" Each request carried {_images_text(count, size)} (synthetic PNGs)." if count else ""


def _images(cls: Mapping[str, Any], sweep: tuple[int, str | None]) -> tuple[int, str | None]:
    """A class's images per request and their size: its own where sweep.json holds them, else the sweep's."""
    count = cls.get("images")
    count = sweep[0] if not isinstance(count, int) else count
    size = cls.get("image_size")
    return (count, size if isinstance(size, str) else sweep[1] or DEFAULT_SIZE) if count else (0, None)


def _images_text(count: int, size: str | None) -> str:
    """``2 images of 224x224 pixels``; ``none``."""
    return f"{count} image{'s' * (count > 1)} of {inert(size or DEFAULT_SIZE)} pixels" if count else "none"


def rates_markdown(sweeps: Mapping[str, RateSweep]) -> str:
    """compare.md's rate-sweep section: each run's service level and highest rate meeting it, then the traffic
    classes' TTFT run by run with each run's scheduling policy; "" unless two runs hold a rate sweep."""
    if len(sweeps) < 2:
        return ""
    out = ["## Open-loop rates"]
    out += [f"- **{inert(label)}**: {sweep_summary(sweep)}" for label, sweep in sweeps.items()]
    if (table := class_ttft_comparison(sweeps, run_policies(sweeps))) is not None:
        out += ["### Traffic classes, run by run", CLASS_TTFT_CAPTION + ".", markdown_table(table), CLASS_BOUNDS_NOTE]
    return "\n\n".join(out) + "\n"


def _command(folder: Path) -> str | None:
    """The command server.json recorded for the launch (None: the toolkit did not launch the server)."""
    record = read_server_record(folder)
    return None if record is None else record.command
