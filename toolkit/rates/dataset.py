"""Local request datasets (pure; nothing is downloaded): JSONL, or the ShareGPT JSON layout.

JSONL: one object per line with `"prompt"` (text) or `"messages"` (chat messages: objects with a string `role` and
`content`), and an optional `"output_tokens"` (a whole number >= 1); blank lines are skipped. ShareGPT: a JSON list
of objects whose `"conversations"` list holds turns `{"from": "human"|"user"|..., "value": text}`; its first human
turn is the prompt and the turn after it the reference reply, whose token count (by the server's tokenizer) is the
output length, as `vllm bench serve --dataset-name sharegpt` takes it; a conversation workload sends its human turns
one by one. Conversations with fewer than two turns are skipped, as there. Any other defect is a `DatasetError`
naming the file and the line (or entry).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolkit.base.errors import DatasetError

HUMAN = ("human", "user")


@dataclass(frozen=True)
class DatasetItem:
    """One request of a dataset: a prompt or chat messages, and its output length or a reply to count."""

    where: str  # "FILE:LINE" or "FILE entry N", for errors found later (e.g. too long for the server)
    prompt: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    output_tokens: int | None = None
    reply: str | None = None
    user_turns: tuple[str, ...] = ()  # every user message in order: a conversation workload's turns

    def __post_init__(self) -> None:
        if not self.user_turns:
            found = self.prompt if self.prompt is not None else ""
            turns = [m["content"] for m in self.messages or () if m["role"] in HUMAN]
            object.__setattr__(self, "user_turns", tuple(turns) if self.messages else (found,))


def load_dataset(path: str | Path) -> list[DatasetItem]:
    """The file's requests in order; DatasetError when it is unreadable, malformed or empty."""
    path = Path(path)
    text = read_text(path, "dataset")
    items = _sharegpt(path, text) if text.lstrip().startswith("[") else _jsonl(path, text)
    if not items:
        raise DatasetError(f"dataset: {path} holds no request")
    return items


def read_text(path: Path, what: str) -> str:
    """A local file's text; DatasetError (`what`: the parameter) when it cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{what}: cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise DatasetError(f"{what}: {path} is not UTF-8 text") from None


def json_lines(path: Path, text: str, what: str, hint: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each non-blank line's object with where it stands ("FILE:LINE"); DatasetError naming the line when one is
    not a JSON object (`hint`: what to say why; else the parser's reason)."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise DatasetError(f"{what}: {where}: not a JSON object ({hint or exc.args[0].split(':')[0]})") from None
        if not isinstance(obj, dict):
            raise DatasetError(f"{what}: {where}: not a JSON object" + (f" ({hint})" if hint else ""))
        yield where, obj


def _jsonl(path: Path, text: str) -> list[DatasetItem]:
    return [_jsonl_item(where, obj) for where, obj in json_lines(path, text, "dataset")]


def _jsonl_item(where: str, obj: dict[str, Any]) -> DatasetItem:
    prompt, messages, out = obj.get("prompt"), obj.get("messages"), obj.get("output_tokens")
    if (prompt is None) == (messages is None):
        raise DatasetError(f'dataset: {where}: needs "prompt" (text) or "messages" (a chat), exactly one')
    if prompt is not None and (not isinstance(prompt, str) or not prompt):
        raise DatasetError(f'dataset: {where}: "prompt" is not a non-empty string')
    if out is not None and (type(out) is not int or out < 1):
        raise DatasetError(f'dataset: {where}: "output_tokens" is not a whole number >= 1 (got {out!r:.40})')
    if messages is None:
        return DatasetItem(where, prompt=prompt, output_tokens=out)
    ok = (
        isinstance(messages, list)
        and messages
        and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
    )
    if not ok:
        raise DatasetError(
            f'dataset: {where}: "messages" is not a list of {{"role": ..., "content": ...}} with string values'
        )
    chat = tuple({"role": m["role"], "content": m["content"]} for m in messages)
    return DatasetItem(where, messages=chat, output_tokens=out)


def _sharegpt(path: Path, text: str) -> list[DatasetItem]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"dataset: {path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, list):
        raise DatasetError(f"dataset: {path}: not a list of conversations (the ShareGPT layout)")
    items = []
    for number, entry in enumerate(data, start=1):
        where = f"{path} entry {number}"
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f'dataset: {where}: no "conversations" list')
        if not all(
            isinstance(t, dict) and isinstance(t.get("from"), str) and isinstance(t.get("value"), str) for t in turns
        ):
            raise DatasetError(f'dataset: {where}: a turn is not {{"from": ..., "value": text}}')
        if len(turns) < 2:
            continue
        first = next((i for i, t in enumerate(turns[:-1]) if t["from"] in HUMAN), None)
        if first is None or not turns[first]["value"]:
            raise DatasetError(f"dataset: {where}: no human turn with text followed by a reply")
        users = tuple(t["value"] for t in turns[first:] if t["from"] in HUMAN and t["value"])
        first_text, reply = turns[first]["value"], turns[first + 1]["value"]
        items.append(DatasetItem(where, prompt=first_text, reply=reply, user_turns=users))
    return items
