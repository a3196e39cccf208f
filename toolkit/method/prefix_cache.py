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
    return expected_hit_tokens(groups, prefix_tokens, block_size) / total


def expected_hit_tokens(groups: Sequence[int], prefix_tokens: int, block_size: int) -> int:
    """The prompt tokens requests sent in this order find cached, each sharing its group's prefix: the whole blocks
    of it, from the second request of a group on."""
    seen: set[int] = set()
    hits = 0
    for group in groups:
        if group in seen:
            hits += whole_blocks(prefix_tokens, block_size)
        seen.add(group)
    return hits


def measured_hit_rate(hits: float | None, queries: float | None) -> float | None:
    """The server's hits over its queries between two scrapes; None when either is unknown or nothing was queried."""
    if hits is None or queries is None or queries <= 0:
        return None
    return hits / queries


def whole_blocks(tokens: int, block_size: int) -> int:
    """The tokens of `tokens` that fill whole blocks."""
    return (tokens // block_size) * block_size


def cacheable(prompt_tokens: int, block_size: int) -> int:
    """The most a prompt can find cached: its whole blocks before its last token (one token is always computed)."""
    return whole_blocks(max(0, prompt_tokens - 1), block_size)


def expected_trace_hit_rate(
    hash_ids: Sequence[Sequence[int]], input_tokens: Sequence[int], trace_block: int, block_size: int | None
) -> float | None:
    """Cached over prompt tokens for a trace's requests in order of arrival: a request finds the leading blocks of
    its `hash_ids` that an earlier request sent (a block's id stands for the whole prefix up to it), in whole blocks
    of the server's size; nothing is evicted. None when the block size is unknown or nothing is sent."""
    total = sum(input_tokens)
    if not block_size or not total:
        return None
    seen: set[tuple[int, ...]] = set()
    hits = 0
    for ids, tokens in zip(hash_ids, input_tokens, strict=True):
        shared = 0
        while shared < len(ids) and tuple(ids[: shared + 1]) in seen:
            shared += 1
        hits += min(whole_blocks(shared * trace_block, block_size), cacheable(tokens, block_size))
        seen.update(tuple(ids[: j + 1]) for j in range(len(ids)))
    return hits / total


def expected_conversation_hit_rate(
    turns: Sequence[int], history_tokens: Sequence[int], input_tokens: Sequence[int], block_size: int | None
) -> float | None:
    """Cached over prompt tokens for conversation turns: a later turn finds the whole blocks of its history (the
    previous turn's prompt and reply, which its own prompt starts with); a first turn finds nothing (each
    conversation starts with its own marker). The reply comes back as text, so it is tokenized again: where that
    gives other tokens than were generated, less is found. None when the block size is unknown or nothing is sent."""
    total = sum(input_tokens)
    if not block_size or not total:
        return None
    hits = sum(
        min(whole_blocks(history, block_size), cacheable(tokens, block_size))
        for turn, history, tokens in zip(turns, history_tokens, input_tokens, strict=True)
        if turn > 1
    )
    return hits / total
