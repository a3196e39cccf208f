"""Command line: `python -m toolkit serve|matrix|run|import-report|compare|batch|demo|rates`."""

from __future__ import annotations

import argparse
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from toolkit.api_keys import api_key_from_env, redact
from toolkit.params import ParamsError
from toolkit.rates.cli import add_parser as add_rates_parser
from toolkit.servers.managed import ManagedServer, ServerError, exit_description

if TYPE_CHECKING:
    from toolkit.matrix.discovery import ServerInfo
    from toolkit.params import RunParams, ServerSpec


def _serve(args: argparse.Namespace) -> int:
    from toolkit.servers.embedded.server import ServerConfig, serve_forever

    config = ServerConfig(port=args.port, max_model_len=args.max_model_len, kv_blocks=args.kv_blocks,
                          max_num_seqs=args.max_num_seqs, stream_interval=args.stream_interval)  # fmt: skip
    config.check()
    return serve_forever(config)


def _matrix(args: argparse.Namespace) -> int:
    from toolkit.params import make_params

    values = {"base_url": args.base_url, "model": args.model, "contexts": args.contexts,
              "concurrency": args.concurrency, "duration_s": args.duration, "max_output": args.max_output,
              "endpoint": args.endpoint, "api_key_env": args.api_key_env, "run_label": args.label}  # fmt: skip
    params = make_params({k: v for k, v in values.items() if v is not None})  # bad input fails before pandas loads
    api_key_from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    from toolkit.matrix.run_folder import hold
    from toolkit.matrix.runner import run_matrix
    from toolkit.reports.tables import decode_matrix, prefill_table, summary_line
    from toolkit.results.store import to_dataframe

    out = Path(args.out)
    with hold(out):
        measurements = run_matrix(params, out, resume=args.resume)
        frame = to_dataframe(measurements)
        frame.to_csv(out / "results.csv", index=False)
    print(prefill_table(frame).to_string(index=False))
    print()
    print(decode_matrix(frame).to_string())
    print(f"\n{summary_line(frame)}")  # with how many measurements stayed disturbed, if any
    print(f"results: {out / 'results.jsonl'}, {out / 'results.csv'}, {out / 'run.json'}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from toolkit.matrix.run_folder import hold
    from toolkit.matrix.runner import preflight
    from toolkit.params import load_run_file
    from toolkit.servers.launch import check_command

    params, spec = load_run_file(args.params, base_url=args.base_url)
    api_key = api_key_from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    found = None
    if spec is None:
        found = preflight(params)  # bad input fails here, before any load is sent
    else:
        check_command(spec, api_key)
    if args.out:  # one run at a time writes into a folder: the lock is held until the reports are written
        with hold(Path(args.out)):
            return _run_in(Path(args.out), args.resume, params, spec, found)
    from toolkit.jupyter.execute import new_run_dir

    out = new_run_dir(args.outputs, params.run_label)
    with hold(out):
        return _run_in(out, False, params, spec, found)


def _run_in(out: Path, resume: bool, params: RunParams, spec: ServerSpec | None, found: ServerInfo | None) -> int:
    """`toolkit run` into `out`, whose lock is held: a resumed run must continue the same server."""
    from toolkit.matrix.run_folder import check_resume, open_run
    from toolkit.matrix.runner import preflight
    from toolkit.servers.launch import launched_server

    if resume:  # before a launch: the parameters and the command; without one: the server found too
        check_resume(out, params, spec, found)
    else:
        open_run(out, params, resume=False)  # refuses a folder that holds a run
    from toolkit.jupyter.execute import run_notebooks  # papermill and nbconvert: a second to load
    from toolkit.results.store import check_writable

    check_writable(out)  # before any load: a folder we cannot write would lose every measurement

    if spec is None:
        paths = run_notebooks(params, out)
    else:  # one launch for the whole run: both notebooks measure it, the reports are written after
        print(f"server: launching {spec.command[0]} (log: {spec.log_file or out / 'server.log'}) ...", flush=True)
        with launched_server(spec, params, out) as server:
            print(f"server: {server.base_url} healthy", flush=True)
            try:
                info = preflight(params)
                if resume:
                    check_resume(out, params, spec, info)
                paths = run_notebooks(params, out)
            except Exception:
                if died := _server_died(server):  # said before the notebook's own error
                    _error(died)
                raise
            died = _server_died(server)
        if died:
            _error(died)
            return 1
    for name, path in paths.items():
        print(f"{name}: {path}")
    return 0


def _server_died(server: ManagedServer) -> str | None:
    """A line saying that the launched server ended during the run, or None."""
    if (code := server.exit_code) is None:
        return None
    return (f"the server {exit_description(code)} during the run (log: {server.log_path}); finished "
            "measurements are kept, its cells are Error; rerun with --resume")  # fmt: skip


def _import_report(args: argparse.Namespace) -> int:
    from toolkit.results.imported_reports import import_report_file
    from toolkit.results.runs import RESULTS_CSV
    from toolkit.results.store import RESULTS_FILE, RUN_FILE, read_json, to_dataframe, write_json_atomic

    source, out = Path(args.file), Path(args.out)
    try:
        report = import_report_file(source)  # ReportFormatError: "FILE:LINE: what was expected"
    except OSError as exc:
        raise ValueError(f"{source}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{source}: not a UTF-8 text report") from None
    existing = read_json(out / RUN_FILE) if (out / RUN_FILE).exists() else {"source": "imported"}
    if (out / RESULTS_FILE).exists() or existing.get("source") != "imported":  # re-importing is fine
        raise ValueError(f"out: {out} already holds a measured run; choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    to_dataframe(report.measurements).to_csv(out / RESULTS_CSV, index=False)
    write_json_atomic(out / RUN_FILE, {**report.run_info, "source_file": source.name})
    print(f"{len(report.measurements)} measurements: {out / RESULTS_CSV}, {out / RUN_FILE}")
    if args.report:
        from toolkit.jupyter.execute import write_reports

        for name, path in write_reports(out).items():
            print(f"{name}: {path}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from toolkit.jupyter.execute import write_compare

    if len(args.run_dirs) < 2:
        raise ValueError("compare: give at least two run folders")
    labels = [label.strip() for label in args.labels.split(",")] if args.labels else None
    for name, path in write_compare([Path(d).resolve() for d in args.run_dirs], Path(args.out), labels).items():
        print(f"{name}: {path}")
    return 0


def _batch(args: argparse.Namespace) -> int:
    from toolkit.batch.runner import main as run_batch

    return run_batch(args.sweep, out=args.out, outputs=args.outputs, resume=args.resume, jobs=args.jobs, ray=args.ray)


def _demo(args: argparse.Namespace) -> int:
    from toolkit.jupyter.execute import new_run_dir, run_notebooks
    from toolkit.matrix.runner import preflight
    from toolkit.params import load_params
    from toolkit.servers.embedded.server import launched_embedded

    params = load_params(args.params)
    out = new_run_dir(args.outputs, params.run_label)
    print("starting the embedded vLLM (about a minute) ...", flush=True)
    with launched_embedded(params, out) as params:  # launched, recorded and stopped as a server: block would be
        print(f"server: {params.base_url} (log: {out / 'server.log'})", flush=True)
        preflight(params)
        paths = run_notebooks(params, out)
    print("\nreport:")
    for name, path in paths.items():
        print(f"  {name}: {path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """Bad command-line input: one line naming the argument and what is allowed, exit status 2."""

    def error(self, message: str) -> NoReturn:
        required = "the following arguments are required: "
        if message.startswith(required):
            message = f"{message.removeprefix(required)}: required"
        self.exit(2, f"error: {message.removeprefix('argument ')} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m toolkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the embedded vLLM (tiny model) on 127.0.0.1 in the foreground")
    serve.add_argument("--port", type=int)
    serve.add_argument("--max-model-len", type=int, default=8192)
    serve.add_argument("--kv-blocks", type=int, help="KV cache size in blocks of 128 tokens")
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--stream-interval", type=int, default=1)
    serve.set_defaults(func=_serve)

    matrix = sub.add_parser("matrix", help="measure prefill and the decode matrix of a running server")
    matrix.add_argument("--base-url", required=True)
    matrix.add_argument("--model")
    matrix.add_argument("--contexts", help="comma-separated, e.g. 1K,2K (default: rules of docs/METHOD.md)")
    matrix.add_argument("--concurrency", help="comma-separated, e.g. 1,2,4")
    matrix.add_argument("--duration", type=float, help="seconds per measurement (default 30)")
    matrix.add_argument("--max-output", type=int, help="tokens per request (default 4096)")
    matrix.add_argument("--endpoint", choices=["chat", "completions"])
    matrix.add_argument("--api-key-env", help="environment variable holding the API key (default VLLM_API_KEY)")
    matrix.add_argument("--label", help="run label")
    matrix.add_argument("--out", required=True)
    matrix.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished cells")
    matrix.set_defaults(func=_matrix)

    run = sub.add_parser("run", help="execute the notebooks with a params file and write the reports")
    run.add_argument("params", help="YAML params file, e.g. params/demo.yaml")
    run.add_argument("--base-url", help="overrides base_url of the params file")
    run.add_argument("--out", help="results folder (default: outputs/<run_label>/<UTC timestamp>/)")
    run.add_argument("--outputs", default="outputs", help=argparse.SUPPRESS)
    run.add_argument("--resume", action="store_true", help="continue the run in --out")
    run.set_defaults(func=_run)

    imported = sub.add_parser("import-report", help="import a published speed test matrix text report as a run folder")
    imported.add_argument("file", help="the report's text, e.g. reference-reports/kimi-….txt")
    imported.add_argument("--out", required=True, help="run folder to write results.csv and run.json into")
    imported.add_argument("--report", action="store_true", help="also write report.html and report.md")
    imported.set_defaults(func=_import_report)

    comparison = sub.add_parser("compare", help="compare run folders (the first is the baseline): compare.html, .md")
    comparison.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="measured or imported run folders")
    comparison.add_argument("--out", required=True, help="folder for compare.ipynb, compare.html, compare.md")
    comparison.add_argument("--labels", help="comma-separated, one per run folder (default: run label + folder)")
    comparison.set_defaults(func=_compare)

    batch = sub.add_parser("batch", help="run every variant of a sweep file, then index.html/.md and a comparison")
    batch.add_argument("sweep", help="YAML sweep file, e.g. params/sweep-example.yaml")
    batch.add_argument("--out", help="batch folder (default: outputs/<sweep name>/<UTC timestamp>/)")
    batch.add_argument("--outputs", default="outputs", help=argparse.SUPPRESS)
    batch.add_argument("--resume", action="store_true", help="skip finished variants, continue the others in --out")
    batch.add_argument("--jobs", type=int, default=1, help="variants at once, each on its own server (default 1)")
    batch.add_argument("--ray", metavar="ADDRESS", help="run each variant as a task on this Ray cluster")
    batch.set_defaults(func=_batch)

    demo = sub.add_parser("demo", help="start the embedded vLLM, run params/demo.yaml, stop, print the report")
    demo.add_argument("--params", default="params/demo.yaml")
    demo.add_argument("--outputs", default="outputs")
    demo.set_defaults(func=_demo)
    add_rates_parser(sub)
    return parser


def _error(text: str) -> None:
    """Print an error on stderr, every secret this process knows redacted."""
    print(redact(f"error: {text}"), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ParamsError, ValueError) as exc:
        _error(str(exc))
        return 2
    except ServerError as exc:  # a launched server that did not come up: one line, its log named
        _error(exc.reason)
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
