"""What a vLLM server's own log says of the requests it received: each one's LoRA adapter, counted by adapter.

vLLM 0.32's /metrics counts an adapter's requests under its base model's name and names adapters only in a gauge
of what runs at each moment (toolkit.matrix.lora_info). A server started with `--enable-log-requests` also writes a
line for every request it receives, ending with the request's adapter:

    ... Received request cmpl-…-0: params: SamplingParams(…), …, lora_request: LoRARequest(lora_name='tiny-lora', …)

or `lora_request: None` for the base model. `log_size` marks where the log ends now and `requests_since` counts
the lines written after that mark (`count_requests` is the pure part). The last `lora_request:` of a line is the
request's: a prompt the line quotes comes before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from toolkit.base.errors import ParamsError

__all__ = ["LOG_REQUESTS_FLAG", "LoggedRequests", "count_requests", "log_size", "requests_since"]

_RECEIVED = re.compile(rb"Received request \S+: .*lora_request: (?:None\b|LoRARequest\(lora_name='([^'\n]{1,200})')")
LOG_REQUESTS_FLAG = "--enable-log-requests"  # the vLLM flag that writes the lines


@dataclass(frozen=True)
class LoggedRequests:
    """The requests a server's log received: those for the base model, and for each adapter by its name."""

    base: int = 0
    adapters: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.base + sum(self.adapters.values())


def count_requests(text: bytes) -> LoggedRequests:
    """The received-request lines in `text` (whole lines of a server's log), by adapter."""
    base, adapters = 0, dict[str, int]()
    for line in text.splitlines():
        if (found := _RECEIVED.search(line)) is None:
            continue
        if found[1] is None:
            base += 1
        else:
            name = found[1].decode("utf-8", "replace")
            adapters[name] = adapters.get(name, 0) + 1
    return LoggedRequests(base, adapters)


def log_size(path: Path) -> int:
    """Where the server's log ends now (bytes): ParamsError in one line when it cannot be read."""
    try:
        return path.stat().st_size
    except OSError as exc:
        raise ParamsError(f"server_log: cannot read {path}: {exc.strerror or exc}") from None


def requests_since(path: Path, offset: int) -> LoggedRequests:
    """The requests the log received after `offset` (a `log_size`), counted from its whole lines written since."""
    with path.open("rb") as log:
        log.seek(offset)
        text = log.read()
    return count_requests(text[: text.rfind(b"\n") + 1])
