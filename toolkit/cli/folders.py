"""The commands on run folders and other tools' results: import-report, import-results, compare, reconcile,
capacity, check, notebooks."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from toolkit.base.api_keys import api_key_from_env, scrub
from toolkit.base.errors import ParamsError, ReportFormatError, RunRefused

MIN_TARGET, MAX_TARGET = 1e-6, 1e9  # a capacity target (req/s or a multiple) and a price: plausible, never 0 or inf


def _import_report(args: argparse.Namespace) -> int:
    from toolkit.base.folder_lock import hold
    from toolkit.results.imported_reports import import_report_file
    from toolkit.results.run_document import RunDocument
    from toolkit.results.runs import RESULTS_CSV
    from toolkit.results.store import RESULTS_FILE, RUN_FILE, to_dataframe

    source, out = Path(args.file), Path(args.out)
    try:
        report = import_report_file(source)  # ReportFormatError: "FILE:LINE: what was expected"
    except OSError as exc:
        raise ParamsError(f"{source}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ReportFormatError(f"{source}: not a UTF-8 text report") from None
    with hold(out):  # a writer into a folder takes its lock: a run there, or another import, is refused
        existing = RunDocument.load(out).source if (out / RUN_FILE).exists() else "imported"
        if (out / RESULTS_FILE).exists() or existing != "imported":  # re-importing is fine
            raise RunRefused(f"out: {out} already holds a measured run; choose another folder")
        if (out / RESULTS_CSV).is_symlink():  # written only inside the folder named: a link is never followed
            raise RunRefused(f"out: {out / RESULTS_CSV} is a link; remove it or choose another folder")
        to_dataframe(report.measurements).to_csv(out / RESULTS_CSV, index=False)
        RunDocument.model_validate({**report.run_info, "source_file": source.name}).save(out)
        print(f"{len(report.measurements)} measurements: {out / RESULTS_CSV}, {out / RUN_FILE}")
        if args.report:
            from toolkit.jupyter.reports import write_reports

            for name, path in write_reports(out).items():
                print(f"{name}: {path}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from toolkit.base.folder_lock import hold
    from toolkit.jupyter.reports import write_compare

    if len(args.run_dirs) < 2:
        raise ParamsError("compare: give at least two run folders")
    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    run_dirs, out = [Path(d).resolve() for d in args.run_dirs], Path(args.out)
    if out.resolve() in run_dirs:
        raise ParamsError(f"out: {out} is one of the compared runs, whose figures it would overwrite; choose another")
    with hold(out):
        for name, path in write_compare(run_dirs, out, labels).items():
            print(f"{name}: {path}")
    return 0


def _reconcile(args: argparse.Namespace) -> int:
    from toolkit.base.folder_lock import hold
    from toolkit.jupyter.reports import write_reconcile

    if len(args.run_dirs) < 2:
        raise ParamsError("reconcile: give at least two run folders (ours first, then the imported ones)")
    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    run_dirs, out = [Path(d).resolve() for d in args.run_dirs], Path(args.out)
    with hold(out):
        paths = write_reconcile(run_dirs, out, labels)
    print(scrub(paths["reconcile.md"].read_text(encoding="utf-8")))  # an imported file's strings reach a terminal
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _import_results(args: argparse.Namespace) -> int:
    from toolkit.base.folder_lock import hold
    from toolkit.rates.imported import comparison_lines, import_results

    out = Path(args.out)
    with hold(out):
        rows = import_results(args.files, out)
    for line in comparison_lines(rows):
        print(scrub(line))  # a file's version strings may hold escape sequences
    print(f"run folder: {out} ({len(rows)} steps; compare, report and rate_sweep.ipynb read it)")
    return 0


def _capacity(args: argparse.Namespace) -> int:
    from toolkit.method.capacity_plan import CapacityTarget
    from toolkit.reports.capacity_views import capacity_classes, capacity_plan, capacity_table
    from toolkit.results.rate_runs import has_rates, load_rate_sweep

    if not has_rates(args.run_dir):
        raise ParamsError(f"run_dir: {args.run_dir} holds no rate sweep (no rates/ folder); run `rates` first")
    numbers = (args.target_rps, args.target_multiple, args.price_per_gpu_hour, args.headroom)
    target_ok = MIN_TARGET <= (args.target_rps or args.target_multiple or 0) <= MAX_TARGET
    price_ok = args.price_per_gpu_hour is None or 0 <= args.price_per_gpu_hour <= MAX_TARGET
    if not all(math.isfinite(n) for n in numbers if n is not None) or not (target_ok and price_ok):
        raise ParamsError(f"target-rps or target-multiple from {MIN_TARGET:g} to {MAX_TARGET:g}, a price from 0 to "
                          f"{MAX_TARGET:g}, headroom in [0, 1), gpus-per-server 1 or more")  # fmt: skip
    if not 0 <= args.headroom < 1 or args.gpus_per_server < 1:
        raise ParamsError("target-rps or target-multiple above 0, headroom in [0, 1), gpus-per-server 1 or more")
    target = CapacityTarget(args.target_rps, args.price_per_gpu_hour, args.gpus_per_server, args.headroom,
                            args.target_multiple)  # fmt: skip
    sweep = load_rate_sweep(args.run_dir)
    try:
        plan, sources = capacity_plan(sweep, target)
    except ValueError as exc:
        raise RunRefused(f"{args.run_dir}: {exc}") from None
    classes = capacity_classes(sweep, plan, target)  # a class sweep's: each class's replicas, the binding one
    print(capacity_table(plan, target, sources, classes, sweep.search).to_string(index=False))
    return 0


def _check(args: argparse.Namespace) -> int:
    from toolkit.folder_check import check_folder

    key = api_key_from_env(args.api_key_env) if args.api_key_env else None
    problems = [problem for folder in args.folders for problem in check_folder(folder, key)]
    for problem in problems:
        print(scrub(problem))
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) > 1 else ''}", file=sys.stderr)
        return 2
    print(f"clean: {', '.join(args.folders)}")
    return 0


def _notebooks(args: argparse.Namespace) -> int:
    from toolkit.jupyter.shipped import copy_notebooks

    copies = copy_notebooks(args.folder, overwrite=args.force)
    print(f"copied {len(copies)} notebooks into {args.folder}: {', '.join(c.name for c in copies)}")
    print(f"open them with: jupyter lab {args.folder}")
    return 0


def add_import_report(sub: argparse._SubParsersAction) -> None:
    imported = sub.add_parser("import-report", help="import a published speed test matrix text report as a run folder")
    imported.add_argument("file", help="the report's text, e.g. reference-reports/kimi-….txt")
    imported.add_argument("--out", required=True, help="run folder to write results.csv and run.json into")
    imported.add_argument("--report", action="store_true", help="also write report.html and report.md")
    imported.set_defaults(func=_import_report)


def add_compare(sub: argparse._SubParsersAction) -> None:
    comparison = sub.add_parser("compare", help="compare run folders (the first is the baseline): compare.html, .md")
    comparison.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="measured or imported run folders")
    comparison.add_argument("--out", required=True, help="folder for compare.ipynb, compare.html, compare.md")
    comparison.add_argument("--labels", help="comma-separated, one per run folder (default: run label + folder)")
    comparison.set_defaults(func=_compare)


def add_reconcile(sub: argparse._SubParsersAction) -> None:
    rec = sub.add_parser("reconcile", help="one workload measured by several tools: each quantity's ratio, interval")
    rec.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run folders with rate steps; the first is the reference"
    )
    rec.add_argument("--out", required=True, help="folder for reconcile.ipynb, reconcile.html, reconcile.md")
    rec.add_argument("--labels", help="comma-separated, one per run folder (default: run label + folder)")
    rec.set_defaults(func=_reconcile)


def add_import_results(sub: argparse._SubParsersAction) -> None:
    peers = sub.add_parser("import-results", help="import vllm bench serve, GuideLLM or AIPerf results as a run folder")
    peers.add_argument("files", nargs="+", metavar="FILE", help="one tool's result files, one per rate")
    peers.add_argument("--out", required=True, help="the new run folder")
    peers.set_defaults(func=_import_results)


def add_capacity(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("capacity", help="servers, GPUs and cost for a target traffic, from a run's rate sweep")
    plan.add_argument("run_dir", metavar="RUN_DIR", help="a run folder holding a rate sweep (ours or imported)")
    target = plan.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-rps", type=float, help="the traffic to plan for, requests/s")
    target.add_argument("--target-multiple", type=float, help="or: this many times the highest rate measured")
    plan.add_argument("--price-per-gpu-hour", type=float, help="for the cost per million output tokens")
    plan.add_argument("--gpus-per-server", type=int, default=1)
    plan.add_argument("--headroom", type=float, default=0.2, help="share of each server's highest rate kept free")
    plan.set_defaults(func=_capacity)


def add_check(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser("check", help="check run or batch folders whole: one line per problem, exit 2 if any")
    check.add_argument("folders", nargs="+", metavar="FOLDER")
    check.add_argument("--api-key-env", help="also look for this variable's key in every file")
    check.set_defaults(func=_check)


def add_notebooks(sub: argparse._SubParsersAction) -> None:
    copy = sub.add_parser("notebooks", help="copy the notebooks into a folder, to open in JupyterLab")
    copy.add_argument("folder", help="where to copy them (made when missing)")
    copy.add_argument("--force", action="store_true", help="replace notebooks already there with other content")
    copy.set_defaults(func=_notebooks)
