"""One embeddings cell of the matrix: N loops of `/v1/embeddings` requests, a ramp, a fixed window, the loops'
last replies read, drain (docs/method/embeddings-matrix.md); judged by toolkit.method.embedding_cell."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from dataclasses import dataclass, field

from toolkit.base.errors import ParamsError
from toolkit.base.schema import Measurement
from toolkit.base.text import printable
from toolkit.loadgen.client import ENDPOINT_PATHS, Endpoint
from toolkit.loadgen.embeddings import EmbeddingClient, EmbeddingResult, embeddings_body, probe_embeddings
from toolkit.matrix.decode import drain
from toolkit.matrix.prometheus import PROMPT_TOKENS, delta
from toolkit.matrix.prompts import build_prompt
from toolkit.matrix.sampler import Sampler
from toolkit.matrix.server_api import ServerAPI
from toolkit.method.embedding_cell import EmbeddingRequest, judge_embeddings_window, prompt_token_problem
from toolkit.params import RunParams

# In an input's text: replaced by the cell's, the request's and the input's numbers, its width kept (the cell's is
# drawn at random: a cell measured again, by a resume too, sends no input an earlier one sent).
PLACEHOLDER = "#000000.000000.000"


async def check_embeddings(client: EmbeddingClient, base_url: str, model: str) -> None:
    """ParamsError in one line when the server does not embed `model` (one request of one input, before any cell)."""
    if problem := await probe_embeddings(client, model):
        raise ParamsError(f"endpoint: embeddings: {base_url} does not serve embeddings of {printable(model)!r} "
                          f"({problem})")  # fmt: skip


async def check_generates(api: ServerAPI, embedder: EmbeddingClient, endpoint: Endpoint, model: str) -> None:
    """ParamsError in one line when the server serves embeddings only: it has no route for `endpoint` (a GET of it
    answers 404, where a generating vLLM answers 405) and it embeds `model` (one request of one input, asked only
    then: a gateway that answers 404 to a GET is not refused on that alone)."""
    path = ENDPOINT_PATHS[endpoint]
    if await api.route_status(path) != 404 or await probe_embeddings(embedder, model) is not None:
        return
    raise ParamsError(f"endpoint: {endpoint}: {api.base_url} serves embeddings only ({path} answers 404); measure "
                      "it with endpoint embeddings (--endpoint embeddings)")  # fmt: skip


async def check_endpoint(api: ServerAPI, params: RunParams, model: str, api_key: str | None) -> None:
    """ParamsError in one line when the server does not serve the run's kind: embeddings for an embeddings run,
    generation for the others."""
    async with EmbeddingClient(params.base_url, api_key=api_key, read_timeout_s=params.read_timeout_s) as embedder:
        if params.endpoint == "embeddings":
            await check_embeddings(embedder, params.base_url, model)
        else:
            await check_generates(api, embedder, params.generation_endpoint, model)


async def input_text(api: ServerAPI, model: str, tokens: int, prefix: str) -> str:
    """An input of `tokens` tokens as the server counts them, starting with `prefix` and `PLACEHOLDER`."""
    return (await build_prompt(api, model, tokens, f"{prefix}{PLACEHOLDER} ", chat=False)).text


@dataclass(frozen=True)
class EmbeddingSpec:
    """What an embeddings cell sends: `concurrency` loops of requests of `batch_size` inputs, each input `text`
    with its `PLACEHOLDER` made unique (no two inputs alike: nothing is served from a cache)."""

    model: str
    text: str
    batch_size: int
    concurrency: int
    duration_s: float
    readiness_timeout_s: float = 120.0
    drain_timeout_s: float = 120.0
    cell_number: int = field(default_factory=lambda: random.SystemRandom().randrange(10**6))

    def body(self, request: int) -> dict[str, object]:
        """The request's body: its inputs' placeholders filled with the cell's, its own and their numbers."""
        numbers = f"#{self.cell_number:06d}.{request % 10**6:06d}"
        return embeddings_body(self.model, [self.text.replace(PLACEHOLDER, f"{numbers}.{j:03d}", 1)
                                            for j in range(self.batch_size)])  # fmt: skip


async def _loop(
    client: EmbeddingClient,
    spec: EmbeddingSpec,
    numbers: itertools.count[int],
    results: list[EmbeddingResult],
    stop: asyncio.Event,
    failed: asyncio.Event,
) -> None:
    """Send, read the whole reply, send again at once, until told to stop (the last reply read) or one fails."""
    while not stop.is_set() and not failed.is_set():
        result = EmbeddingResult()
        results.append(result)
        await client.post(spec.body(next(numbers)), result)
        if result.error:
            failed.set()
            return


async def _ramp(loops: list[list[EmbeddingResult]], failed: asyncio.Event, timeout_s: float) -> str | None:
    """Wait until every loop has had a reply (the server runs them all); why not, or None."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline and not failed.is_set():
        if all(any(r.prompt_tokens is not None for r in results) for results in loops):
            return None
        await asyncio.sleep(0.02)
    return None if failed.is_set() else f"not every loop had a reply within the readiness timeout {timeout_s:g} s"


def _requests(loops: list[list[EmbeddingResult]], batch_size: int) -> list[EmbeddingRequest]:
    return [
        EmbeddingRequest(r.started, r.ended, batch_size, r.prompt_tokens, r.error)
        for results in loops
        for r in results
        if r.started is not None and r.ended is not None
    ]


async def measure_embeddings_cell(
    client: EmbeddingClient,
    api: ServerAPI,
    spec: EmbeddingSpec,
    *,
    context_tokens: int,
    context: str,
    use_metrics: bool = True,
) -> Measurement:
    """Run one cell; failures become status Error, never exceptions. The loops stop after the window and their
    last replies are read, so every prompt the server counted over the cell has its reply's count beside it."""
    n = spec.concurrency
    loops: list[list[EmbeddingResult]] = [[] for _ in range(n)]
    stop, failed, numbers = asyncio.Event(), asyncio.Event(), itertools.count()
    wall0 = time.perf_counter()
    async with Sampler(api, use_metrics=use_metrics) as sampler:
        before_cell = await api.metrics_or_none() if use_metrics else None
        tasks = [asyncio.create_task(_loop(client, spec, numbers, loops[i], stop, failed)) for i in range(n)]
        late = await _ramp(loops, failed, spec.readiness_timeout_s)
        readiness_s = time.perf_counter() - wall0
        start = time.perf_counter()
        if late is None and not failed.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(spec.duration_s):
                    await failed.wait()
        end = min(time.perf_counter(), start + spec.duration_s)
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)  # each loop's last reply read (or its deadline)
        windows_s = time.perf_counter() - start
        samples = sampler.samples.server_between(start, end) if sampler.use_metrics else None
    drain_started = time.perf_counter()
    drained = await drain(api, spec.drain_timeout_s, use_metrics)
    drain_s = time.perf_counter() - drain_started
    after_cell = await api.metrics_or_none() if use_metrics else None
    requests = _requests(loops, spec.batch_size)
    error = late if late is not None else None
    if error is None and not drained:
        error = f"server did not drain within {spec.drain_timeout_s:g} s after the cell"
    figures = judge_embeddings_window(requests, start, end, concurrency=n, server_samples=samples, error=error)
    client_tokens = sum(r.prompt_tokens or 0 for r in requests if r.ok)
    server_tokens = delta(before_cell, after_cell, PROMPT_TOKENS)
    one = next((r for r in requests if r.ok), None)
    return Measurement(
        phase="embeddings", context_tokens=context_tokens, context=context, concurrency=n, **figures,
        batch_size=spec.batch_size, prompt_tokens=None if one is None else (one.prompt_tokens or 0) // one.items,
        client_prompt_tokens=client_tokens, server_prompt_tokens=None if server_tokens is None else int(server_tokens),
        metrics_problem=None if figures["status"] == "Error" else prompt_token_problem(server_tokens, client_tokens),
        readiness_s=readiness_s, windows_s=windows_s, retries_s=0.0, drain_s=drain_s,
        cell_wall_s=time.perf_counter() - wall0, attempts=1,
    )  # fmt: skip
