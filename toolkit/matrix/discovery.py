"""Server discovery: what is served, how long a context it takes, and how much KV cache it has."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from toolkit.base.api_keys import redact
from toolkit.base.errors import DiscoveryError, ServerAPIError
from toolkit.matrix.prometheus import MetricsSnapshot, cache_config
from toolkit.matrix.server_api import ServerAPI

MAX_PLAUSIBLE_MODEL_LEN = 2**24  # 16.8M tokens: past the longest context served today (10M)


@dataclass(frozen=True)
class ServerInfo:
    """The facts of a server a run depends on, recorded in run.json."""

    base_url: str
    model: str
    max_model_len: int
    version: str | None
    kv_budget_tokens: int | None
    kv_budget_source: str
    block_size: int | None
    prefix_caching: bool | None
    metrics_available: bool
    metrics_problem: str | None = None  # why server-side figures are unavailable (unreachable, a gateway's metrics)
    cache_config_problem: str | None = None  # the cache sizes refused (0 or less, not finite): treated as unknown
    models: list[dict[str, Any]] = field(default_factory=list)
    cache_config: dict[str, str] = field(default_factory=dict)
    # `server_metrics`: the /metrics URLs scraped instead of base_url's, and the line saying so (None: base_url's)
    metrics_endpoints: list[str] = field(default_factory=list)
    metrics_source: str | None = None


def metrics_source_text(urls: list[str]) -> str | None:
    """What run.json and the report say of `server_metrics`: ``server-side figures from 2 endpoints: URL, URL``
    (their counters and running requests summed, KV cache use the highest, the KV cache size the first's)."""
    if not urls:
        return None
    noun = "endpoint" if len(urls) == 1 else "endpoints"
    return redact(f"server-side figures from {len(urls)} {noun}: {', '.join(urls)}")


async def discover(
    api: ServerAPI,
    *,
    model: str | None = None,
    max_model_len: int | None = None,
    kv_budget_tokens: int | None = None,
    api_key_env: str = "VLLM_API_KEY",
) -> ServerInfo:
    """Ask the server; parameters given explicitly win over what it reports."""
    try:
        models = await api.models()
    except ServerAPIError as exc:
        if exc.status == 401:
            state = "holds a key the server refused" if api.has_key else "is unset"
            raise DiscoveryError(
                f"api_key_env: {api.base_url} answered 401 Unauthorized and {api_key_env} {state}; "
                f"allowed: the server's key in {api_key_env}, or another variable named by api_key_env"
            ) from None
        raise DiscoveryError(f"base_url: {exc}") from None
    served = [str(m.get("id")) for m in models]
    if model is None:
        if not served:
            raise DiscoveryError(f"model: {api.base_url} serves no model")
        model = served[0]
    elif model not in served:
        raise DiscoveryError(f"model: {model!r} is not served by {api.base_url}; served: {', '.join(served)}")
    entry = next((m for m in models if m.get("id") == model), {})
    parent = next((m for m in models if entry.get("parent") is not None and m.get("id") == entry["parent"]), {})
    max_len = max_model_len or entry.get("max_model_len") or parent.get("max_model_len")  # a LoRA card has none
    if not max_len:
        raise DiscoveryError("max_model_len: the server does not report it; give it as a parameter")
    if type(max_len) is not int or max_len < 1:
        raise DiscoveryError(
            f"max_model_len: {api.base_url}/v1/models reports {str(max_len)[:40]!r}, not a "
            "positive whole number; give it as a parameter"
        )
    if max_len > MAX_PLAUSIBLE_MODEL_LEN:  # prompts are built up to it: 10**12 spun the CPU with no output
        raise DiscoveryError(
            f"max_model_len: {api.base_url}/v1/models reports {max_len:,} tokens, more than the "
            f"{MAX_PLAUSIBLE_MODEL_LEN:,} any served model takes; give it as a parameter"
        )
    try:
        snapshot: MetricsSnapshot | None = await api.metrics()
        metrics_problem = None
    except ServerAPIError as exc:
        snapshot, metrics_problem = None, str(exc)
    config = cache_config(snapshot) if snapshot else None
    try:
        version = await api.version()
    except ServerAPIError as exc:
        raise DiscoveryError(f"base_url: {exc}") from None
    budget, source = (
        (kv_budget_tokens, "parameter") if kv_budget_tokens else (config.budget_tokens if config else (None, "unknown"))
    )
    return ServerInfo(
        base_url=api.base_url,
        model=model,
        max_model_len=max_len,
        version=version,
        kv_budget_tokens=budget,
        kv_budget_source=source,
        block_size=config.block_size if config else None,
        prefix_caching=config.prefix_caching if config else None,
        metrics_available=snapshot is not None,
        metrics_problem=metrics_problem,
        models=models,
        cache_config=config.labels if config else {},
        cache_config_problem=config.problem if config else None,
        metrics_endpoints=[redact(url) for url in api.metrics_urls],
        metrics_source=metrics_source_text(api.metrics_urls),
    )
