"""A gate's verdicts as text for CI (pure): one line per quantity, JUnit XML, the markdown step summary with a
link-free figure of the ratios against their allowed band, the cells and the rates behind a failure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from xml.etree import ElementTree

import pandas as pd

from toolkit.base.text import printable
from toolkit.method.gate import Verdict, exit_status, limit_text
from toolkit.reports.gate_rates import base_name, is_rate, quantity_text
from toolkit.reports.gate_ratios import CellRatio, Judged, RateRow
from toolkit.reports.markdown_text import inert
from toolkit.reports.tables import markdown_table

FIGURE_WIDTH = 48
SHOWN_CELLS = 10  # the cells that drove a failure shown per quantity, the worst first
RATE_VALUES = {"goodput": "goodput (req/s)", "slo_fraction": "fraction meeting the SLO"}
RATES_NOTE = ("Per offered rate both sweeps ran: each side's mean over the rate's steps (goodput for goodput, the "
              "fraction of requests meeting the SLO for the highest rate meeting it) and candidate / baseline; "
              "\"yes\" where a rate's own goodput ratio is beyond the allowed one.")  # fmt: skip


@dataclass(frozen=True)
class GateContext:
    """What the gate compared: the design (`interleaved` or `apart`), the labels, the rounds, the intervals'
    level, how an inconclusive verdict counts, and the command that would measure the pair interleaved."""

    design: str
    baseline: str
    candidate: str
    rounds: int
    level: float
    inconclusive: Verdict = Verdict.INCONCLUSIVE
    interleave_command: str | None = None


def ratio_text(value: float) -> str:
    return f"{value:.3f}×"


def gate_line(judged: Judged, context: GateContext) -> str:
    """`FAIL decode total tok/s: 0.942× [0.925, 0.959], allowed −3 %`, with why it is inconclusive, the rounds
    that would likely resolve it, or the between-run allowance it was widened by."""
    q = judged.quantity
    head = f"{judged.verdict.value.upper()} {quantity_text(q)}: "
    allowed = f"allowed {limit_text(judged.limit, q.higher_is_better)}"
    interval = judged.interval
    if interval is None:
        return f"{head}— ({judged.reason}), {allowed}"
    basis = f" {judged.basis}" if judged.basis else ""
    text = f"{head}{ratio_text(interval.ratio)} [{interval.low:.3f}, {interval.high:.3f}]{basis}, {allowed}"
    if judged.allowance is not None:
        text += f"; measured apart, widened by {allowance_text(judged)} between runs{stored_text(judged)}"
    if judged.reason:
        text += f"; {judged.reason}"
        if context.interleave_command and not is_rate(q):
            text += f"; to settle it, measure them interleaved: {context.interleave_command}"
    if judged.verdict is Verdict.INCONCLUSIVE and interval.rounds:
        more = judged.more_rounds
        text += (f"; about {more} more round{'s' if more != 1 else ''} would likely resolve it (80 %)" if more
                 else "; the ratio sits on the limit: more rounds would not likely resolve it")  # fmt: skip
    return text


def allowance_text(judged: Judged) -> str:
    """`±10 %` as given by hand, `±13.2 %` as measured and stored (one decimal: it is an estimate)."""
    value = 100 * (judged.allowance or 0.0)
    return f"±{value:.1f} %" if judged.allowance_stored is not None else f"±{value:g} %"


def stored_text(judged: Judged) -> str:
    """` (stored: FILE, 4 A/A runs)` for an allowance measured and stored, else nothing."""
    if judged.allowance_stored is None:
        return ""
    return f" (stored: {judged.allowance_stored}, {judged.allowance_runs} A/A runs)"


def gate_status(judged: Sequence[Judged], context: GateContext) -> int:
    return exit_status([j.verdict for j in judged], context.inconclusive)


def level_text(context: GateContext, count: int) -> str:
    """How the intervals were made, in a sentence."""
    design = (f"interleaved, {context.rounds} rounds paired" if context.design == "interleaved"
              else "two runs measured apart")  # fmt: skip
    family = f"95 % over the {count} quantities gated together, Bonferroni" if count > 1 else "95 %"
    return f"{design}; each interval at {100 * context.level:.4g} % ({family})"


def junit_xml(judged: Sequence[Judged], context: GateContext) -> str:
    """JUnit XML: one test case per gated quantity; a fail is a failure carrying its line, an inconclusive one is
    skipped (a failure with `--inconclusive fail`, a pass with `--inconclusive pass`)."""
    counted = [context.inconclusive if j.verdict is Verdict.INCONCLUSIVE else j.verdict for j in judged]
    suite = ElementTree.Element(
        "testsuite",
        name="vllm-speedtest gate",
        tests=str(len(judged)),
        failures=str(counted.count(Verdict.FAIL)),
        skipped=str(counted.count(Verdict.INCONCLUSIVE)),
        errors="0",
    )
    for j, counts in zip(judged, counted, strict=True):
        case = ElementTree.SubElement(suite, "testcase", classname="gate", name=quantity_text(j.quantity))
        line = printable(gate_line(j, context))
        if counts is Verdict.FAIL:
            ElementTree.SubElement(case, "failure", message=line, type=j.verdict.value).text = line
        elif counts is Verdict.INCONCLUSIVE:
            ElementTree.SubElement(case, "skipped", message=line)
        else:
            ElementTree.SubElement(case, "system-out").text = line
    root = ElementTree.Element("testsuites")
    root.append(suite)
    ElementTree.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(root, encoding="unicode") + "\n"


def figure(judged: Sequence[Judged]) -> str:
    """Each quantity's interval against its allowed ratio, as text: `[==●==]` the interval and its ratio, `|`
    the allowed ratio, `:` no change (1.00)."""
    shown = [j for j in judged if j.interval is not None]
    if not shown:
        return ""
    ends = [x for j in shown if j.interval for x in (j.interval.low, j.interval.high, j.bound)] + [1.0]
    low, high = min(ends), max(ends)
    pad = (high - low) * 0.05 or 0.05
    low, high = low - pad, high + pad
    width = max(len(quantity_text(j.quantity)) for j in shown) + 1

    def at(value: float) -> int:
        return min(FIGURE_WIDTH - 1, max(0, round((value - low) / (high - low) * (FIGURE_WIDTH - 1))))

    lines = []
    for j in shown:
        assert j.interval is not None
        row = ["·"] * FIGURE_WIDTH
        left, right = at(j.interval.low), at(j.interval.high)
        for i in range(left, right + 1):
            row[i] = "="
        row[at(1.0)] = ":"
        row[at(j.bound)] = "|"
        row[left], row[right] = "[", "]"
        row[at(j.interval.ratio)] = "●"
        lines.append(f"{quantity_text(j.quantity):<{width}}{''.join(row)}  {j.verdict.value}")
    scale = f"{low:.3f}×".ljust(FIGURE_WIDTH - len(f"{high:.3f}×")) + f"{high:.3f}×"
    lines.append(" " * width + scale)
    lines.append(" " * width + "[=●=] ratio and its interval   | allowed   : no change (1.00×)")
    return "\n".join(lines)


def driving_cells(judged: Judged) -> list[CellRatio]:
    """A failed quantity's cells whose own ratio is beyond the allowed one, the worst first."""
    worse = [c for c in judged.cell_ratios if math.isfinite(c.ratio) and judged.beyond(c.ratio)]
    return sorted(worse, key=lambda c: c.ratio, reverse=not judged.quantity.higher_is_better)[:SHOWN_CELLS]


def summary_markdown(judged: Sequence[Judged], context: GateContext) -> str:
    """The step summary: the verdict and exit status, the table, the figure, the cells that drove a failure."""
    status = gate_status(judged, context)
    counts = {v: sum(j.verdict is v for j in judged) for v in Verdict}
    overall = {0: "PASS", 1: "FAIL", 3: "INCONCLUSIVE"}[status]
    out = [
        f"# Regression gate: {inert(context.candidate)} / {inert(context.baseline)}",
        f"**{overall}** (exit {status}): {counts[Verdict.FAIL]} fail, {counts[Verdict.PASS]} pass, "
        f"{counts[Verdict.INCONCLUSIVE]} inconclusive. Overall ratio candidate / baseline per quantity, over "
        f"{_over_text(judged)}; {level_text(context, len(judged))}.",
    ]
    rows = [
        [
            j.verdict.value.upper(),
            quantity_text(j.quantity),
            ratio_text(j.interval.ratio) if j.interval else "—",
            f"[{j.interval.low:.3f}, {j.interval.high:.3f}]" if j.interval else "—",
            f"{limit_text(j.limit, j.quantity.higher_is_better)} ({ratio_text(j.bound)})",
            f"{j.cells:,}",
            inert(_note(j, context)),
        ]
        for j in judged
    ]
    columns = ["Verdict", "Quantity", "Ratio", "Interval", "Allowed", "Cells", "Note"]
    out.append(markdown_table(pd.DataFrame(rows, columns=columns, dtype=object)))
    if text := figure(judged):
        out += ["## Ratios against the allowed band", f"```text\n{text}\n```"]
    failed = [(j, cells) for j in judged if j.verdict is Verdict.FAIL and (cells := driving_cells(j))]
    if failed:
        out += ["## Cells that drove a failure", "Each cell's own ratio beyond the allowed one (the worst first)."]
        rows = [[quantity_text(j.quantity), inert(c.context), f"{c.concurrency:,}", ratio_text(c.ratio)]
                for j, cells in failed for c in cells]  # fmt: skip
        out.append(markdown_table(pd.DataFrame(rows, columns=["Quantity", "Context", "Requests at once", "Ratio"])))
    if failed_rates := [(j, found) for j in judged if (found := failing_rates(j))]:
        out += ["## Rates behind a failure", RATES_NOTE]
        table = [[quantity_text(j.quantity), f"{r.rate:g}", RATE_VALUES[r.value], _value(r.baseline),
                 _value(r.candidate), "—" if r.ratio is None else ratio_text(r.ratio),
                 "yes" if r.value == "goodput" and r.ratio is not None and j.beyond(r.ratio) else ""]
                for j, mine in failed_rates for r in mine]  # fmt: skip
        columns = ["Quantity", "Offered rate (req/s)", "Value", "Baseline", "Candidate", "Ratio", "Beyond the limit"]
        out.append(markdown_table(pd.DataFrame(table, columns=columns, dtype=object)))
    return "\n\n".join(out) + "\n"


def failing_rates(judged: Judged) -> tuple[RateRow, ...]:
    """A failed rate quantity's values at each rate both sweeps ran (none for a quantity that did not fail)."""
    return judged.rate_rows if judged.verdict is Verdict.FAIL else ()


def _value(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"


def _over_text(judged: Sequence[Judged]) -> str:
    """What the ratios are over: the decode cells, and the rate quantities' own where they were gated."""
    bases = {base_name(j.quantity.name) for j in judged if is_rate(j.quantity)}
    parts = ["the decode cells both measured"] if any(not is_rate(j.quantity) for j in judged) else []
    if "goodput" in bases:
        parts.append("the offered rates both swept (goodput)")
    if "slo_rate" in bases:
        parts.append("the two searches' brackets (the highest rate meeting the SLO)")
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def _note(judged: Judged, context: GateContext) -> str:
    notes = [judged.basis] if judged.basis else []
    if judged.allowance is not None:
        notes.append(f"measured apart, widened by {allowance_text(judged)}{stored_text(judged)}")
    if judged.reason:
        notes.append(judged.reason)
        if context.interleave_command and not is_rate(judged.quantity):
            notes.append(f"settle it with `{context.interleave_command}`")
    if judged.verdict is Verdict.INCONCLUSIVE and judged.more_rounds:
        notes.append(f"about {judged.more_rounds} more rounds would likely resolve it")
    return "; ".join(notes) or ""
