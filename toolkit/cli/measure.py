"""The commands that measure: serve, matrix, interleave, run, batch, demo."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from toolkit.base.api_keys import ApiKey, api_key_from_env
from toolkit.base.errors import ParamsError
from toolkit.cli.output import error
from toolkit.rates.cli import add_request_options

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
        scheduling_policy=args.scheduling_policy,
        model=args.model,
        lora=args.lora,
        log_requests=args.log_requests,
    )
    config.check()
    return serve_forever(config)


def _matrix_values(args: argparse.Namespace) -> dict[str, object]:
    """RunParams values of the options `_add_matrix_options` adds (None where not given)."""
    return {"model": args.model, "contexts": args.contexts, "concurrency": args.concurrency,
            "duration_s": args.duration, "max_output": args.max_output, "endpoint": args.endpoint,
            "api_key_env": args.api_key_env, "control_window_s": args.control_window,
            "read_timeout_s": args.read_timeout, "batch_size": getattr(args, "batch_size", None),
            "response_format": args.response_format, "tools": args.tools,
            "tool_choice": args.tool_choice}  # fmt: skip


def _matrix(args: argparse.Namespace) -> int:
    from toolkit.params import make_params

    values = {**_matrix_values(args), "base_url": args.base_url, "run_label": args.label, "repeats": args.repeats,
              "server_metrics": args.server_metrics}  # fmt: skip
    params = make_params({k: v for k, v in values.items() if v is not None})  # bad input fails before pandas loads
    api_key = ApiKey.from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    from toolkit.base.folder_lock import hold
    from toolkit.matrix.runner import run_matrix
    from toolkit.reports.embeddings_tables import embeddings_table, has_embeddings
    from toolkit.reports.tables import decode_matrix, error_lines, prefill_table, summary_line
    from toolkit.results.store import to_dataframe

    out = Path(args.out)
    with hold(out):
        _say_if_nothing_to_resume(out, args.resume)
        measurements = run_matrix(params, out, resume=args.resume, api_key=api_key)
        frame = to_dataframe(measurements)
        frame.to_csv(out / "results.csv", index=False)
    if has_embeddings(frame):
        print(embeddings_table(frame).to_string(index=False))
    else:
        print(prefill_table(frame).to_string(index=False))
        print()
        print(decode_matrix(frame).to_string())
    print(f"\n{summary_line(frame)}")  # with how many measurements stayed disturbed, if any
    for line in error_lines(frame):
        print(line)
    print(f"results: {out / 'results.jsonl'}, {out / 'results.csv'}, {out / 'run.json'}")
    return 0


def _interleave(args: argparse.Namespace) -> int:
    from toolkit.method.paired import rounds_problem
    from toolkit.params import make_params

    if (problem := rounds_problem(args.rounds)) is not None:  # before any server is asked anything
        raise ParamsError(f"rounds: {args.rounds}; allowed: {problem}")

    labels = [args.label_a, args.label_b]
    if labels[0] == labels[1]:
        raise ParamsError(f"label-b: {labels[1]!r} is also label-a; the two sides need their own labels")
    values = _matrix_values(args)  # the request options too: both sides' decode requests carry the same
    params = {
        label: make_params({**{k: v for k, v in values.items() if v is not None}, "base_url": url, "run_label": label})
        for label, url in zip(labels, (args.a_url, args.b_url), strict=True)
    }
    api_key_from_env(params[labels[0]].api_key_env)
    from toolkit.batch.interleave import run_interleaved

    report = run_interleaved(params, args.rounds, Path(args.out))
    print(report.read_text(encoding="utf-8"))
    print(f"report: {report}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from toolkit.base.folder_lock import hold
    from toolkit.jupyter.pipeline import new_run_dir, prepare_run, run_one
    from toolkit.params import load_run_file

    if args.resume and not args.out:
        raise ParamsError("--resume: give the run's folder with --out")
    params, spec = load_run_file(args.params, base_url=args.base_url, server_metrics=args.server_metrics)
    run = prepare_run(params, spec, preflight=True)  # bad input fails here, before any load is sent or a folder made
    if args.out:
        out, resume = Path(args.out), args.resume
    else:
        out, resume = new_run_dir(args.outputs, params.run_label), False
    with hold(out):  # one run at a time writes into a folder: the lock is held until the reports are written
        _say_if_nothing_to_resume(out, resume)
        result = run_one(run, out, resume=resume)
    _print_errors(out)
    return _reported(result)


def _say_if_nothing_to_resume(out: Path, resume: bool) -> None:
    """With --resume and no run in `out` (the folder already ours: a folder in use is refused first), one line saying
    that a new run starts there: a mistyped folder would otherwise measure everything again without a word."""
    from toolkit.results.store import RUN_FILE, nothing_to_resume

    if resume and not (out / RUN_FILE).exists():
        print(nothing_to_resume(out, RUN_FILE, "run"), file=sys.stderr)


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
        error(result.server_died)
        return 1
    if heading:
        print(f"\n{heading}:")
    for name, path in result.paths.items():
        print(f"{'  ' if heading else ''}{name}: {path}")
    return 0


def _batch(args: argparse.Namespace) -> int:
    from toolkit.batch.runner import main as run_batch

    return run_batch(args.sweep, out=args.out, outputs=args.outputs, resume=args.resume, jobs=args.jobs, ray=args.ray)


def _demo(args: argparse.Namespace) -> int:
    from toolkit.base.folder_lock import hold
    from toolkit.jupyter.pipeline import new_run_dir, prepare_run, run_one
    from toolkit.jupyter.run_sweep import check_rate_sweep
    from toolkit.params import load_params
    from toolkit.servers.embedded.server import embedded_launch

    params = load_params(args.params)
    sweep = check_rate_sweep(params)  # a sweep with images is served by the embedded vision model
    images = 0 if sweep is None else sweep.most_images()
    run = prepare_run(*embedded_launch(params, images=images))  # launched and stopped as a server: block would be
    print("starting the embedded vLLM (about a minute) ...", flush=True)
    out = new_run_dir(args.outputs, params.run_label)
    with hold(out):
        result = run_one(run, out)
    return _reported(result, heading="report")


def add_serve(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run the embedded vLLM (tiny model) on 127.0.0.1 in the foreground")
    serve.add_argument("--port", type=int)
    serve.add_argument("--max-model-len", type=int, default=8192)
    serve.add_argument("--kv-blocks", type=int, help="KV cache size in blocks of 128 tokens")
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--stream-interval", type=int, default=1)
    serve.add_argument("--scheduling-policy", choices=["fcfs", "priority"], default="fcfs",
                       help="priority: vLLM serves lower `priority` first (traffic classes send it)")  # fmt: skip
    serve.add_argument("--model", choices=["tiny-llama", "tiny-embedding", "tiny-vision"], default="tiny-llama",
                       help="tiny-embedding: the same tiny model, /v1/embeddings only; tiny-vision: chat with one "
                       "image a request (a BLIP-2 shaped model, each image 32 prompt tokens)")  # fmt: skip
    serve.add_argument("--lora", action="store_true",
                       help="also serve a random-weight LoRA adapter on tiny-llama, as model `tiny-lora`")  # fmt: skip
    serve.add_argument("--log-requests", action="store_true",
                       help="log a line per request received, naming its LoRA adapter (rates --server-log reads "
                       "it)")  # fmt: skip
    serve.set_defaults(func=_serve)


def _add_matrix_options(parser: argparse.ArgumentParser, *, embeddings: bool = False) -> None:
    """What a matrix measures, as `matrix` and `interleave` take it (`_matrix_values` reads it back); `embeddings`:
    the matrix of an embedding model too (`matrix` only)."""
    parser.add_argument("--model")
    parser.add_argument("--contexts", help="comma-separated, e.g. 1K,2K (default: rules of docs/method/matrix.md)")
    parser.add_argument("--concurrency", help="comma-separated, e.g. 1,2,4")
    parser.add_argument("--duration", type=float, help="seconds per measurement (default 30)")
    parser.add_argument("--max-output", type=int, help="tokens per request (default 4096)")
    if embeddings:
        parser.add_argument("--endpoint", choices=["chat", "completions", "embeddings"],
                            help="embeddings: input length × simultaneous requests on /v1/embeddings, instead of "
                                 "prefill and decode (--contexts: input lengths)")  # fmt: skip
        parser.add_argument("--batch-size", type=int, help="embeddings: inputs per request (default 1)")
    else:
        parser.add_argument("--endpoint", choices=["chat", "completions"])
    parser.add_argument("--api-key-env", help="environment variable holding the API key (default VLLM_API_KEY)")
    parser.add_argument("--control-window", type=float, help="drift control cell's window in s (default 5; 0: off)")
    parser.add_argument("--read-timeout", type=float, help="s a reply may send nothing before it fails (default 300)")
    add_request_options(parser, carried_by="every decode request", reported_by="each decode cell")


SERVER_METRICS_HELP = (
    "the /metrics of the servers behind --base-url (a gateway's replicas), comma-separated: each a server URL or "
    "its full /metrics URL; scraped and summed instead of the gateway's own"
)


def add_matrix(sub: argparse._SubParsersAction) -> None:
    matrix = sub.add_parser("matrix", help="measure prefill and the decode matrix of a running server")
    matrix.add_argument("--base-url", required=True)
    matrix.add_argument("--server-metrics", metavar="URL[,URL...]", help=SERVER_METRICS_HELP)
    _add_matrix_options(matrix, embeddings=True)
    matrix.add_argument("--label", help="run label")
    matrix.add_argument("--repeats", type=int, help="measure the whole matrix this many times, in rounds (default 1)")
    matrix.add_argument("--out", required=True)
    matrix.add_argument("--resume", action="store_true", help="continue the run in --out, skipping finished cells")
    matrix.set_defaults(func=_matrix)


def add_interleave(sub: argparse._SubParsersAction) -> None:
    inter = sub.add_parser("interleave", help="compare two running servers measured in alternating rounds (A B B A)")
    inter.add_argument("--a-url", required=True, help="baseline server, e.g. http://127.0.0.1:8000")
    inter.add_argument("--b-url", required=True, help="the server compared with it")
    inter.add_argument("--label-a", default="A")
    inter.add_argument("--label-b", default="B")
    inter.add_argument(
        "--rounds", type=int, default=4, help="rounds, each one run per side (default 4; an even number, at least 2)"
    )
    _add_matrix_options(inter)
    inter.add_argument("--out", required=True)
    inter.set_defaults(func=_interleave)


def add_run(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="execute the notebooks with a params file and write the reports")
    run.add_argument("params", help="YAML params file, e.g. params/demo.yaml")
    run.add_argument("--base-url", help="overrides base_url of the params file")
    run.add_argument(
        "--server-metrics",
        metavar="URL[,URL...]",
        help=f"overrides server_metrics of the params file: {SERVER_METRICS_HELP}",
    )
    run.add_argument("--out", help="results folder (default: outputs/<run_label>/<UTC timestamp>/)")
    run.add_argument("--outputs", default="outputs", help=argparse.SUPPRESS)
    run.add_argument("--resume", action="store_true", help="continue the run in --out")
    run.set_defaults(func=_run)


def add_batch(sub: argparse._SubParsersAction) -> None:
    batch = sub.add_parser("batch", help="run every variant of a sweep file, then index.html/.md and a comparison")
    batch.add_argument("sweep", help="YAML sweep file, e.g. params/sweep-example.yaml")
    batch.add_argument("--out", help="batch folder (default: outputs/<sweep name>/<UTC timestamp>/)")
    batch.add_argument("--outputs", default="outputs", help=argparse.SUPPRESS)
    batch.add_argument("--resume", action="store_true", help="skip finished variants, continue the others in --out")
    batch.add_argument("--jobs", type=int, default=1, help="variants at once, each on its own server (default 1)")
    batch.add_argument("--ray", metavar="ADDRESS", help="run each variant as a task on this Ray cluster")
    batch.set_defaults(func=_batch)


def add_demo(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="start the embedded vLLM, run params/demo.yaml, stop, print the report")
    demo.add_argument("--params", default="params/demo.yaml")
    demo.add_argument("--outputs", default="outputs")
    demo.set_defaults(func=_demo)
