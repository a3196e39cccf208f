"""One HTTP/1.1 response parsed as its bytes arrive, without any I/O: llhttp (httptools) does the framing.

A 200 reply's body goes to the stream's `StreamAccount`; any other status keeps its body (capped) for the error
message. Status line, headers, `Content-Length` / chunked / read-to-close bodies, 1xx interim replies and
keep-alive are llhttp's, the parser uvicorn uses.
"""

from __future__ import annotations

import httptools

from toolkit.base.errors import ReplyError
from toolkit.loadgen.stream_events import StreamAccount, StreamResult

MAX_ERROR_BODY = 64 * 1024


class HttpReply:
    """The reply to one request. After each `feed()`:

    `head_done` / `status` / `keep_alive` (from the final head, 1xx skipped), `complete` (the whole reply
    arrived), `malformed` (not HTTP we can follow; the reply counts as complete and the connection must not be
    reused), `error_body` (a non-200 reply's body, capped), `account.result` (the stream's measurements).
    """

    def __init__(self, result: StreamResult) -> None:
        self.account = StreamAccount(result)
        self.status = 0
        self.head_done = False
        self.keep_alive = True
        self.complete = False
        self.malformed = False
        self.error_body = bytearray()
        self._interim = False
        self._pieces: list[bytes] = []
        self._parser = httptools.HttpResponseParser(self)

    def feed(self, data: bytes, now: float) -> bool:
        """Bytes that arrived at `now`; True when the caller may stop waiting (complete, `[DONE]` or failed)."""
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            # Garbage after a complete reply (or a new reply nobody asked for) only spoils the connection.
            self.malformed = self.malformed or not self.complete
            self.keep_alive = False
            self.complete = True
        pieces = self._pieces
        if pieces:  # every chunk of this read, handed over at once: one pass of the SSE decoder per read
            self._pieces = []
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if self.status == 200:
                self.account.feed(body, now)
            elif len(self.error_body) < MAX_ERROR_BODY:
                self.error_body += body
        return self.complete or (self.status == 200 and self.account.stopped)

    # -- llhttp callbacks
    def on_message_begin(self) -> None:
        if self.complete:
            raise _Unexpected  # a second reply to one request

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200:  # 1xx: an interim head, the real one follows
            self._interim = True
            return
        self.status = status
        self.keep_alive = self._parser.should_keep_alive()
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self._pieces.append(body)

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
        else:
            self.complete = True


class _Unexpected(ReplyError):
    """Raised inside the parser to stop it at bytes that follow the reply."""
