"""Cold prefill: one request of max_tokens = 1; prompt tok/s = prompt tokens / TTFT (docs/method/cells.md)."""

from __future__ import annotations

import asyncio

from toolkit.base.schema import Measurement
from toolkit.loadgen.client import Endpoint, StreamClient, StreamResult, build_request
from toolkit.matrix.prometheus import cached_prompt_tokens
from toolkit.matrix.sampler import Sampler, loop_lag_ms
from toolkit.matrix.server_api import ServerAPI
from toolkit.method.status import disturbance


async def measure_prefill(
    client: StreamClient,
    api: ServerAPI,
    *,
    model: str,
    endpoint: Endpoint,
    prompt: str,
    context_tokens: int,
    context: str,
) -> Measurement:
    """Send the scout request and verify it was cold with the server's prefix-cache hit counters.

    `cached_tokens` is what the server found cached between the two scrapes: the GPU prefix cache's hits plus, where
    a KV connector exports them, its external tier's (`vllm:external_prefix_cache_hits`, in tokens too: an offloaded
    or shared copy of the prompt makes the prefill as warm as a GPU hit); without `/metrics`, the usage report's
    `prompt_tokens_details.cached_tokens` (which vLLM counts over both tiers too).

    The event loop's lag is probed meanwhile: a pause of the machine that blocked it inflates the TTFT, and
    the measurement says so in `disturbed` (the runner then measures again with a fresh, cold prompt).
    """
    before = await api.metrics_or_none()
    path, body = build_request(endpoint, model, prompt, 1)
    async with Sampler(api, use_metrics=False) as sampler:
        result: StreamResult = await client.stream(path, body)
        await asyncio.sleep(sampler.probe_interval_s)  # a block that ended the request is seen by the next probe
    end = (result.ended or result.started) + sampler.probe_interval_s
    lag_max = loop_lag_ms(sampler.samples, result.started, end, 100)
    after = await api.metrics_or_none()
    hits = cached_prompt_tokens(before, after)
    cached = int(hits) if hits is not None else result.cached_tokens
    ttft_s = result.ttft_s
    if result.error or ttft_s is None or not result.prompt_tokens:
        return Measurement(
            phase="prefill",
            context_tokens=context_tokens,
            context=context,
            concurrency=1,
            status="Error",
            prompt_tokens=result.prompt_tokens,
            cached_tokens=cached,
            error=result.error or "no token received",
            completed=0,
        )
    return Measurement(
        phase="prefill",
        context_tokens=context_tokens,
        context=context,
        concurrency=1,
        status="Valid",
        total_tok_s=result.prompt_tokens / ttft_s,
        ttft_ms=ttft_s * 1000,
        completed=1 if result.done else 0,
        prompt_tokens=result.prompt_tokens,
        cached_tokens=cached,
        status_basis="server" if hits is not None else "client",
        loop_lag_max_ms=lag_max,
        disturbed=disturbance(silence_s=0.0, tbt_ms=None, loop_lag_max_ms=lag_max, max_sample_gap_s=None),
    )
