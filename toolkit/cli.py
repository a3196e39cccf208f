"""Command line, `vllm-speedtest` or `python -m toolkit`: serve, matrix, run, import-report, import-results,
compare, reconcile, interleave, batch, rates, capacity, check, notebooks, demo."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from toolkit.base.api_keys import ApiKey, api_key_from_env, redact
from toolkit.base.errors import ParamsError, ReportFormatError, RunRefused, ToolkitError
from toolkit.base.text import printable
from toolkit.rates.cli import add_parser as add_rates_parser

CONSOLE_SCRIPT = "vllm-speedtest"  # pyproject.toml's [project.scripts]

if TYPE_CHECKING:
    from toolkit.jupyter.pipeline import RunResult


def _serve(args: argparse.Namespace) -> int:
    from toolkit.servers.embedded.server import ServerConfig, serve_forever

    config = ServerConfig(
        port=args.port,
        max_model_len=args.max_model_len,
        kv_blocks=args.kv_blocks,
        max_num_seqs=args.max_num_seqs,
        stream_interval=args.stream_interval,
    )
    config.check()
    return serve_forever(config)


def _matrix_values(args: argparse.Namespace) -> dict[str, object]:
    """RunParams values of the options `_add_matrix_options` adds (None where not given)."""
    return {"model": args.model, "contexts": args.contexts, "concurrency": args.concurrency,
            "duration_s": args.duration, "max_output": args.max_output, "endpoint": args.endpoint,
            "api_key_env": args.api_key_env, "control_window_s": args.control_window,
            "read_timeout_s": args.read_timeout}  # fmt: skip


def _matrix(args: argparse.Namespace) -> int:
    from toolkit.params import make_params

    values = {**_matrix_values(args), "base_url": args.base_url, "run_label": args.label, "repeats": args.repeats}
    params = make_params({k: v for k, v in values.items() if v is not None})  # bad input fails before pandas loads
    api_key = ApiKey.from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    from toolkit.matrix.run_folder import hold
    from toolkit.matrix.runner import run_matrix
    from toolkit.reports.tables import decode_matrix, error_lines, prefill_table, summary_line
    from toolkit.results.store import to_dataframe

    out = Path(args.out)
    with hold(out):
        measurements = run_matrix(params, out, resume=args.resume, api_key=api_key)
        frame = to_dataframe(measurements)
        frame.to_csv(out / "results.csv", index=False)
    print(prefill_table(frame).to_string(index=False))
    print()
    print(decode_matrix(frame).to_string())
    print(f"\n{summary_line(frame)}")  # with how many measurements stayed disturbed, if any
    for line in error_lines(frame):
        print(line)
    print(f"results: {out / 'results.jsonl'}, {out / 'results.csv'}, {out / 'run.json'}")
    return 0


def _interleave(args: argparse.Namespace) -> int:
    from toolkit.params import make_params

    labels = [args.label_a, args.label_b]
    if labels[0] == labels[1]:
        raise ParamsError(f"label-b: {labels[1]!r} is also label-a; the two sides need their own labels")
    values = _matrix_values(args)
    params = {
        label: make_params({**{k: v for k, v in values.items() if v is not None}, "base_url": url, "run_label": label})
        for label, url in zip(labels, (args.a_url, args.b_url), strict=True)
    }
    api_key_from_env(params[labels[0]].api_key_env)
    if args.rounds < 2:
        raise ParamsError(f"rounds: {args.rounds}; allowed: 2 or more (one round has no spread across rounds)")
    from toolkit.batch.interleave import run_interleaved

    report = run_interleaved(params, args.rounds, Path(args.out))
    print(report.read_text(encoding="utf-8"))
    print(f"report: {report}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from toolkit.jupyter.pipeline import prepare_run
    from toolkit.matrix.run_folder import hold
    from toolkit.params import load_run_file

    params, spec = load_run_file(args.params, base_url=args.base_url)
    run = prepare_run(params, spec, preflight=True)  # bad input fails here, before any load is sent or a folder made
    if args.out:
        out, resume = Path(args.out), args.resume
    else:
        from toolkit.jupyter.execute import new_run_dir

        out, resume = new_run_dir(args.outputs, params.run_label), False
    from toolkit.jupyter.pipeline import run_one  # papermill and nbconvert: a second to load

    with hold(out):  # one run at a time writes into a folder: the lock is held until the reports are written
        result = run_one(run, out, resume=resume)
    _print_errors(out)
    return _reported(result)


def _print_errors(out: Path) -> None:
    """One line per cell of the run in `out` that ended in Error, saying what the server did."""
    from toolkit.reports.tables import error_lines
    from toolkit.results.store import RESULTS_FILE, latest_by_key, load_measurements, to_dataframe

    if (out / RESULTS_FILE).exists():
        for line in error_lines(to_dataframe(list(latest_by_key(load_measurements(out / RESULTS_FILE)).values()))):
            print(line)


def _reported(result: RunResult, heading: str | None = None) -> int:
    """Print the reports' paths, or the line saying that the launched server died (exit status 1)."""
    if result.server_died:
        _error(result.server_died)
        return 1
    if heading:
        print(f"\n{heading}:")
    for name, path in result.paths.items():
        print(f"{'  ' if heading else ''}{name}: {path}")
    return 0


def _import_report(args: argparse.Namespace) -> int:
    from toolkit.matrix.run_folder import hold
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
        to_dataframe(report.measurements).to_csv(out / RESULTS_CSV, index=False)
        RunDocument.model_validate({**report.run_info, "source_file": source.name}).save(out)
        print(f"{len(report.measurements)} measurements: {out / RESULTS_CSV}, {out / RUN_FILE}")
        if args.report:
            from toolkit.jupyter.execute import write_reports

            for name, path in write_reports(out).items():
                print(f"{name}: {path}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from toolkit.jupyter.execute import write_compare
    from toolkit.matrix.run_folder import hold

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
    from toolkit.jupyter.execute import write_reconcile
    from toolkit.matrix.run_folder import hold

    if len(args.run_dirs) < 2:
        raise ParamsError("reconcile: give at least two run folders (ours first, then the imported ones)")
    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    run_dirs, out = [Path(d).resolve() for d in args.run_dirs], Path(args.out)
    with hold(out):
        paths = write_reconcile(run_dirs, out, labels)
    print(paths["reconcile.md"].read_text(encoding="utf-8"))
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _batch(args: argparse.Namespace) -> int:
    from toolkit.batch.runner import main as run_batch

    return run_batch(args.sweep, out=args.out, outputs=args.outputs, resume=args.resume, jobs=args.jobs, ray=args.ray)


def _import_results(args: argparse.Namespace) -> int:
    from toolkit.matrix.run_folder import hold
    from toolkit.rates.imported import comparison_lines, import_results

    out = Path(args.out)
    with hold(out):
        rows = import_results(args.files, out)
    for line in comparison_lines(rows):
        print(line)
    print(f"run folder: {out} ({len(rows)} steps; compare, report and rate_sweep.ipynb read it)")
    return 0


def _capacity(args: argparse.Namespace) -> int:
    from toolkit.method.capacity_plan import CapacityTarget
    from toolkit.reports.capacity_views import capacity_plan, capacity_table
    from toolkit.results.rate_runs import has_rates, load_rate_sweep

    if not has_rates(args.run_dir):
        raise ParamsError(f"run_dir: {args.run_dir} holds no rate sweep (no rates/ folder); run `rates` first")
    if (args.target_rps or args.target_multiple or 0) <= 0 or not 0 <= args.headroom < 1 or args.gpus_per_server < 1:
        raise ParamsError("target-rps or target-multiple above 0, headroom in [0, 1), gpus-per-server 1 or more")
    target = CapacityTarget(args.target_rps, args.price_per_gpu_hour, args.gpus_per_server, args.headroom,
                            args.target_multiple)  # fmt: skip
    try:
        plan, sources = capacity_plan(load_rate_sweep(args.run_dir), target)
    except ValueError as exc:
        raise RunRefused(f"{args.run_dir}: {exc}") from None
    print(capacity_table(plan, target, sources).to_string(index=False))
    return 0


def _check(args: argparse.Namespace) -> int:
    from toolkit.folder_check import check_folder

    key = api_key_from_env(args.api_key_env) if args.api_key_env else None
    problems = [problem for folder in args.folders for problem in check_folder(folder, key)]
    for problem in problems:
        print(printable(redact(problem)))
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


def _demo(args: argparse.Namespace) -> int:
    from toolkit.jupyter.execute import new_run_dir
    from toolkit.jupyter.pipeline import prepare_run, run_one
    from toolkit.matrix.run_folder import hold
    from toolkit.params import load_params
    from toolkit.servers.embedded.server import embedded_launch

    params = load_params(args.params)
    run = prepare_run(*embedded_launch(params))  # launched, recorded and stopped as a server: block would be
    print("starting the embedded vLLM (about a minute) ...", flush=True)
    out = new_run_dir(args.outputs, params.run_label)
    with hold(out):
        result = run_one(run, out)
    return _reported(result, heading="report")


class _Parser(argparse.ArgumentParser):
    """Bad command-line input: one line naming the argument and what is allowed, exit status 2."""

    def error(self, message: str) -> NoReturn:
        required = "the following arguments are required: "
        if message.startswith(required):
            message = f"{message.removeprefix(required)}: required"
        self.exit(2, f"error: {message.removeprefix('argument ')} (see {self.prog} --help)\n")


def _add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the embedded vLLM (tiny model) on 127.0.0.1 in the foreground")
    serve.add_argument("--port", type=int)
    serve.add_argument("--max-model-len", type=int, default=8192)
    serve.add_argument("--kv-blocks", type=int, help="KV cache size in blocks of 128 tokens")
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--stream-interval", type=int, default=1)
    serve.set_defaults(func=_serve)


def _add_matrix_options(parser: argparse.ArgumentParser) -> None:
    """What a matrix measures, as `matrix` and `interleave` take it (`_matrix_values` reads it back)."""
    parser.add_argument("--model")
    parser.add_argument("--contexts", help="comma-separated, e.g. 1K,2K (default: rules of docs/METHOD.md)")
    parser.add_argument("--concurrency", help="comma-separated, e.g. 1,2,4")
    parser.add_argument("--duration", type=float, help="seconds per measurement (default 30)")
    parser.add_argument("--max-output", type=int, help="tokens per request (default 4096)")
    parser.add_argument("--endpoint", choices=["chat", "completions"])
    parser.add_argument("--api-key-env", help="environment variable holding the API key (default VLLM_API_KEY)")
    parser.add_argument("--control-window", type=float, help="drift control cell's window in s (default 5; 0: off)")
    parser.add_argument("--read-timeout", type=float, help="s a reply may send nothing before it fails (default 300)")


def _add_matrix(sub: argparse._SubParsersAction) -> None:
    matrix = sub.add_parser("matrix", help="measure prefill and the decode matrix of a running server")
    matrix.add_argument("--base-url", required=True)
    _add_matrix_options(matrix)
    matrix.add_argument("--label", help="run label")
    matrix.add_argument("--repeats", type=int, help="measure the whole matrix this many times, in rounds (default 1)")
    matrix.add_argument("--out", required=True)
    matrix.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished cells")
    matrix.set_defaults(func=_matrix)


def _add_interleave(sub: argparse._SubParsersAction) -> None:
    inter = sub.add_parser("interleave", help="compare two running servers measured in alternating rounds (A B B A)")
    inter.add_argument("--a-url", required=True, help="baseline server, e.g. http://127.0.0.1:8000")
    inter.add_argument("--b-url", required=True, help="the server compared with it")
    inter.add_argument("--label-a", default="A")
    inter.add_argument("--label-b", default="B")
    inter.add_argument("--rounds", type=int, default=4, help="rounds, each one run per side (default 4; at least 2)")
    _add_matrix_options(inter)
    inter.add_argument("--out", required=True)
    inter.set_defaults(func=_interleave)


def _add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="execute the notebooks with a params file and write the reports")
    run.add_argument("params", help="YAML params file, e.g. params/demo.yaml")
    run.add_argument("--base-url", help="overrides base_url of the params file")
    run.add_argument("--out", help="results folder (default: outputs/<run_label>/<UTC timestamp>/)")
    run.add_argument("--outputs", default="outputs", help=argparse.SUPPRESS)
    run.add_argument("--resume", action="store_true", help="continue the run in --out")
    run.set_defaults(func=_run)


def _add_import_report(sub: argparse._SubParsersAction) -> None:
    imported = sub.add_parser("import-report", help="import a published speed test matrix text report as a run folder")
    imported.add_argument("file", help="the report's text, e.g. reference-reports/kimi-….txt")
    imported.add_argument("--out", required=True, help="run folder to write results.csv and run.json into")
    imported.add_argument("--report", action="store_true", help="also write report.html and report.md")
    imported.set_defaults(func=_import_report)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    comparison = sub.add_parser("compare", help="compare run folders (the first is the baseline): compare.html, .md")
    comparison.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="measured or imported run folders")
    comparison.add_argument("--out", required=True, help="folder for compare.ipynb, compare.html, compare.md")
    comparison.add_argument("--labels", help="comma-separated, one per run folder (default: run label + folder)")
    comparison.set_defaults(func=_compare)


def _add_batch(sub: argparse._SubParsersAction) -> None:
    batch = sub.add_parser("batch", help="run every variant of a sweep file, then index.html/.md and a comparison")
    batch.add_argument("sweep", help="YAML sweep file, e.g. params/sweep-example.yaml")
    batch.add_argument("--out", help="batch folder (default: outputs/<sweep name>/<UTC timestamp>/)")
    batch.add_argument("--outputs", default="outputs", help=argparse.SUPPRESS)
    batch.add_argument("--resume", action="store_true", help="skip finished variants, continue the others in --out")
    batch.add_argument("--jobs", type=int, default=1, help="variants at once, each on its own server (default 1)")
    batch.add_argument("--ray", metavar="ADDRESS", help="run each variant as a task on this Ray cluster")
    batch.set_defaults(func=_batch)


def _add_reconcile(sub: argparse._SubParsersAction) -> None:
    rec = sub.add_parser("reconcile", help="one workload measured by several tools: each quantity's ratio, interval")
    rec.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run folders with rate steps; the first is the reference"
    )
    rec.add_argument("--out", required=True, help="folder for reconcile.ipynb, reconcile.html, reconcile.md")
    rec.add_argument("--labels", help="comma-separated, one per run folder (default: run label + folder)")
    rec.set_defaults(func=_reconcile)


def _add_import_results(sub: argparse._SubParsersAction) -> None:
    peers = sub.add_parser("import-results", help="import vllm bench serve, GuideLLM or AIPerf results as a run folder")
    peers.add_argument("files", nargs="+", metavar="FILE", help="one tool's result files, one per rate")
    peers.add_argument("--out", required=True, help="the new run folder")
    peers.set_defaults(func=_import_results)


def _add_capacity(sub: argparse._SubParsersAction) -> None:
    plan = sub.add_parser("capacity", help="servers, GPUs and cost for a target traffic, from a run's rate sweep")
    plan.add_argument("run_dir", metavar="RUN_DIR", help="a run folder holding a rate sweep (ours or imported)")
    target = plan.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-rps", type=float, help="the traffic to plan for, requests/s")
    target.add_argument("--target-multiple", type=float, help="or: this many times the highest rate measured")
    plan.add_argument("--price-per-gpu-hour", type=float, help="for the cost per million output tokens")
    plan.add_argument("--gpus-per-server", type=int, default=1)
    plan.add_argument("--headroom", type=float, default=0.2, help="share of each server's highest rate kept free")
    plan.set_defaults(func=_capacity)


def _add_check(sub: argparse._SubParsersAction) -> None:
    check = sub.add_parser("check", help="check run or batch folders whole: one line per problem, exit 2 if any")
    check.add_argument("folders", nargs="+", metavar="FOLDER")
    check.add_argument("--api-key-env", help="also look for this variable's key in every file")
    check.set_defaults(func=_check)


def _add_notebooks(sub: argparse._SubParsersAction) -> None:
    copy = sub.add_parser("notebooks", help="copy the notebooks into a folder, to open in JupyterLab")
    copy.add_argument("folder", help="where to copy them (made when missing)")
    copy.add_argument("--force", action="store_true", help="replace notebooks already there with other content")
    copy.set_defaults(func=_notebooks)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="start the embedded vLLM, run params/demo.yaml, stop, print the report")
    demo.add_argument("--params", default="params/demo.yaml")
    demo.add_argument("--outputs", default="outputs")
    demo.set_defaults(func=_demo)


def _program_name() -> str:
    """How this command was called: the console script by its name, else `python -m toolkit`."""
    name = Path(sys.argv[0]).name if sys.argv else ""
    return CONSOLE_SCRIPT if name == CONSOLE_SCRIPT else "python -m toolkit"


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=_program_name(), description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (
        _add_serve,
        _add_matrix,
        _add_run,
        _add_import_report,
        _add_import_results,
        _add_compare,
        _add_reconcile,
        _add_interleave,
        _add_batch,
        add_rates_parser,
        _add_capacity,
        _add_check,
        _add_notebooks,
        _add_demo,
    ):
        add(sub)
    return parser


def _error(text: str) -> None:
    """Print an error on stderr, every secret this process knows redacted, without control characters."""
    print(printable(redact(f"error: {text}")), file=sys.stderr)


def _os_error(exc: OSError) -> str:
    """An OSError as one line: the file named, then what the system said."""
    what = exc.strerror or str(exc) or type(exc).__name__
    return f"{exc.filename}: {what}" if exc.filename is not None else what


def main(argv: list[str] | None = None) -> int:
    """Run a command. A `ToolkitError` or an `OSError` is one line on stderr (exit 2: bad input, 1: the
    environment); a notebook that failed, one line naming its cell; anything else is a bug: its traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ToolkitError as exc:  # a launched server that did not come up: its reason, the log named in it
        _error(exc.line)
        return exc.exit_code
    except OSError as exc:
        _error(_os_error(exc))
        return 1
    except Exception as exc:
        from papermill.exceptions import PapermillExecutionError

        if not isinstance(exc, PapermillExecutionError):  # a bug: its traceback, redacted
            sys.stderr.write(redact(traceback.format_exc()))
            return 1
        _error(f"notebook cell {exc.exec_count} failed: {exc.ename}: {exc.evalue}")
        return 1
    except KeyboardInterrupt:
        print("interrupted: finished measurements are kept; rerun with --resume to continue", file=sys.stderr)
        return 130
