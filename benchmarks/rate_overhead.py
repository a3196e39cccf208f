"""Does the toolkit's open-loop sender hold its schedule? The highest rate it sends on time, and its CPU per request.

Starts `synthetic_server.py` (pinned to core 1; tokens paced every `--interval-ms`, `--max-tokens` per request),
then, rate by rate up a ladder, runs side by side (each in its own process pinned to core 0, in alternating
order) the same seeded Poisson schedule through:
- `toolkit`: `toolkit.loadgen.open_loop.send_open_loop` on the toolkit's `StreamClient`, uvloop through
  `toolkit.matrix.runner.run_sync`, the heap frozen, as `toolkit.rates` runs a step;
- `peer`: a plain aiohttp client sending the way `vllm bench serve` does (delays precomputed, `asyncio.sleep`
  until each one, `asyncio.create_task` per request on one `ClientSession` with an unlimited `TCPConnector`, a
  reader on `iter_any()`), on the default asyncio loop as `vllm bench serve` runs.
Scheduling lag = send time - due time, per request. A client holds a rate when its lag p99 is under 5 ms and no
request failed; its ladder stops at the second rate it does not hold. CPU per request = the worker's process CPU
time over the step / requests sent, compared at the highest rate both held.

Usage: .venv/bin/python benchmarks/rate_overhead.py [--quick] [--duration S] [--rates 100,200,...] [--json FILE]
Last line: `rate_overhead: toolkit_max_rate=… peer_max_rate=… ratio=… cpu_us_per_request=…`.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from benchmarks.client_overhead import PROMPT, Server, _aiohttp_stream, pct, pin  # noqa: E402

LAG_LIMIT_MS = 5.0
LADDER = (50, 100, 200, 300, 400, 600, 800, 1200, 1600, 2400, 3200, 4800, 6400)
CLIENTS = ("toolkit", "peer")
LEAD_S = 0.3  # the schedule starts this long after the client is ready


def _summary(lags_s: list[float], errors: list[str], cpu_s: float, wall_s: float, n: int) -> dict[str, Any]:
    ms = lambda x: None if x is None else x * 1000  # noqa: E731
    return {"requests": n, "errors": len(errors), "first_error": errors[0] if errors else None,
            "lag_p50_ms": ms(pct(lags_s, 50)), "lag_p99_ms": ms(pct(lags_s, 99)), "lag_max_ms": ms(max(lags_s)),
            "cpu_s": cpu_s, "wall_s": wall_s, "cpu_us_per_request": 1e6 * cpu_s / n if n else None}  # fmt: skip


async def toolkit_worker(args: argparse.Namespace, due: list[float]) -> dict[str, Any]:
    from toolkit.loadgen.client import StreamClient, build_request
    from toolkit.loadgen.open_loop import PlannedRequest, send_open_loop
    from toolkit.matrix.heap import frozen_heap

    path, body = build_request("completions", "synthetic", PROMPT, args.max_tokens)
    requests = [PlannedRequest(path, body)] * len(due)
    async with StreamClient(f"http://127.0.0.1:{args.port}", read_timeout_s=60) as client:
        with frozen_heap():
            cpu0, start = time.process_time(), time.perf_counter() + LEAD_S
            records = await send_open_loop(client, requests, due, start=start)
            cpu1, wall = time.process_time(), time.perf_counter() - start
    lags = [r["sent_s"] - r["scheduled_s"] for r in records]
    return _summary(lags, [r["error"] for r in records if r["error"]], cpu1 - cpu0, wall, len(due))


async def peer_worker(args: argparse.Namespace, due: list[float]) -> dict[str, Any]:
    """As `vllm bench serve` sends (vllm/benchmarks/serve.py, get_request and benchmark)."""
    import asyncio

    import aiohttp

    from toolkit.loadgen.client import StreamResult, build_request

    path, body = build_request("completions", "synthetic", PROMPT, args.max_tokens)
    url = f"http://127.0.0.1:{args.port}{path}"
    results = [StreamResult() for _ in due]
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, use_dns_cache=True,
                                     keepalive_timeout=60, enable_cleanup_closed=True, force_close=False)  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as session:
        cpu0, start = time.process_time(), time.perf_counter() + LEAD_S
        tasks = []
        for i, delay in enumerate(due):
            if (sleep_s := start + delay - time.perf_counter()) > 0:
                await asyncio.sleep(sleep_s)
            tasks.append(asyncio.create_task(_aiohttp_stream(session, url, body, results[i])))
        await asyncio.gather(*tasks)
        cpu1, wall = time.process_time(), time.perf_counter() - start
    lags = [r.started - (start + d) for r, d in zip(results, due, strict=True)]
    return _summary(lags, [r.error for r in results if r.error], cpu1 - cpu0, wall, len(due))


def worker_main(args: argparse.Namespace) -> None:
    pin(0)
    from toolkit.loadgen.arrivals import schedule

    due = schedule(args.rate, duration_s=args.duration, seed=args.seed)
    if args.worker == "peer":
        import asyncio

        out = asyncio.run(peer_worker(args, due))
    else:
        from toolkit.matrix.runner import run_sync

        out = run_sync(lambda: toolkit_worker(args, due))
    print(json.dumps({"client": args.worker, "rate": args.rate, **out}), flush=True)


def run_client(server: Server, client: str, rate: float, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", client, "--port", str(server.port),
           "--rate", str(rate), "--duration", str(args.duration), "--max-tokens", str(args.max_tokens),
           "--seed", str(seed)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=args.duration + 120)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and server.get("/bench/stats")["running"] > 0:
        time.sleep(0.1)
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"client": client, "rate": rate, "errors": 1, "first_error": (done.stderr or done.stdout)[-300:],
                "lag_p99_ms": None, "cpu_us_per_request": None}  # fmt: skip


def holds(row: dict[str, Any]) -> bool:
    return row["errors"] == 0 and row["lag_p99_ms"] is not None and row["lag_p99_ms"] < LAG_LIMIT_MS


def fmt(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def sweep(server: Server, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every client up the ladder, side by side, until each has missed two rates."""
    misses = dict.fromkeys(CLIENTS, 0)
    rows: list[dict[str, Any]] = []
    for k, rate in enumerate(args.rates):
        order = CLIENTS if k % 2 == 0 else CLIENTS[::-1]
        for client in order:
            if misses[client] >= 2:
                continue
            row = run_client(server, client, rate, args, seed=k)
            misses[client] += not holds(row)
            rows.append(row)
            print(f"{rate:>6g}/s {client:<8} lag p50 {fmt(row.get('lag_p50_ms'))} p99 {fmt(row['lag_p99_ms'])} "
                  f"max {fmt(row.get('lag_max_ms'))} ms, cpu {fmt(row['cpu_us_per_request'], '.0f')} us/request, "
                  f"errors {row['errors']}{'' if holds(row) else '  (not held)'}", flush=True)  # fmt: skip
        if all(m >= 2 for m in misses.values()):
            break
    return rows


def final_line(rows: list[dict[str, Any]]) -> str:
    def best(client: str) -> float | None:
        held = [r["rate"] for r in rows if r["client"] == client and holds(r)]
        return max(held) if held else None

    toolkit, peer = best("toolkit"), best("peer")
    both = [r["rate"] for r in rows if r["client"] == "toolkit" and holds(r)
            and any(p["client"] == "peer" and p["rate"] == r["rate"] and holds(p) for p in rows)]  # fmt: skip
    at = max(both) if both else None
    cpu = {r["client"]: r["cpu_us_per_request"] for r in rows if r["rate"] == at}
    ratio = toolkit / peer if toolkit and peer else math.nan
    print(f"\nat {fmt(at, 'g')} req/s (highest both held): CPU per request toolkit {fmt(cpu.get('toolkit'), '.0f')} "
          f"us, peer {fmt(cpu.get('peer'), '.0f')} us")  # fmt: skip
    return (f"rate_overhead: toolkit_max_rate={fmt(toolkit, 'g')} peer_max_rate={fmt(peer, 'g')} ratio={ratio:.2f} "
            f"cpu_us_per_request={fmt(cpu.get('toolkit'), '.0f')}")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, default=8767)
    ap.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds of arrivals per rate (default 5)")
    ap.add_argument("--max-tokens", type=int, default=16, help="tokens per request (default 16)")
    ap.add_argument("--interval-ms", type=float, default=5.0, help="the server's time between tokens (default 5)")
    ap.add_argument("--rates", default=",".join(map(str, LADDER)), help="the ladder, requests/s, ascending")
    ap.add_argument("--quick", action="store_true", help="3 s per rate")
    ap.add_argument("--json", help="write every run's numbers here")
    args = ap.parse_args(argv)
    if args.worker:
        worker_main(args)
        return
    args.rates = [float(r) for r in args.rates.split(",")]
    args.duration = 3.0 if args.quick else args.duration
    server = Server(args.port)
    try:
        server.request("POST", "/bench/config", {"interval_ms": args.interval_ms, "log": False})
        print(
            f"synthetic server: {args.interval_ms:g} ms per token, {args.max_tokens} tokens per request; "
            f"{args.duration:g} s of Poisson arrivals per rate; held = lag p99 < {LAG_LIMIT_MS:g} ms, no error"
        )
        rows = sweep(server, args)
    finally:
        server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print(final_line(rows))


if __name__ == "__main__":
    main()
