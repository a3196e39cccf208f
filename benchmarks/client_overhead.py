"""How fast can the toolkit's streaming client ingest tokens, and how much timing error does it add?

Starts `synthetic_server.py` (pinned to core 1), then drives it with, side by side:
- `toolkit`: the toolkit's `StreamClient` as the toolkit runs it (arrival time = when the process reads the
  bytes; uvloop via `toolkit.matrix.runner.run_sync`, heap frozen by `toolkit.matrix.heap.frozen_heap`);
  `toolkit-kstamp`: the same with the kernel's receive timestamps (`benchmarks.kernel_stamps.KernelStampClient`);
  `toolkit-aiohttp`: the toolkit's previous aiohttp client (for the record);
- `aiohttp`: a plain aiohttp reader like vLLM's benchmark client (`iter_any()`, split on b"\\n\\n",
  `json.loads`), on the default asyncio loop as `vllm bench serve` runs it; `aiohttp+uvloop`: the same on uvloop;
- `guidellm`: GuideLLM 0.8.1 (`guidellm run`, concurrent profile), from .venv-bench at the checkout's root.
Every client runs in its own process pinned to core 0. Each load is run by every client in turn, rounds
repeated, medians reported.

Loads: "max ingest" (the server writes as fast as the socket takes it, 16 events a write: the client's own
ceiling) and "paced" (one token per stream per tick of `interval` ms, every stream on the same ticks like an
engine's decode steps). The server logs the send time of every token (perf_counter = CLOCK_MONOTONIC, one
clock for both processes), so for each pair of consecutive token events a client saw, `|measured gap - true
gap|` is the timing error the client added, and `arrival - send` its lag.

Usage: .venv/bin/python benchmarks/client_overhead.py [--quick] [--rounds N] [--duration S] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SERVER = HERE / "synthetic_server.py"
GUIDELLM = ROOT / ".venv-bench" / "bin" / "guidellm"
TOKENIZER = ROOT / ".cache" / "tiny-llama"
PROMPT = "Synthetic benchmark prompt: measure the client, not the server. " * 2
CLIENT_CPU, SERVER_CPU = 0, 1
PEERS = ("aiohttp", "aiohttp+uvloop", "guidellm")  # "toolkit-aiohttp" is the toolkit's own previous client
MODES = {"toolkit": "read-time", "toolkit-kstamp": "kernel-stamps"}
CLIENTS = (*MODES, "toolkit-aiohttp", *PEERS)


def pin(cpu: int, nice: int = 0) -> None:
    if hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > cpu:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {cpu})
    if nice:
        with contextlib.suppress(OSError):
            os.nice(nice)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q / 100 * len(s)))]


# ----------------------------------------------------------------------------------------------- worker side


def _timing_errors(streams: list[list[tuple[str, Any]]], logs: dict[str, list[float]], start: float, end: float
                   ) -> tuple[list[float], list[float], int]:  # fmt: skip
    """(|measured gap - true gap|, arrival - send) in seconds for token events inside the window, and the
    number of events left out because the server's send time was uncertain."""
    errors: list[float] = []
    lags: list[float] = []
    uncertain = 0
    for stream in streams:
        for user, r in stream:
            sent = logs.get(user)
            if not sent:
                continue
            prev: tuple[float, int] | None = None
            for t, count in r.token_events:
                if not (start < t <= end) or count > len(sent):
                    prev = None
                    continue
                s = sent[count - 1]
                if s is None or s != s:  # null/NaN: the server's send time is uncertain (its write() was slow)
                    uncertain += 1
                    prev = None
                    continue
                lags.append(t - s)
                if prev is not None:
                    errors.append(abs((t - prev[0]) - (s - sent[prev[1] - 1])))
                prev = (t, count)
    return errors, lags, uncertain


async def _aiohttp_stream(session: Any, url: str, body: dict[str, Any], r: Any) -> None:
    """vLLM-benchmark-style reader: iter_any, split on blank lines, json.loads every event."""
    import aiohttp

    r.started = time.perf_counter()
    try:
        async with session.post(url, json=body) as resp:
            if resp.status != 200:
                r.error = f"HTTP {resp.status}"
                return
            buffer = b""
            async for chunk in resp.content.iter_any():
                now = time.perf_counter()
                buffer += chunk
                *messages, buffer = buffer.split(b"\n\n")
                for message in messages:
                    message = message.strip()
                    if not message:
                        continue
                    data = message.removeprefix(b"data: ")
                    if data == b"[DONE]":
                        r.done = True
                        continue
                    obj = json.loads(data)
                    choices = obj.get("choices")
                    if choices and choices[0].get("text") and r.first_token_at is None:
                        r.first_token_at = now
                    usage = obj.get("usage")
                    if usage:
                        count = usage.get("completion_tokens") or 0
                        if count > r.completion_tokens:
                            r.completion_tokens = count
                            r.token_events.append((now, count))
            if not r.done:
                r.error = "stream ended before [DONE]"
    except aiohttp.ClientError as exc:
        r.error = f"{type(exc).__name__}: {exc}"
    finally:
        r.ended = time.perf_counter()


async def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    import asyncio

    import aiohttp

    from benchmarks.kernel_stamps import KernelStampClient
    from toolkit.loadgen.client import StreamClient, StreamResult, build_request
    from toolkit.matrix.heap import frozen_heap

    base = f"http://127.0.0.1:{args.port}"
    n, kind = args.streams, args.worker
    streams: list[list[tuple[str, StreamResult]]] = [[] for _ in range(n)]
    errors: list[str] = []

    async def loop(i: int, send: Any) -> None:
        j = 0
        while True:
            path, body = build_request("completions", "synthetic", PROMPT, args.max_tokens)
            body["user"] = f"{args.tag}-{i}-{j}"
            j += 1
            r = StreamResult()
            streams[i].append((body["user"], r))
            await send(path, body, r)
            if r.error:
                errors.append(r.error)
                await asyncio.sleep(0.05)

    async with contextlib.AsyncExitStack() as stack:
        if kind.startswith("toolkit"):
            if kind == "toolkit-aiohttp":
                sys.path.insert(0, str(HERE))
                from legacy_aiohttp_client import StreamClient as LegacyClient

                client: Any = LegacyClient(base, read_timeout_s=60)
            else:
                client = (KernelStampClient if kind == "toolkit-kstamp" else StreamClient)(base, read_timeout_s=60)
                stack.enter_context(frozen_heap())  # as the runner measures
            await stack.enter_async_context(client)
            send = client.stream
        else:
            timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
            session = await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=timeout)
            )

            async def send(path: str, body: dict[str, Any], r: StreamResult) -> None:
                await _aiohttp_stream(session, base + path, body, r)

        tasks = [asyncio.create_task(loop(i, send)) for i in range(n)]
        deadline = time.perf_counter() + args.warm_timeout
        while time.perf_counter() < deadline and not all(any(r.token_events for _, r in s) for s in streams):
            await asyncio.sleep(0.02)
        ready = all(any(r.token_events for _, r in s) for s in streams)
        await asyncio.sleep(args.settle)
        start, cpu0, times0 = time.perf_counter(), time.process_time(), os.times()
        await asyncio.sleep(args.duration)
        end, cpu1, times1 = time.perf_counter(), time.process_time(), os.times()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        logs: dict[str, list[float]] = {}
        if args.paced:
            async with aiohttp.ClientSession() as s, s.get(base + "/bench/log?clear=1") as resp:
                logs = json.loads(await resp.read())

    from toolkit.method.window import tokens_between

    results = [r for s in streams for _, r in s]
    tokens = sum(tokens_between(r, start, end) for r in results)
    gap_err, lags, uncertain = _timing_errors(streams, logs, start, end)
    ms = lambda x: None if x is None else x * 1000  # noqa: E731
    return {
        "client": kind, "streams": n, "start": start, "end": end, "ready": ready, "tokens": tokens,
        "tok_s": tokens / (end - start), "cpu_pct": 100 * (cpu1 - cpu0) / (end - start),
        "user_pct": 100 * (times1.user - times0.user) / (end - start),
        "sys_pct": 100 * (times1.system - times0.system) / (end - start), "ref_uncertain": uncertain,
        "requests": len(results), "completed": sum(r.done for r in results), "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "err_p50_ms": ms(pct(gap_err, 50)), "err_p99_ms": ms(pct(gap_err, 99)), "err_n": len(gap_err),
        "lag_p50_ms": ms(pct(lags, 50)), "lag_p99_ms": ms(pct(lags, 99)),
    }  # fmt: skip


def worker_main(args: argparse.Namespace) -> None:
    pin(CLIENT_CPU, args.nice)
    sys.path.insert(0, str(ROOT))
    if args.worker == "aiohttp":
        import asyncio

        out = asyncio.run(run_worker(args))
    else:
        from toolkit.matrix.runner import run_sync

        out = run_sync(lambda: run_worker(args))
    print(json.dumps(out), flush=True)


# ----------------------------------------------------------------------------------------- orchestrator side


@dataclass(frozen=True)
class Load:
    streams: int
    interval_ms: float  # 0 = max ingest

    @property
    def name(self) -> str:
        return f"max ×{self.streams}" if self.interval_ms == 0 else f"{self.interval_ms:g}ms ×{self.streams}"

    @property
    def offered(self) -> float | None:
        return None if self.interval_ms == 0 else self.streams * 1000 / self.interval_ms


Results = dict[tuple[Load, str], list[dict[str, Any]]]
PROBE = Load(256, 2.5)  # 102K tok/s offered: past this server's ceiling on a 2-core VM


class Server:
    def __init__(self, port: int, nice: int = 0) -> None:
        self.port = port
        # Its output goes to a file: a pipe nobody reads fills up and blocks the server mid-run.
        self.log = tempfile.NamedTemporaryFile(prefix="synthetic-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", str(port), "--cpu", str(SERVER_CPU), "--nice", str(nice)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                self.get("/health")
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("synthetic server did not start")

    def request(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body))
            data = conn.getresponse().read()
        finally:
            conn.close()
        return json.loads(data) if data else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        text = Path(self.log.name).read_text(errors="replace")
        problems = [line for line in text.splitlines() if line and not line.startswith("synthetic server on")]
        if problems:
            print(f"synthetic server said ({len(problems)} lines, in {self.log.name}):\n" + "\n".join(problems[:10]),
                  file=sys.stderr)  # fmt: skip
        else:
            Path(self.log.name).unlink(missing_ok=True)


def _tree_cpu(pid: int) -> float:
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def _prepare(server: Server, load: Load) -> None:
    server.request("POST", "/bench/config", {"interval_ms": load.interval_ms, "log": load.interval_ms > 0})
    server.get("/bench/log?clear=1")
    server.get("/bench/stats?clear=1")


def _drain(server: Server, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.get("/bench/stats")["running"] > 0:
        time.sleep(0.1)


def _poll(server: Server, proc: subprocess.Popen, tree: bool, timeout: float) -> list[dict[str, Any]]:
    samples = []
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            break
        s = server.get("/bench/stats")
        if tree:
            s["tree_cpu"] = _tree_cpu(proc.pid)
        samples.append(s)
        time.sleep(0.25)
    return samples


def _between(samples: list[dict[str, Any]], start: float, end: float) -> tuple[dict, dict] | None:
    inside = [s for s in samples if start <= s["wall"] <= end]
    return (inside[0], inside[-1]) if len(inside) >= 2 else None


def run_python_client(server: Server, kind: str, load: Load, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    _prepare(server, load)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", kind, "--port", str(server.port),
           "--streams", str(load.streams), "--duration", str(args.duration), "--max-tokens", str(args.max_tokens),
           "--tag", tag, "--settle", str(args.settle), "--nice", str(args.nice)]  # fmt: skip
    cmd += ["--paced"] if load.interval_ms else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    samples = _poll(server, proc, tree=False, timeout=args.duration + 120)
    out, err = proc.communicate()
    _drain(server)
    try:
        row = json.loads(out.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"client": kind, "failed": (err or out)[-500:]}
    pair = _between(samples, row["start"], row["end"])
    if pair:
        a, b = pair
        dt = b["wall"] - a["wall"]
        row["server_cpu_pct"] = 100 * (b["cpu_s"] - a["cpu_s"]) / dt
        row["server_sys_pct"] = 100 * (b["sys_s"] - a["sys_s"]) / dt
        row["server_tok_s"] = (b["tokens"] - a["tokens"]) / dt
        row["running"] = statistics.mean(s["running"] for s in samples if row["start"] <= s["wall"] <= row["end"])
    stats = server.get("/bench/stats")
    row["server_late_p99_ms"] = stats.get("late_p99_ms")
    return row


def run_guidellm(server: Server, load: Load, args: argparse.Namespace) -> dict[str, Any]:
    _prepare(server, load)
    workdir = Path(tempfile.mkdtemp(prefix="guidellm-"))
    warm = 3.0
    cmd = [str(GUIDELLM), "run",
           "--backend", f"kind=openai_http,target=http://127.0.0.1:{server.port},model=synthetic,"
                        "request_format=/v1/completions",
           "--profile", f"kind=concurrent,streams={load.streams}",
           "--constraint", f"kind=max_duration,seconds={warm + args.duration + 1:g}",
           "--data", f"kind=synthetic_text,prompt_tokens=16,output_tokens={args.max_tokens}",
           "--tokenizer", f"kind=huggingface_auto,model={TOKENIZER}",
           "--output", f"kind=json,path={workdir / 'out.json'}", "--disable-console-interactive"]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=workdir, env=env,
                            preexec_fn=lambda: pin(CLIENT_CPU, args.nice))  # fmt: skip
    import threading

    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(proc.stdout or []), daemon=True)
    reader.start()
    samples = _poll(server, proc, tree=True, timeout=args.duration + 300)
    proc.wait()
    reader.join(5)
    _drain(server)
    row: dict[str, Any] = {"client": "guidellm", "streams": load.streams}
    flowing = [s for s in samples if s["tokens"] > samples[0]["tokens"]] if samples else []
    if proc.returncode != 0 or len(flowing) < 4:
        shutil.rmtree(workdir, ignore_errors=True)
        return {**row, "failed": f"exit {proc.returncode}: " + "".join(log)[-500:]}
    start = flowing[0]["wall"] + warm
    pair = _between(samples, start, start + args.duration)
    if pair is None:
        return {**row, "failed": "no steady window"}
    a, b = pair
    dt = b["wall"] - a["wall"]
    row.update(start=a["wall"], end=b["wall"], tok_s=(b["tokens"] - a["tokens"]) / dt,
               cpu_pct=100 * (b["tree_cpu"] - a["tree_cpu"]) / dt, server_tok_s=(b["tokens"] - a["tokens"]) / dt,
               server_cpu_pct=100 * (b["cpu_s"] - a["cpu_s"]) / dt,
               running=statistics.mean(s["running"] for s in samples if a["wall"] <= s["wall"] <= b["wall"]),
               server_late_p99_ms=server.get("/bench/stats").get("late_p99_ms"))  # fmt: skip
    with contextlib.suppress(OSError, json.JSONDecodeError, KeyError, IndexError):
        bench = json.loads((workdir / "out.json").read_text())["benchmarks"][0]
        itl = [r["inter_token_latency_ms"] for r in bench["requests"]["successful"] if r["inter_token_latency_ms"]]
        row["guidellm_itl_mean_p50_ms"] = pct(itl, 50)
        row["errors"] = len(bench["requests"]["errored"])
    shutil.rmtree(workdir, ignore_errors=True)
    return row


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "—" if x is None else format(x, spec)


def summarize(results: Results, loads: list[Load], clients: list[str]) -> str:
    head = ("| load | offered tok/s | client | achieved tok/s | held | client CPU % (sys) | CPU µs/tok "
            "| err p50 / p99 ms | lag p50 / p99 ms | server CPU % | server late p99 ms | running | runs |")  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for load in loads:
        for client in clients:
            rows = [r for r in results.get((load, client), []) if "failed" not in r]
            failed = [r for r in results.get((load, client), []) if "failed" in r]
            if not rows and not failed:
                continue
            if not rows:
                lines.append(f"| {load.name} | {_fmt(load.offered)} | {client} | failed: "
                             f"{failed[0]['failed'][:60]!r} | | | | | | | | | {len(failed)} |")  # fmt: skip
                continue
            tok, cpu = _median(rows, "tok_s"), _median(rows, "cpu_pct")
            us = None if not tok or cpu is None else cpu / 100 / tok * 1e6
            held = "" if not load.offered or tok is None else f"{100 * tok / load.offered:.0f} %"
            err = f"{_fmt(_median(rows, 'err_p50_ms'), '.3f')} / {_fmt(_median(rows, 'err_p99_ms'), '.2f')}"
            lag = f"{_fmt(_median(rows, 'lag_p50_ms'), '.2f')} / {_fmt(_median(rows, 'lag_p99_ms'), '.1f')}"
            if client == "guidellm":
                err = lag = "n/a (per-request means)" if load.interval_ms else "—"
            elif not load.interval_ms:
                err = lag = "—"
            late = _fmt(_median(rows, "server_late_p99_ms"), ".1f") if load.interval_ms else "—"
            runs = f"{len(rows)}{'+' + str(len(failed)) + ' failed' if failed else ''}"
            sys_pct = _median(rows, "sys_pct")
            sys_part = "" if sys_pct is None else f" ({sys_pct:.0f})"
            lines.append(
                f"| {load.name} | {_fmt(load.offered)} | {client} | {_fmt(tok)} | {held} | {_fmt(cpu)}{sys_part} "
                f"| {_fmt(us, '.1f')} | {err} | {lag} | {_fmt(_median(rows, 'server_cpu_pct'))} | {late} "
                f"| {_fmt(_median(rows, 'running'), '.0f')} | {runs} |"
            )
    return "\n".join(lines)


def _best(results: Results, loads: list[Load], client: str, *, paced: bool = True) -> float | None:
    """The highest median tok/s over loads of >= 128 streams (a paced one only if held without errors)."""
    vals = []
    for load in loads:
        if load.streams < 128 or (load.interval_ms and not paced):
            continue
        rows = [r for r in results.get((load, client), []) if "failed" not in r]
        if rows and not any(r.get("errors") for r in rows):
            vals.append(_median(rows, "tok_s"))
    found = [v for v in vals if v is not None]
    return max(found) if found else None


def _goal(loads: list[Load]) -> Load | None:
    """The goal load: the lightest paced one of >= 128 streams offering >= 50K tok/s (256 x 5 ms)."""
    goal = [ld for ld in loads if ld.interval_ms and ld.streams >= 128 and (ld.offered or 0) >= 50_000]
    return min(goal, key=lambda ld: ld.offered or 0) if goal else None


def modes_table(results: Results, loads: list[Load], clients: list[str]) -> str:
    """The toolkit's arrival-time modes side by side: max ingest, its ratio to aiohttp+uvloop in the same run,
    and the timing error at every paced load."""
    paced = [ld for ld in loads if ld.interval_ms]
    ref = _best(results, loads, "aiohttp+uvloop", paced=False)
    head = ("| client | arrival time | max ingest tok/s | × aiohttp+uvloop |"
            + "".join(f" {ld.name} err p50 / p99 ms |" for ld in paced))  # fmt: skip
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for client in (c for c in clients if c in MODES):
        tok = _best(results, loads, client, paced=False)
        ratio = None if not tok or not ref else tok / ref
        errs = "".join(
            f" {_fmt(_median(results.get((ld, client), []), 'err_p50_ms'), '.3f')} / "
            f"{_fmt(_median(results.get((ld, client), []), 'err_p99_ms'), '.2f')} |" for ld in paced
        )  # fmt: skip
        lines.append(f"| {client} | {MODES[client]} | {_fmt(tok)} | {_fmt(ratio, '.2f')} |{errs}")
    return "\n".join(lines)


def final_line(results: Results, loads: list[Load], clients: list[str]) -> str:
    """One line: the toolkit's mode (the default, read-time, when it ran), its best rate, the best peer's, the
    ratio and the toolkit's p99 timing error at the goal load."""
    client = next((c for c in MODES if c in clients), "toolkit")
    toolkit = _best(results, loads, client)
    peers = {c: v for c in clients if c in PEERS and (v := _best(results, loads, c)) is not None}
    peer_name, peer_val = max(peers.items(), key=lambda kv: kv[1]) if peers else ("none", None)
    goal = _goal(loads)
    p99 = _median(results.get((goal, client), []), "err_p99_ms") if goal else None
    ratio = None if not toolkit or not peer_val else toolkit / peer_val
    return (f"client_overhead: mode={MODES.get(client, client)} toolkit={_fmt(toolkit, '.0f')} "
            f"best_peer={peer_name}:{_fmt(peer_val, '.0f')} ratio={_fmt(ratio, '.2f')} "
            f"p99_error_ms={_fmt(p99, '.2f')}")  # fmt: skip


def _progress(elapsed: float, rnd: int, rounds: int, load: Load, client: str, row: dict[str, Any]) -> None:
    head = f"[{elapsed:5.0f}s] round {rnd + 1}/{rounds} {load.name:>12} {client:>15}: "
    if "failed" in row:
        print(head + f"FAILED {row['failed'][:200]}", file=sys.stderr, flush=True)
        return
    print(head + f"{row['tok_s']:9,.0f} tok/s  cpu {row['cpu_pct']:5.1f}%  err p99 "
          f"{_fmt(row.get('err_p99_ms'), '.2f')} ms  lag p99 {_fmt(row.get('lag_p99_ms'), '.1f')} ms  "
          f"server cpu {_fmt(row.get('server_cpu_pct'))}%  late p99 {_fmt(row.get('server_late_p99_ms'), '.1f')} ms",
          file=sys.stderr, flush=True)  # fmt: skip


def _load_of(row: dict[str, Any]) -> Load:
    name = row["load"]
    interval = 0.0 if name.startswith("max") else float(name.split("ms")[0])
    return Load(int(row["streams"]), interval)


def report(paths: list[str]) -> None:
    """The tables and final line of saved `--json` runs, every round of every file pooled."""
    results: Results = {}
    loads: list[Load] = []
    clients: list[str] = []
    for path in paths:
        rows = json.loads(Path(path).read_text())
        if any(r["client"] == "toolkit-readtime" for r in rows):  # written when `toolkit` meant kernel stamps
            renamed = {"toolkit": "toolkit-kstamp", "toolkit-readtime": "toolkit"}
            rows = [{**r, "client": renamed.get(r["client"], r["client"])} for r in rows]
        for row in rows:
            load = _load_of(row)
            loads += [load] if load not in loads else []
            clients += [row["client"]] if row["client"] not in clients else []
            results.setdefault((load, row["client"]), []).append(row)
    print(summarize(results, loads, clients))
    print(modes_table(results, loads, clients))
    print(final_line(results, loads, clients))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="short run (< 2 minutes): 2 loads, 1 round, no GuideLLM")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=float, default=None, help="measurement window per run, seconds")
    ap.add_argument("--settle", type=float, default=1.0, help="seconds after every stream's first token")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--port", type=int, default=18765)
    ap.add_argument("--clients", default=None, help="comma list of " + ",".join(CLIENTS))
    ap.add_argument("--loads", default=None, help="comma list like max:128,5:256 (interval ms:streams)")
    ap.add_argument("--json", default=None, help="write every run's raw numbers here")
    ap.add_argument("--report", nargs="+", metavar="JSON", help="only print the table of saved runs (pooled)")
    ap.add_argument(
        "--nice",
        type=int,
        default=0,
        help="nice value for server and clients (e.g. -10 as root on a shared machine: measures the "
        "client, not the neighbours' load)",
    )
    # worker mode (internal)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--streams", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--tag", default="w", help=argparse.SUPPRESS)
    ap.add_argument("--paced", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--warm-timeout", type=float, default=30.0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.duration = args.duration or 10.0
        worker_main(args)
        return

    if args.report:
        report(args.report)
        return
    if args.quick:
        loads = [Load(128, 0), Load(256, 5)]
        rounds, args.duration = args.rounds or 1, args.duration or 4.0
        clients = ["toolkit", "aiohttp", "aiohttp+uvloop"]
    else:
        loads = [Load(1, 0), Load(32, 0), Load(128, 0), Load(256, 0), Load(256, 10), Load(128, 5), Load(256, 5),
                 PROBE]  # fmt: skip
        rounds, args.duration = args.rounds or 2, args.duration or 8.0
        clients = ["toolkit", "toolkit-kstamp", "toolkit-aiohttp", "aiohttp", "aiohttp+uvloop", "guidellm"]
    if args.loads:
        loads = [Load(int(s), 0 if i == "max" else float(i)) for i, s in (x.split(":") for x in args.loads.split(","))]
    if args.clients:
        clients = args.clients.split(",")
    guidellm_loads = {Load(128, 0), Load(256, 0), Load(128, 5), Load(256, 5)} if not args.loads else set(loads)
    if "guidellm" in clients and not GUIDELLM.exists():
        print(f"guidellm: not installed at {GUIDELLM}; skipped", file=sys.stderr)
        clients.remove("guidellm")

    pin(SERVER_CPU)  # the orchestrator mostly sleeps; keep it off the client's core
    server = Server(args.port, args.nice)
    results: Results = {}
    raw: list[dict[str, Any]] = []
    t0 = time.monotonic()
    try:
        for rnd in range(rounds):
            for load in loads:
                order = clients[rnd % len(clients) :] + clients[: rnd % len(clients)]
                for client in order:
                    if client == "guidellm" and load not in guidellm_loads:
                        continue
                    if load == PROBE and client not in ("toolkit", "aiohttp+uvloop") and not args.loads:
                        continue  # beyond the server's own ceiling: shows where it caps, one peer is enough
                    if client == "guidellm":
                        row = run_guidellm(server, load, args)
                    else:
                        row = run_python_client(server, client, load, args, tag=f"{client}-{rnd}")
                    row.update(load=load.name, round=rnd)
                    results.setdefault((load, client), []).append(row)
                    raw.append(row)
                    _progress(time.monotonic() - t0, rnd, rounds, load, client, row)
    finally:
        server.stop()
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))
    print(summarize(results, loads, clients))
    print(modes_table(results, loads, clients))
    print(final_line(results, loads, clients))


if __name__ == "__main__":
    main()
