"""`toolkit.loadgen.http_reply.HttpReply`: the HTTP/1.1 framing the client relies on, whole and split byte by byte."""

from __future__ import annotations

import pytest

from toolkit.loadgen.http_reply import MAX_ERROR_BODY, HttpReply
from toolkit.loadgen.stream_events import StreamResult

SSE = b"data: [DONE]\n\n"


def feed(raw: bytes, *, bytewise: bool = False) -> HttpReply:
    reply = HttpReply(StreamResult())
    for piece in [raw[i : i + 1] for i in range(len(raw))] if bytewise else [raw]:
        reply.feed(piece, 1.0)
    return reply


def state(reply: HttpReply) -> tuple[int, bool, bool, bool, bool]:
    return reply.status, reply.head_done, reply.complete, reply.keep_alive, reply.malformed


@pytest.fixture(params=[False, True], ids=["whole", "bytewise"])
def bytewise(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def test_an_error_status_keeps_its_body(bytewise: bool) -> None:
    body = b'{"object":"error","message":"bad key"}'
    reply = feed(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body), bytewise=bytewise)
    assert state(reply) == (401, True, True, True, False)
    assert bytes(reply.error_body) == body
    assert not reply.account.result.done  # a non-200 body is not the stream


def test_the_error_body_is_capped() -> None:
    body = b"x" * (3 * MAX_ERROR_BODY)
    reply = HttpReply(StreamResult())
    reply.feed(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % len(body), 1.0)
    for i in range(0, len(body), 16 * 1024):
        reply.feed(body[i : i + 16 * 1024], 1.0)
    assert reply.complete and MAX_ERROR_BODY <= len(reply.error_body) < MAX_ERROR_BODY + 16 * 1024


def test_an_interim_1xx_head_is_skipped(bytewise: bool) -> None:
    raw = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    reply = feed(raw, bytewise=bytewise)
    assert state(reply) == (200, True, True, True, False)
    assert reply.account.result.done


def test_a_body_read_to_close_is_delivered_and_not_kept_alive(bytewise: bool) -> None:
    reply = feed(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE, bytewise=bytewise)
    assert state(reply) == (200, True, False, False, False)  # complete only when the server closes
    assert reply.account.result.done


def test_connection_close_is_not_kept_alive() -> None:
    reply = feed(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE))
    assert state(reply) == (200, True, True, False, False)


def test_chunk_extensions_and_trailers(bytewise: bool) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x;ext=1\r\n%s\r\n0\r\nX-Trailer: 1\r\n\r\n" % (
        len(SSE), SSE)  # fmt: skip
    reply = feed(raw, bytewise=bytewise)
    assert state(reply) == (200, True, True, True, False)
    assert reply.account.result.done


@pytest.mark.parametrize("raw", [
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
    b"HTP/1.1 200 OK\r\n\r\n",  # not a status line
    b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",  # an upgrade
])  # fmt: skip
def test_what_cannot_be_followed_is_malformed_and_ends_the_reply(raw: bytes, bytewise: bool) -> None:
    reply = feed(raw, bytewise=bytewise)
    assert reply.malformed and reply.complete and not reply.keep_alive


def test_bytes_after_the_reply_spoil_the_connection_only() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(SSE), SSE)
    for extra in (b"garbage", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"):
        reply = feed(raw + extra)
        assert state(reply) == (200, True, True, False, False), extra
        assert reply.account.result.done and reply.account.result.error is None
