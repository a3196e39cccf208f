"""benchmarks/embedding_ties.py: its cells and its whole-reply halves, by hand."""

from __future__ import annotations

import random

import pytest

from benchmarks import embedding_ties as ties
from toolkit.method.embedding_cell import EmbeddingRequest, window_rates
from toolkit.method.spread import WINDOW_DOF, t_quantile


def test_each_loop_sends_its_next_request_when_the_last_reply_came() -> None:
    requests = ties.cell_requests(random.Random(1), 2, 0.05, 0.3)
    for loop_start in {r.started for r in requests} - {r.ended for r in requests}:  # each loop's first send
        assert loop_start < 0.05
    assert len({r.started for r in requests} - {r.ended for r in requests}) == 2
    assert all(r.items == ties.ITEMS and r.prompt_tokens == ties.ITEMS * ties.TOKENS_PER_ITEM for r in requests)
    assert max(r.ended for r in requests) > ties.RAMP_S + ties.WINDOW_S


def test_halves_with_as_many_replies_tie_in_whole_replies_and_not_counted_continuously() -> None:
    """One loop of 0.5 s requests from 0.8 s, one of them 0.3 s: 6 replies in each 3 s half of (1, 7], but the
    requests in flight at 1, 4 and 7 s had got 0.6, 2/3 and 0.8 of the way, so the continuous halves differ."""
    requests, t = [], 0.8
    for latency in [0.5] * 6 + [0.3] + [0.5] * 8:
        requests.append(EmbeddingRequest(t, t + latency, 4, 400))
        t += latency
    whole = ties.whole_interval(requests)
    assert whole is not None and whole.half_width == 0.0
    found = window_rates(requests, ties.RAMP_S, ties.RAMP_S + ties.WINDOW_S)
    first, second = (0.6 + 5 + 2 / 3) * 4 / 3, (1 / 3 + 5 + 0.8) * 4 / 3  # items/s of each half, continuously
    assert found["items_s"] == pytest.approx(12 * 4 / 6)  # the window's value still counts the replies in it
    assert found["items_s_ci"] == pytest.approx(t_quantile(WINDOW_DOF) * abs(first - second) / 2)
