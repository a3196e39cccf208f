"""`gate`: a regression verdict with an exit code for CI; `gate plan`: the rounds and window a gate needs;
`gate allowance`: the between-run allowance measured by repeated A/A runs, stored for `--between-runs FILE`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.base.api_keys import scrub
from toolkit.base.errors import ParamsError

if TYPE_CHECKING:
    from toolkit.reports.gate_ratios import Judged
    from toolkit.reports.gate_text import GateContext

SUMMARY_ENV = "GITHUB_STEP_SUMMARY"
PLAN_WORD = "plan"
ALLOWANCE_WORD = "allowance"


def _gate(args: argparse.Namespace) -> int:
    if args.folders[0] == PLAN_WORD:
        return _plan(args)
    if args.folders[0] == ALLOWANCE_WORD:
        return _allowance(args)
    if not args.max_regression:
        raise ParamsError("max-regression: required, e.g. --max-regression 3% or total_tok_s=3%,ttft_ms=10%")
    if args.detect:
        raise ParamsError("detect: only with `gate plan DIR --detect 3%`")
    if args.save:
        raise ParamsError("save: only with `gate allowance RUN RUN RUN --save FILE`")
    from toolkit.reports.gate_text import gate_line, gate_status
    from toolkit.reports.gate_view import gate_folders

    judged, context = gate_folders(args.folders, args.max_regression, between_runs=args.between_runs,
                                   baseline=args.baseline, candidate=args.candidate,
                                   inconclusive=args.inconclusive)  # fmt: skip
    for item in judged:
        print(scrub(gate_line(item, context)))
    _write_outputs(args, judged, context)
    return gate_status(judged, context)


def _write_outputs(args: argparse.Namespace, judged: list[Judged], context: GateContext) -> None:
    from toolkit.reports.gate_document import gate_document
    from toolkit.reports.gate_text import junit_xml, summary_markdown

    if args.junit:
        _write_text(Path(args.junit), junit_xml(judged, context))
    summary = summary_markdown(judged, context)
    if args.summary:
        _write_text(Path(args.summary), summary)
    if step := os.environ.get(SUMMARY_ENV):
        with open(step, "a", encoding="utf-8") as out:  # GitHub's step summary: every step appends
            out.write(scrub(summary) + "\n")
    if args.json:
        gate_document(judged, context).save(args.json)


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(scrub(text), encoding="utf-8")


def _plan(args: argparse.Namespace) -> int:
    from toolkit.method.gate import DEFAULT_QUANTITIES, QUANTITIES, family_level, percent

    folders = args.folders[1:]
    if len(folders) != 1:
        raise ParamsError("gate plan: give one run folder or interleaved comparison folder, e.g. gate plan DIR")
    detects = [percent(part, "detect") for part in (args.detect or "3%,10%").split(",")]
    for name in ("max_regression", "between_runs", "junit", "summary", "json", "baseline", "candidate", "save"):
        if getattr(args, name):
            raise ParamsError(f"{name.replace('_', '-')}: not an option of `gate plan` (only --detect)")
    from toolkit.method.drift import run_drift
    from toolkit.reports.gate_planning import interleaved_spreads, plan_lines, planned, run_spreads
    from toolkit.reports.gate_view import round_frames
    from toolkit.results.gate_inputs import gate_input, interleaved_rounds
    from toolkit.results.runs import load_run
    from toolkit.results.store import RUN_FILE

    folder = Path(folders[0])
    if (folder / RUN_FILE).is_file() or not interleaved_rounds(folder):
        frame, info = load_run(folder)  # ResultsError for a folder that is neither
        spreads, what = run_spreads(frame, run_drift(info)), f"one run, {folder}"
    else:
        found = gate_input([str(folder)])
        spreads, what = interleaved_spreads(*round_frames(found)), f"{found.labels[1]} / {found.labels[0]}, interleaved"
    if not spreads:
        raise ParamsError(f"{folder}: no decode cell with a measured spread; nothing to plan from")
    level = family_level(len(DEFAULT_QUANTITIES))
    print(f"gate plan from {what}: rounds A B B A … to resolve each change at {100 * level:.4g} % "
          f"({len(DEFAULT_QUANTITIES)} quantities gated together) with 80 % power")  # fmt: skip
    for line in plan_lines(planned(spreads, detects, level), {q: v.title for q, v in QUANTITIES.items()}):
        print(scrub(line))
    return 0


def _allowance(args: argparse.Namespace) -> int:
    names = ("max_regression", "between_runs", "junit", "summary", "json", "baseline", "candidate", "detect")
    for name in names:
        if getattr(args, name):
            raise ParamsError(f"{name.replace('_', '-')}: not an option of `gate allowance` (only --save)")
    from toolkit.reports.gate_allowance import allowance_lines, measure_allowance

    document = measure_allowance(args.folders[1:])
    for line in allowance_lines(document):
        print(scrub(line))
    if args.save:
        document.save(args.save)
        print(scrub(f"saved {args.save}: gate BASELINE CANDIDATE --between-runs {args.save} widens each quantity by "
                    "its own allowance"))  # fmt: skip
    return 0


def add_gate(sub: argparse._SubParsersAction) -> None:
    gate = sub.add_parser(
        "gate",
        help="a regression verdict for CI: exit 0 pass, 1 fail, 3 inconclusive, 2 bad input (`gate plan DIR`: "
        "rounds; `gate allowance RUN RUN RUN`: the between-run allowance)",
    )
    gate.add_argument(
        "folders",
        nargs="+",
        metavar="FOLDER",
        help="BASELINE CANDIDATE run folders, or one interleaved comparison folder; `plan DIR` plans the rounds; "
        "`allowance RUN RUN RUN…` measures the between-run allowance from A/A runs of one configuration",
    )
    gate.add_argument(
        "--max-regression",
        help="3%%, or per quantity: total_tok_s=3%%,ttft_ms=10%%; rate sweeps: goodput=5%%,slo_rate=5%%, a traffic "
        "class's goodput[chat]=10%% (a bare limit gates them too where both folders hold one)",
    )
    gate.add_argument(
        "--inconclusive",
        choices=["pass", "fail", "inconclusive"],
        default="inconclusive",
        help="how an inconclusive quantity counts (default: exit 3)",
    )
    gate.add_argument(
        "--between-runs",
        help="folders measured apart: the machine's change allowed, e.g. 10%%, or the file of `gate allowance --save`",
    )
    gate.add_argument("--baseline", help="an interleaved folder's baseline configuration (default: the first)")
    gate.add_argument("--candidate", help="its candidate (default: the other one)")
    gate.add_argument("--junit", metavar="FILE", help="JUnit XML, one test case per gated quantity")
    gate.add_argument("--summary", metavar="FILE", help=f"markdown summary (also appended to ${SUMMARY_ENV})")
    gate.add_argument("--json", metavar="FILE", help="the verdicts as a versioned JSON document")
    gate.add_argument("--detect", help="gate plan: the changes to resolve (default 3%%,10%%)")
    gate.add_argument("--save", metavar="FILE", help="gate allowance: the allowance file to write (JSON)")
    gate.set_defaults(func=_gate)
