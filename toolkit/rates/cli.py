"""`python -m toolkit rates`: the sweep from the command line (or a params YAML), a line per step, the table."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from toolkit.base.errors import ParamsError

# command-line flag -> RateParams field (flags whose value is given as is)
_FLAGS: dict[str, str] = {
    "base_url": "base_url", "server_metrics": "server_metrics", "model": "model", "api_key_env": "api_key_env",
    "endpoint": "endpoint", "batch_size": "batch_size", "rates": "rates",
    "arrival": "arrival", "burstiness": "burstiness", "duration": "duration_s", "requests": "requests_per_step",
    "max_in_flight": "max_in_flight", "seed": "seed", "input_tokens": "input_tokens",
    "output_tokens": "output_tokens", "dataset": "dataset", "replay": "replay", "slo_ttft_ms": "slo_ttft_ms",
    "slo_tpot_ms": "slo_tpot_ms", "slo_e2e_ms": "slo_e2e_ms", "goodput_target": "goodput_target",
    "search_precision": "search_precision",
    "out": "results_dir", "label": "run_label", "ray": "ray_address", "clients": "clients",
    "steady_trim": "steady_trim", "workload": "workload", "prefixes": "prefixes", "prefix_tokens": "prefix_tokens",
    "prefix_choice": "prefix_choice", "turns": "turns", "think_time": "think_time_s",
    "think_time_dist": "think_time_dist", "warmup_turns": "warmup_turns", "trace": "trace",
    "trace_format": "trace_format", "time_scale": "time_scale", "trace_start": "trace_start_s",
    "trace_duration": "trace_duration_s", "trace_block_tokens": "trace_block_tokens", "warmup": "warmup_s",
    "percentiles": "percentiles", "response_format": "response_format", "tools": "tools",
    "tool_choice": "tool_choice", "classes": "classes", "images": "images", "image_size": "image_size",
    "server_log": "server_log",
}  # fmt: skip


def add_request_options(parser: argparse.ArgumentParser, *, carried_by: str, reported_by: str) -> None:
    """`--response-format`, `--tools` and `--tool-choice`, declared once for `rates` and `matrix`
    (toolkit.cli.measure) in one wording: carried by `carried_by` ("every request"), reported by `reported_by`
    ("each step")."""
    parser.add_argument("--response-format", metavar="KIND",
                        help=f"structured output, carried by {carried_by}: json_object, or json_schema:FILE (a JSON "
                        f"Schema); {reported_by} reports the share of replies that kept to it")  # fmt: skip
    parser.add_argument("--tools", metavar="FILE",
                        help=f"tool calls (chat only), carried by {carried_by}: a JSON file of OpenAI function tools; "
                        f"{reported_by} reports the share of replies that called one, and with valid "
                        "arguments")  # fmt: skip
    parser.add_argument("--tool-choice", metavar="CHOICE",
                        help="with --tools: auto, required (default), none, or a function's name")  # fmt: skip


def add_parser(sub: Any) -> None:
    """Register the `rates` subcommand on the toolkit's subparsers."""
    p = sub.add_parser("rates", help="open-loop request-rate sweep: latency, goodput, the highest rate under an SLO")
    p.add_argument(
        "--params", help="YAML file of sweep parameters, or a run params file with a `rate_sweep:` block; flags win"
    )
    p.add_argument("--base-url", help="server, e.g. http://127.0.0.1:8000")
    p.add_argument(
        "--server-metrics",
        metavar="URL[,URL...]",
        help="the /metrics of the servers behind --base-url (a gateway's replicas), comma-separated: each a server "
        "URL or its full /metrics URL; scraped and summed instead of the gateway's own",
    )
    p.add_argument("--model", metavar="NAME or NAME=W,NAME=W",
                   help="served model (default: the first one served); or a mix, e.g. tiny-llama=1,tiny-lora=1: "
                   "each arrival picks its model by weight (from the seed), each step reports each model's "
                   "figures")  # fmt: skip
    p.add_argument("--api-key-env", help="environment variable holding the API key (default VLLM_API_KEY)")
    p.add_argument("--server-log", metavar="FILE",
                   help="the server's log (vLLM --enable-log-requests): each step counts the requests the server "
                   "received, by LoRA adapter, beside the client's")  # fmt: skip
    p.add_argument("--endpoint", choices=["chat", "completions", "embeddings"],
                   help="embeddings: /v1/embeddings, not streamed, --batch-size inputs of --input-tokens")  # fmt: skip
    p.add_argument("--batch-size", type=int, help="embeddings: inputs per request (default 1)")
    p.add_argument("--rates", help="requests/s per step, comma-separated; inf = all at once (e.g. 1,2,4,inf)")
    p.add_argument("--arrival", choices=["poisson", "constant", "gamma"])
    p.add_argument("--burstiness", type=float, help="gamma shape: 1 = Poisson, < 1 burstier (arrival gamma)")
    p.add_argument("--duration", type=float, help="seconds of arrivals per step (default 30)")
    p.add_argument("--requests", type=int, help="requests per step, instead of --duration")
    p.add_argument("--max-in-flight", type=int, help="cap on requests in flight (default: none)")
    p.add_argument("--steady-trim", type=float,
                   help="share of each step's schedule at each end left out of its percentiles (0.1)")  # fmt: skip
    p.add_argument("--keep-draw", action="store_true",
                   help="keep each step's arrivals as drawn (default: rescaled to the offered rate)")  # fmt: skip
    p.add_argument("--seed", type=int)
    p.add_argument("--percentiles", help="latency percentiles per step besides 50, 90, 99 (e.g. 95,99.9)")
    p.add_argument("--input-tokens", help="128, or uniform:MIN:MAX, normal:MEAN:STD:MIN:MAX, lognormal:MEAN:SIGMA:…")
    p.add_argument("--output-tokens", help="as --input-tokens")
    p.add_argument("--classes", metavar="FILE",
                   help="traffic classes: a YAML list (or a mapping with a `classes:` list) of name, weight, "
                   "input_tokens, output_tokens, slo_ttft_ms/slo_tpot_ms/slo_e2e_ms and an optional priority, model, "
                   "endpoint (chat or completions), request kinds (response_format, tools, tool_choice, images, "
                   "image_size) and prompt source (a dataset in place of input_tokens, or workload shared-prefix with "
                   "prefixes, prefix_tokens, prefix_choice) in place of the sweep's; each arrival picks one by "
                   "weight, each judged against its own SLO")  # fmt: skip
    p.add_argument("--dataset", help="JSONL (prompt or messages, optional output_tokens) or ShareGPT JSON file")
    add_request_options(p, carried_by="every request", reported_by="each step")
    p.add_argument("--images", type=int, metavar="N",
                   help="images (chat only): every request carries N synthetic PNGs beside its text, each from its "
                   "own seed (default 0: none)")  # fmt: skip
    p.add_argument("--image-size", metavar="WxH", help="with --images: each image's size in pixels (224x224)")
    p.add_argument("--replay", metavar="FILE",
                   help="one step replaying another tool's result file: its arrival times and lengths")  # fmt: skip
    p.add_argument("--workload", choices=["shared-prefix", "conversation"],
                   help="shared-prefix: prompts that start alike; conversation: turns re-send the history")  # fmt: skip
    p.add_argument("--prefixes", type=int, help="shared-prefix: how many distinct prefixes")
    p.add_argument("--prefix-tokens", type=int, help="shared-prefix: each prefix's length in tokens")
    p.add_argument("--prefix-choice", choices=["uniform", "zipf"], help="shared-prefix: how requests pick one")
    p.add_argument("--turns", type=int, help="conversation: turns per conversation (rates: conversations/s)")
    p.add_argument("--think-time", type=float, help="conversation: seconds from a reply to the next turn (0)")
    p.add_argument("--think-time-dist", choices=["fixed", "exponential"],
                   help="conversation: think times fixed, or drawn per turn around --think-time")  # fmt: skip
    p.add_argument("--warmup-turns", type=int, help="conversation: first turns left out of the summary (1)")
    p.add_argument("--cold-control", action="store_true",
                   help="conversation: after each step, its prompt lengths again, cold, at the same times")  # fmt: skip
    p.add_argument("--trace", metavar="FILE", help="one step replaying a request trace's arrivals and lengths")
    p.add_argument("--trace-format", choices=["mooncake", "azure"], help="the trace's layout (JSONL, CSV)")
    p.add_argument("--time-scale", type=float, help="trace: replay this many times as fast (1)")
    p.add_argument("--trace-start", type=float, help="trace: seconds into the trace to start at (0)")
    p.add_argument("--trace-duration", type=float, help="trace: seconds of the trace to replay (all)")
    p.add_argument("--trace-block-tokens", type=int, help="Mooncake trace: tokens per hash_ids block (512)")
    p.add_argument("--warmup", type=float, help="each step's first seconds: recorded, left out of its summary (0)")
    p.add_argument("--warm-prompts", action="store_true", help="one shared prefix instead of cold prompts")
    p.add_argument("--no-drain", action="store_true", help="do not wait for an idle server between steps")
    p.add_argument("--slo-ttft-ms", type=float)
    p.add_argument("--slo-tpot-ms", type=float)
    p.add_argument("--slo-e2e-ms", type=float)
    p.add_argument("--goodput-target", type=float, help="fraction of requests that must meet the SLO (0.99)")
    p.add_argument("--search", action="store_true", help="bisect for the highest rate meeting the SLO")
    p.add_argument("--search-precision", type=float, help="relative width at which the search stops (0.1)")
    p.add_argument("--ray", metavar="ADDRESS", help="send each step from --clients processes on this Ray cluster")
    p.add_argument("--clients", type=int, help="client processes per step on the Ray cluster (default 1)")
    p.add_argument("--out", help="run folder (default: outputs/<label>/<UTC timestamp>/)")
    p.add_argument("--label", help="run label")
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out: finished steps are kept")
    p.set_defaults(func=main)


def params_from_args(args: argparse.Namespace) -> Any:
    """RateParams from the flags (and the params file); ParamsError in one line."""
    from toolkit.rates.params import load_rate_params, make_rate_params

    values: dict[str, Any] = {field: getattr(args, flag) for flag, field in _FLAGS.items()}
    if args.warm_prompts:
        values["cold_prompts"] = False
    if args.no_drain:
        values["drain"] = False
    if args.keep_draw:
        values["rescale_schedule"] = False
    if args.search:
        values["search"] = True
    if args.cold_control:
        values["cold_control"] = True
    if args.params:
        return load_rate_params(args.params, **values)
    if args.base_url is None:
        raise ParamsError("base-url: required (or a --params file that sets base_url)")
    return make_rate_params({k: v for k, v in values.items() if v is not None})


def main(args: argparse.Namespace) -> int:
    params = params_from_args(args)
    if args.resume and params.results_dir is None:
        raise ParamsError("resume: needs --out (the folder of the sweep to continue)")
    from toolkit.base.api_keys import api_key_from_env

    api_key_from_env(params.api_key_env)  # a key that cannot be used fails before anything is written
    from toolkit.rates.files import read_steps
    from toolkit.rates.runner import run_rates

    out = run_rates(params, say=lambda line: print(line, file=sys.stderr, flush=True), resume=args.resume)
    print(summary_table([step.as_dict() for step in read_steps(out)]))
    print(f"results: {out / 'rates'} (sweep.json, steps.jsonl, step-NNN.parquet), {out / 'run.json'}")
    return 0


def summary_table(rows: list[dict[str, Any]]) -> str:
    """The steps as a text table: load, throughput, latency (TTFT from the scheduled arrival), goodput, queue, lag
    (and with a response format, the share of valid replies); an embeddings sweep's `embeddings_table`."""
    if any(r.get("items_s") is not None for r in rows):
        return embeddings_table(rows)
    head = (
        f"{'step':>4} {'offered':>8} {'sent':>7} {'ok':>9} {'tok/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} "
        f"{'TPOT p50':>9} {'goodput':>8} {'SLO':>5} {'waiting':>7} {'lag p99':>8}"
    )
    structured = any(r.get("schema_valid_share") is not None for r in rows)  # a response format: its valid share
    lines = [head + (f" {'valid':>6}" if structured else "")]
    for r in rows:
        num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        offered = "inf" if r["offered_rate"] == float("inf") else f"{r['offered_rate']:g}"
        lines.append(
            f"{r['step']:>4} {offered:>8} {num(r['achieved_rate'], '.2f'):>7} "
            f"{str(r['completed']) + '/' + str(r['requests']):>9} {r['output_tok_s']:>7.0f} "
            f"{num(r.get('ttft_sched_p50_ms'), '.1f'):>9} {num(r.get('ttft_sched_p99_ms'), '.1f'):>9} "
            f"{num(r['tpot_p50_ms'], '.1f'):>9} "
            f"{r['goodput']:>8.2f} {r['slo_fraction']:>5.0%} {num(r['server_waiting_max'], 'd'):>7} "
            f"{num(r['lag_p99_ms'], '.1f'):>8}"
            + (f" {num(r.get('schema_valid_share'), '.0%'):>6}" if structured else "")
            + (" *" if r["lag_flagged"] else "")
        )
    lines.append("TTFT from each request's scheduled arrival (what a user arriving then waited); TPOT from the send")
    if any(r.get("classes") for r in rows):
        lines.extend(classes_table(rows))
    if any(r.get("models") for r in rows):
        lines.extend(models_table(rows))
    if any(r["lag_flagged"] for r in rows):
        lines.append("* the client could not hold the schedule (scheduling lag p99 over the flag): load understated")
    return "\n".join(lines)


def classes_table(rows: list[dict[str, Any]]) -> list[str]:
    """A class sweep's steps, class by class: its share of the arrivals, TTFT and TPOT, goodput and the share meeting
    its own SLO with its 95 % interval; then, for a class with a response format or tools, its replies' valid or
    tool-calling share."""
    num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    lines = [f"{'step':>4} {'class':<12} {'share':>6} {'ok':>9} {'TTFT p90':>9} {'TPOT p90':>9} {'goodput':>8} "
             f"{'SLO':>5} {'interval':>13} verdict"]  # fmt: skip
    for r in rows:
        for name, c in (r.get("classes") or {}).items():
            ok = f"{c['completed']}/{c['requests']}"
            lines.append(
                f"{r['step']:>4} {name[:12]:<12} {c['share']:>6.0%} {ok:>9} "
                f"{num(c.get('ttft_sched_p90_ms'), '.1f'):>9} {num(c.get('tpot_p90_ms'), '.1f'):>9} "
                f"{c['goodput']:>8.2f} {c['slo_fraction']:>5.0%} "
                f"[{c['slo_fraction_low']:.2f}, {c['slo_fraction_high']:.2f}] {c['slo_verdict']}{_kind_shares(c)}"
            )
    return [*lines, "each class against its own SLO (TTFT from the scheduled arrival); share: of the step's arrivals"]


def _kind_shares(figures: dict[str, Any]) -> str:
    """A class's replies against its request kinds, as a step's line says them: ``, 75% valid``, ``, 50% called a
    tool``; "" for a class without a response format or tools."""
    shares = [(figures.get("schema_valid_share"), "valid"), (figures.get("tool_called_share"), "called a tool")]
    return "".join(f", {share:.0%} {what}" for share, what in shares if share is not None)


def models_table(rows: list[dict[str, Any]]) -> list[str]:
    """A model mix's steps, model by model: its share of the arrivals, achieved rate, TTFT and TPOT, and with a
    service level its goodput and the share meeting it."""
    num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    lines = [f"{'step':>4} {'model':<20} {'share':>6} {'ok':>9} {'req/s':>7} {'TTFT p50':>9} {'TTFT p90':>9} "
             f"{'TPOT p90':>9} {'goodput':>8} {'SLO':>5}"]  # fmt: skip
    for r in rows:
        for name, m in (r.get("models") or {}).items():
            slo, ok = bool(m.get("limit_fractions")), f"{m['completed']}/{m['requests']}"
            met = format(m["slo_fraction"], ".0%") if slo else "-"
            lines.append(
                f"{r['step']:>4} {name[:20]:<20} {m['share']:>6.0%} {ok:>9} "
                f"{num(m.get('achieved_rate'), '.2f'):>7} {num(m.get('ttft_sched_p50_ms'), '.1f'):>9} "
                f"{num(m.get('ttft_sched_p90_ms'), '.1f'):>9} {num(m.get('tpot_p90_ms'), '.1f'):>9} "
                f"{num(m.get('goodput') if slo else None, '.2f'):>8} {met:>5}"
            )
    return [*lines, "each served model of the mix (TTFT from the scheduled arrival); share: of the step's arrivals"]


def embeddings_table(rows: list[dict[str, Any]]) -> str:
    """An embeddings sweep's steps as a text table: load, inputs and their prompt tokens per second, end-to-end
    latency from the scheduled arrival, goodput, queue, lag."""
    head = (
        f"{'step':>4} {'offered':>8} {'sent':>7} {'ok':>9} {'items/s':>8} {'in tok/s':>9} {'e2e p50':>8} "
        f"{'e2e p90':>8} {'e2e p99':>8} {'goodput':>8} {'SLO':>5} {'waiting':>7} {'lag p99':>8}"
    )
    lines = [head]
    for r in rows:
        num = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
        offered = "inf" if r["offered_rate"] == float("inf") else f"{r['offered_rate']:g}"
        lines.append(
            f"{r['step']:>4} {offered:>8} {num(r['achieved_rate'], '.2f'):>7} "
            f"{str(r['completed']) + '/' + str(r['requests']):>9} {num(r.get('items_s'), '.1f'):>8} "
            f"{num(r.get('input_tok_s'), '.0f'):>9} {num(r.get('e2e_sched_p50_ms'), '.1f'):>8} "
            f"{num(r.get('e2e_sched_p90_ms'), '.1f'):>8} {num(r.get('e2e_sched_p99_ms'), '.1f'):>8} "
            f"{r['goodput']:>8.2f} {r['slo_fraction']:>5.0%} {num(r['server_waiting_max'], 'd'):>7} "
            f"{num(r['lag_p99_ms'], '.1f'):>8}" + (" *" if r["lag_flagged"] else "")
        )
    lines.append("embeddings: end-to-end latency from each request's scheduled arrival to its whole reply")
    if any(r["lag_flagged"] for r in rows):
        lines.append("* the client could not hold the schedule (scheduling lag p99 over the flag): load understated")
    return "\n".join(lines)
