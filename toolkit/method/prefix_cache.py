"""The prefix-cache hit rate a shared-prefix workload should produce, and the one the server measured (pure).

vLLM caches prompts in whole blocks of `block_size` tokens and counts, per scheduled request, the prompt tokens it
looked up (`prefix_cache_queries`) and those it found (`prefix_cache_hits`). A request whose first `prefix_tokens`
tokens another request of the same step already sent finds the whole blocks of them: ⌊prefix_tokens / block_size⌋
blocks. The first request of each prefix finds nothing (each step's prefixes are its own). Requests sent while the
first of their group is still in prefill may find less; the unique part after the prefix may add a block when it
starts like its neighbours'. So the expectation is the workload's construction, and the measurement the server's.
"""

from __future__ import annotations

from collections.abc import Sequence


def expected_hit_rate(
    groups: Sequence[int], input_tokens: Sequence[int], prefix_tokens: int, block_size: int | None
) -> float | None:
    """Cached tokens over prompt tokens for requests sent in this order, each sharing its group's prefix; None
    when the block size is unknown or nothing is sent."""
    total = sum(input_tokens)
    if not block_size or not total:
        return None
    seen: set[int] = set()
    hits = 0
    for group in groups:
        if group in seen:
            hits += (prefix_tokens // block_size) * block_size
        seen.add(group)
    return hits / total


def measured_hit_rate(hits: float | None, queries: float | None) -> float | None:
    """The server's hits over its queries between two scrapes; None when either is unknown or nothing was queried."""
    if hits is None or queries is None or queries <= 0:
        return None
    return hits / queries
