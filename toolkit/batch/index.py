"""A batch's index.html and index.md: every variant's report linked with its headline numbers and state."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from toolkit.base.schema import STATUSES
from toolkit.batch.sweep import Variant
from toolkit.method.disturbed import DISTURBED_MARK, disturbed_mask
from toolkit.method.drift import run_drift, within_drift
from toolkit.method.spread import LEGACY_BATCHES, WINDOW_DOF, Interval, ratio_test, window_dof
from toolkit.reports.compare_overall import RATIO_QUANTITIES, cells_text, format_ratio
from toolkit.reports.markdown_text import inert
from toolkit.reports.number_format import MISSING, as_number, format_tok_s
from toolkit.reports.tables import markdown_table
from toolkit.results.documents.batch import BatchDocument, CompareBlock
from toolkit.results.runs import load_run
from toolkit.results.store import RUN_FILE

Compared = CompareBlock | Mapping[str, Any] | None  # batch.json's `compare`; None: nothing compared
INDEX_TITLE = "Speed test matrix batch"
COLUMNS = ("Variant", "State", "Prefill tok/s", "Best measured total tok/s", "Statuses", "Note")
HEADLINE_CAPTION = ("Prefill tok/s: at the largest context measured. Best measured total tok/s: the highest of the "
                    "Valid decode cells, at context × requests at once; the same data chose it, so it is not "
                    "tested against itself: \"tied with\" names the cells not significantly lower once the choice "
                    "is paid for (each comparison with the best at 5 % divided by their number, Bonferroni), or "
                    "within the run's control drift of it. "
                    "Statuses: all measurements of the run, and how many stayed disturbed after their retries (a "
                    "pause of the machine): their numbers are left out of both figures.")  # fmt: skip


def headline(frame: pd.DataFrame, drift: float | None = None) -> dict[str, Any]:
    """Headline numbers of one run: prefill tok/s at its largest context, best Valid decode total tok/s and where,
    how many measurements have each status and how many stayed disturbed (pure: the run's results in, numbers out).

    A measurement still disturbed after its retries gives neither headline number. `best_tied`: the other cells
    whose difference from the best is not significant under their intervals and the run's `drift`.
    """
    disturbed = disturbed_mask(frame)
    usable = frame[(frame["status"] == "Valid") & ~disturbed]
    prefill = usable[usable["phase"] == "prefill"]
    top = prefill.sort_values("context_tokens").tail(1).to_dict("records")
    decode = usable[usable["phase"] == "decode"]
    totals = [as_number(v) for v in decode["total_tok_s"]]
    ranked = [(t, i) for i, t in enumerate(totals) if t is not None]
    best = decode.iloc[max(ranked)[1]] if ranked else None
    counts = frame["status"].value_counts()
    return {
        "prefill_context": top[0]["context"] if top else None,
        "prefill_tok_s": as_number(top[0]["total_tok_s"]) if top else None,
        "best_total_tok_s": None if best is None else as_number(best["total_tok_s"]),
        "best_context": None if best is None else str(best["context"]),
        "best_concurrency": None if best is None else int(best["concurrency"]),
        "best_tied": [] if best is None else tied_with(best, decode, drift),
        "statuses": {status: int(counts.get(status, 0)) for status in STATUSES if counts.get(status, 0)},
        "disturbed": int(disturbed.sum()),
    }


def tied_with(best: pd.Series, cells: pd.DataFrame, drift: float | None) -> list[str]:
    """``context × N`` of each other cell whose total tok/s is within the drift of the best's, or whose ratio to it
    is not significant at 5 % / (cells - 1): the best was picked by the same numbers, so each of the comparisons
    with it is held to the family's level (Bonferroni; toolkit.method.spread)."""
    top, top_hw = as_number(best["total_tok_s"]), as_number(best.get("total_tok_s_ci"))
    level = 0.05 / max(1, len(cells) - 1)
    tied = []
    for row in cells.to_dict("records"):
        total, hw = as_number(row["total_tok_s"]), as_number(row.get("total_tok_s_ci"))
        if total is None or not top or (row["context"], row["concurrency"]) == (best["context"], best["concurrency"]):
            continue
        ratio = total / top
        close = within_drift(ratio, drift)
        if not close and hw is not None and top_hw is not None:
            test = ratio_test(_interval(top, top_hw, best), _interval(total, hw, row))
            close = test.p_value > level
        if close:
            tied.append(f"{row['context']} × {int(row['concurrency'])}")
    return tied


def _interval(value: float, half_width: float, row: Any) -> Interval:
    """A cell's total tok/s interval with the t degrees of freedom of its window's half-width (`window_dof`)."""
    batches = as_number(row.get("sub_windows")) or LEGACY_BATCHES
    return Interval(value, half_width, max(WINDOW_DOF, window_dof(batches, recorded=as_number(row.get("window_dof")))))


def _run_headline(folder: Path) -> dict[str, Any] | None:
    if not (folder / RUN_FILE).exists():
        return None
    try:
        frame, info = load_run(folder)
    except (OSError, ValueError):
        return None
    return headline(frame, run_drift(info)) if len(frame) else None


def index_rows(out: Path, variants: Sequence[Variant], state: BatchDocument) -> list[dict[str, Any]]:
    """One row per variant, in the sweep's order: label, state, headline numbers (None if no results), error."""
    rows = []
    for variant in variants:
        entry = (state.variants or {}).get(variant.label, {})
        folder = out / variant.label
        rows.append(
            {
                "label": variant.label,
                "state": entry.get("state", "pending"),
                "error": entry.get("error"),
                "headline": _run_headline(folder),
                "report": (folder / "report.html").exists(),
                "duration_s": entry.get("duration_s"),
            }
        )
    return rows


def _cells(row: Mapping[str, Any]) -> list[str]:
    """Display strings of a row (without the variant's link)."""
    head = row["headline"] or {}
    prefill = format_tok_s(head.get("prefill_tok_s"), trim_zero=True)  # as the report's prefill table
    if head.get("prefill_context"):
        prefill += f" at {head['prefill_context']}"
    best = format_tok_s(head.get("best_total_tok_s"))
    if head.get("best_context"):
        best += f" at {head['best_context']} × {head['best_concurrency']}"
    if head.get("best_tied"):
        best += f" (tied with {', '.join(head['best_tied'])})"
    statuses = " · ".join(f"{status} {count}" for status, count in (head.get("statuses") or {}).items())
    if head.get("disturbed"):
        statuses += f" · {head['disturbed']} {DISTURBED_MARK}"
    state = str(row["state"]) + (f" ({row['duration_s']:g} s)" if row.get("duration_s") is not None else "")
    return [state, prefill, best, statuses or MISSING, row["error"] or ""]


def index_markdown(rows: Sequence[Mapping[str, Any]], compare: Compared, title: str) -> str:
    """index.md: the variants' table (reports linked) and the comparison."""
    data = []
    for row in rows:
        link = f"[{row['label']}]({row['label']}/report.md)" if row["report"] else row["label"]
        data.append([link, *_cells(row)])
    frame = pd.DataFrame(data, columns=list(COLUMNS), dtype=object)
    out = [f"# {INDEX_TITLE}: {inert(title)}", HEADLINE_CAPTION, markdown_table(frame), "## Comparison",
           inert(_compare_md(_block(compare)))]  # fmt: skip
    return "\n\n".join(out) + "\n"


def _block(compare: Compared) -> CompareBlock | None:
    """batch.json's `compare` (a mapping given is read as batch.json would be)."""
    return compare if compare is None or isinstance(compare, CompareBlock) else CompareBlock.model_validate(compare)


def paired_lines(compare: Compared) -> list[tuple[str, str]]:
    """An interleaved batch's comparisons: (the paired report's path in the batch folder, a line that sums it up:
    `b / a over R interleaved rounds, paired: Total tok/s 1.05× ±0.03 (2 cells, detects ±1.2 %); …`, the smallest
    change its rounds detect at 80 % power where batch.json has it); none for another batch."""
    block, lines = _block(compare), []
    for pair in (block.interleaved if block is not None else None) or []:
        detectable = pair.detectable or {}
        sums = "; ".join(
            f"{RATIO_QUANTITIES.get(q, q)} {format_ratio(v)} ±{hw:.2f} ({cells_text(int(n))}"
            + (f", detects ±{detectable[q]:.1f} %)" if q in detectable else ")")
            for q, (v, hw, n) in (pair.overall or {}).items()
        )
        head = f"{pair.label} / {pair.baseline} over {pair.rounds} interleaved rounds, paired"
        lines.append((pair.report, f"{head}: {sums or 'no decode cell in every round'}"))
    return lines


def _compare_md(compare: CompareBlock | None) -> str:
    if paired := paired_lines(compare):
        return "\n".join(f"- [{Path(path).name}]({path}): {line}" for path, line in paired)
    if compare is not None and compare.state == "done":
        shown = ", ".join(compare.labels or [])
        return f"[compare.md](compare/compare.md) · [compare.html](compare/compare.html): {shown}"
    return _compare_note(compare)


def _compare_note(compare: CompareBlock | None) -> str:
    if compare is None:
        return "No comparison: fewer than two variants have results."
    return f"No comparison: {compare.error or 'fewer than two variants have results'}."


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
.failed{color:#a00}.caption{color:#555;max-width:60em}"""


def index_html(rows: Sequence[Mapping[str, Any]], compare: Compared, title: str) -> str:
    """index.html: a self-contained page (no external assets) with the same content as index.md."""
    esc, compare = html.escape, _block(compare)
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    body = []
    for row in rows:
        label = esc(row["label"])
        link = f'<a href="{quote(row["label"])}/report.html">{label}</a>' if row["report"] else label
        css = ' class="failed"' if row["state"] == "failed" else ""
        body.append(f"<tr{css}><td>{link}</td>" + "".join(f"<td>{esc(c)}</td>" for c in _cells(row)) + "</tr>")
    if paired := paired_lines(compare):
        items = "".join(
            f'<li><a href="{quote(path)}">{esc(Path(path).name)}</a>: {esc(line)}</li>' for path, line in paired
        )
        comparison = f"<ul>{items}</ul>"
    elif compare is not None and compare.state == "done":
        shown = esc(", ".join(compare.labels or []))
        comparison = (
            f'<p><a href="compare/compare.html">compare.html</a> · '
            f'<a href="compare/compare.md">compare.md</a>: {shown}</p>'
        )
    else:
        comparison = f"<p>{esc(_compare_note(compare))}</p>"
    return (
        f'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>{esc(INDEX_TITLE)}: {esc(title)}</title>'
        f"<style>{_STYLE}</style></head><body>\n<h1>{esc(INDEX_TITLE)}: {esc(title)}</h1>\n"
        f'<p class="caption">{esc(HEADLINE_CAPTION)}</p>\n<table><tr>{head}</tr>\n'
        + "\n".join(body)
        + f"\n</table>\n<h2>Comparison</h2>\n{comparison}\n</body></html>\n"
    )


def write_index(out: Path, variants: Sequence[Variant], state: BatchDocument) -> dict[str, Path]:
    """index.html and index.md in the batch folder."""
    rows = index_rows(out, variants, state)
    title = Path(state.sweep or out.name).name
    compare = state.compare
    (out / "index.html").write_text(index_html(rows, compare, title), encoding="utf-8")
    (out / "index.md").write_text(index_markdown(rows, compare, title), encoding="utf-8")
    return {"index.html": out / "index.html", "index.md": out / "index.md"}
