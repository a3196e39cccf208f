"""Prompts of an exact token count, measured with the server's own tokenizer (`/tokenize`)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from toolkit.base.errors import PromptError
from toolkit.matrix.server_api import ServerAPI

_SYLLABLES = [a + b for a in "bdfgklmnprstvz" for b in "aeiou"]
MAX_TOKENIZE_CALLS = 64  # a build takes about a dozen; far more means the counts do not follow the words


def prompt_tolerance(target_tokens: int) -> int:
    """Allowed distance from the target: max(16, 0.5 %) as docs/method/matrix.md, Prompts, states."""
    return max(16, int(target_tokens * 0.005))


def marker(run_id: str, context_label: str, stream: int | None = None, version: int = 1) -> str:
    """Prefix that makes a prompt unique per run and context (and stream, and version after a retry), so no
    cache entry is shared."""
    suffix = f" stream {stream}" if stream is not None else ""
    suffix += f" take {version}" if version > 1 else ""
    return f"[speed test run {run_id} context {context_label}{suffix}] "


def filler(words: int, seed: str) -> str:
    """Deterministic text of `words` pseudo-words."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choices(_SYLLABLES, k=rng.randint(1, 3))) for _ in range(words))


@dataclass(frozen=True)
class Prompt:
    text: str
    target_tokens: int
    tokens: int


async def build_prompt(api: ServerAPI, model: str, target_tokens: int, prefix: str, *, chat: bool) -> Prompt:
    """Grow or shrink filler after `prefix` until the server counts `target_tokens` (within tolerance).

    Secant steps on the word count, then word-by-word; tokenize calls are cheap next to a measurement, but at
    most `MAX_TOKENIZE_CALLS` of them: counts that stop rising (a tokenizer that truncates) end in PromptError.
    """
    counts: list[int] = []

    async def count(n: int) -> int:
        if len(counts) == MAX_TOKENIZE_CALLS:
            raise PromptError(
                f"contexts: could not build a prompt of {target_tokens} tokens: /tokenize counts did "
                f"not reach it in {MAX_TOKENIZE_CALLS} calls (last {counts[-1]}, highest "
                f"{max(counts)})"
            )
        counts.append(await api.count_tokens(model, prefix + filler(n, prefix), chat=chat))
        return counts[-1]

    base = await count(0)
    most_words = 2 * target_tokens + 16  # a word is at least half a token (the secant's own assumption)
    words = max(0, (target_tokens - base) // 2)
    tokens = await count(words)
    for _ in range(8):
        if tokens == target_tokens or (words == 0 and tokens > target_tokens):
            break
        per_word = max((tokens - base) / words, 0.5) if words else 2.0
        step = round((target_tokens - tokens) / per_word)
        if step == 0:
            break
        words = min(max(0, words + step), most_words)
        tokens = await count(words)
    # Finish by single words from below, so we end at or just under the target.
    while tokens > target_tokens and words > 0:
        words -= 1
        tokens = await count(words)
    while words < most_words:
        nxt = await count(words + 1)
        if nxt > target_tokens:
            break
        words, tokens = words + 1, nxt
    if abs(tokens - target_tokens) > prompt_tolerance(target_tokens):
        raise PromptError(f"contexts: could not build a prompt of {target_tokens} tokens (got {tokens})")
    return Prompt(prefix + filler(words, prefix), target_tokens, tokens)
