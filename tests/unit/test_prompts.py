"""`toolkit.matrix.prompts.build_prompt` against scripted tokenizers: it converges, or stops in bounded calls."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from toolkit.matrix.prompts import MAX_TOKENIZE_CALLS, PromptError, build_prompt


class FakeAPI:
    """`count_tokens` from the prompt's word count, through `tokens(words)`; the calls are counted."""

    def __init__(self, tokens: Callable[[int], int]) -> None:
        self.tokens = tokens
        self.calls = 0

    async def count_tokens(self, model: str, text: str, *, chat: bool) -> int:
        self.calls += 1
        return self.tokens(len(text.split()))


def build(api: FakeAPI, target: int) -> int:
    prompt = asyncio.run(build_prompt(api, "m", target, "[marker] ", chat=True))  # type: ignore[arg-type]
    return prompt.tokens


def test_a_tokenizer_of_one_token_per_word_gives_the_exact_count() -> None:
    api = FakeAPI(lambda words: words + 8)
    assert build(api, 1000) == 1000
    assert api.calls < 10


@pytest.mark.parametrize(
    "tokens",
    [lambda words: 100, lambda words: min(words, 300) + 8, lambda words: 8 + words % 50],
    ids=["constant", "truncating", "not-rising"],
)
def test_counts_that_stop_rising_end_in_bounded_calls(tokens: Callable[[int], int]) -> None:
    api = FakeAPI(tokens)
    with pytest.raises(PromptError, match=r"^contexts: could not build a prompt of 4000 tokens"):
        build(api, 4000)
    assert api.calls <= MAX_TOKENIZE_CALLS
