"""Conversations, sent open-loop: each begins at its due time; each turn re-sends the whole history.

A conversation is a list of user messages. Its first turn leaves at the conversation's due time (after a free slot,
when at most `max_in_flight` conversations may be in progress: a user holds one slot from the first turn to the
last); each later turn is due a think time after the previous reply ended (its own, or `think_time_s`) and
sends the history (every earlier
message and the reply the server actually returned) followed by its own message. A turn that fails is recorded
with its error and ends its conversation; the others go on. Records are `open_loop.record`'s, with the turn, the
history's tokens (the previous turn's prompt and reply as the server counted them) and whether it is a warm-up turn.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from toolkit.loadgen.client import StreamClient, StreamResult
from toolkit.loadgen.open_loop import PlannedRequest, on_schedule, record, sleep_until
from toolkit.loadgen.stream_events import Endpoint, build_request


@dataclass(frozen=True)
class PlannedTurn:
    """A user message of a conversation and the reply tokens it asks for."""

    text: str
    output_tokens: int
    think_s: float | None = None  # the user's think time after the previous reply (None: the plan's)


@dataclass(frozen=True)
class ConversationPlan:
    """How every conversation of a step is sent."""

    endpoint: Endpoint
    model: str
    think_time_s: float = 0.0
    warmup_turns: int = 0  # the first turns of each conversation: recorded, left out of the step's summary
    max_in_flight: int | None = None  # conversations in progress at once


def turn_request(plan: ConversationPlan, history: list[dict[str, str]], turn: PlannedTurn) -> PlannedRequest:
    """The turn's request: the history and the new message (chat messages, or one completions prompt)."""
    path, body = build_request(plan.endpoint, plan.model, turn.text, turn.output_tokens)
    if plan.endpoint == "chat":
        body["messages"] = [*history, {"role": "user", "content": turn.text}]
    else:
        body["prompt"] = "".join(m["content"] for m in history) + turn.text
    return PlannedRequest(path, body, None)


async def send_conversations(
    client: StreamClient,
    plan: ConversationPlan,
    conversations: Sequence[Sequence[PlannedTurn]],
    due: Sequence[float],
    *,
    start: float | None = None,
) -> list[dict[str, Any]]:
    """Send every conversation from `start + due[i]`; the records of every turn sent, in conversation order.

    Request numbers are `i * longest + turn - 1`. Cancelled: the conversations in progress are cancelled and the
    cancellation propagates.
    """
    if len(conversations) != len(due):
        raise ValueError(f"{len(conversations)} conversations for {len(due)} due times")
    t0 = time.perf_counter() if start is None else start
    longest = max((len(c) for c in conversations), default=1)
    records: list[list[dict[str, Any]]] = [[] for _ in conversations]

    async def converse(i: int) -> None:
        history: list[dict[str, str]] = []
        scheduled, history_tokens = due[i], 0
        for k, turn in enumerate(conversations[i], start=1):
            await sleep_until(t0 + scheduled)
            request = turn_request(plan, history, turn)
            result = StreamResult(text=[])
            await client.stream(request.path, request.body, result)
            row = record(i * longest + k - 1, scheduled, result, request, t0)
            row.update(turn=k, history_tokens=history_tokens, warmup=k <= plan.warmup_turns)
            records[i].append(row)
            if row["error"] is not None:
                return  # the reply failed: the conversation cannot go on
            reply = "".join(result.text or [])
            if plan.endpoint == "chat":
                history += [{"role": "user", "content": turn.text}, {"role": "assistant", "content": reply}]
            else:
                history += [{"role": "user", "content": turn.text + reply}]
            history_tokens = row["input_tokens"] + row["output_tokens"]
            ended = (result.ended or time.perf_counter()) - t0
            following = conversations[i][k] if k < len(conversations[i]) else None
            think = plan.think_time_s if following is None or following.think_s is None else following.think_s
            scheduled = ended + think

    await on_schedule(due, t0, converse, plan.max_in_flight)
    return [row for rows in records for row in rows]
