"""Incremental Server-Sent Events decoder for the `data:` lines of OpenAI-style streams.

Hand-written on purpose: the SSE libraries we could use are bound to httpx (too slow per token here,
see benchmarks/README.md) or unmaintained; this one only has to split events and keep `data` fields.
"""

from __future__ import annotations

from toolkit.base.errors import SSEError

# One vLLM chunk is a few hundred bytes; an event this long without its blank line is not a stream we can follow.
MAX_EVENT_BYTES = 1024 * 1024


class SSEDecoder:
    """Feed raw bytes, get the complete events' data payloads (one bytes object per event)."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        """Add bytes from the socket; return the data of every event completed by them.

        Raises `SSEError` when the unterminated rest grows past `MAX_EVENT_BYTES`.
        """
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            buffer = buffer.replace(b"\r\n", b"\n")
        *complete, self._buffer = buffer.split(b"\n\n")
        if len(self._buffer) > MAX_EVENT_BYTES:
            raise SSEError(f"an SSE event longer than {MAX_EVENT_BYTES:,} bytes without its terminating blank line")
        payloads = []
        for event in complete:
            if event.startswith(b"data:") and b"\n" not in event:  # the usual event: one data line
                payloads.append(event[5:].lstrip(b" "))
                continue
            data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line.startswith(b"data:")]
            if data:
                payloads.append(b"\n".join(data))
        return payloads

    @property
    def pending(self) -> bytes:
        """Bytes of an event not yet terminated (non-empty at end of stream means it was cut)."""
        return self._buffer
