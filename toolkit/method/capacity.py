"""The Over capacity rule (docs/method/matrix.md, Capacity): N × (context + max_output) > KV budget (tokens)."""

from __future__ import annotations


def request_tokens(context: int, max_output: int) -> int:
    """KV cache tokens one request can occupy: its prompt plus its full output."""
    return context + max_output


def is_over_capacity(concurrency: int, context_tokens: int, max_output: int, kv_budget_tokens: int) -> bool:
    """True when ``concurrency`` requests at this context would exceed the KV budget."""
    return concurrency * request_tokens(context_tokens, max_output) > kv_budget_tokens
