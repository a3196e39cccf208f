"""A launched server's speculative-decoding config, read from its command line (`--speculative-config JSON`)."""

from __future__ import annotations

import json
import shlex
from typing import Any

_FLAGS = ("--speculative-config", "--speculative_config")


def speculative_config(command: str | None) -> tuple[dict[str, Any] | str | None, str | None]:
    """The config as given (parsed JSON, or the raw text when it is not JSON) and a one-line summary for the
    report's Engine block (``ngram, 2 tokens``); (None, None) when the command does not speculate."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        words = (command or "").split()
    raw = None
    for i, word in enumerate(words):
        flag, _, value = word.partition("=")
        if flag in _FLAGS:
            raw = value if value else (words[i + 1] if i + 1 < len(words) else None)
    if raw is None:
        return None, None
    try:
        config = json.loads(raw)
    except ValueError:
        return raw, raw
    if not isinstance(config, dict):
        return raw, raw
    parts = [str(config.get("method") or config.get("model") or "speculative")]
    if config.get("num_speculative_tokens") is not None:
        parts.append(f"{config['num_speculative_tokens']} tokens")
    return config, ", ".join(parts)
