"""`toolkit.loadgen.sse.SSEDecoder`: events split across reads, CRLF, multi-line data, what is pending after a cut."""

import pytest

from toolkit.loadgen.sse import MAX_EVENT_BYTES, SSEDecoder, SSEError


def feed_all(pieces: list[bytes]) -> tuple[list[bytes], bytes]:
    decoder = SSEDecoder()
    out: list[bytes] = []
    for piece in pieces:
        out += decoder.feed(piece)
    return out, decoder.pending


STREAM = b'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n'


def test_whole_stream_in_one_read() -> None:
    assert feed_all([STREAM]) == ([b'{"a":1}', b'{"b":2}', b"[DONE]"], b"")


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13])
def test_any_split_across_reads_gives_the_same_events(size: int) -> None:
    pieces = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert feed_all(pieces) == ([b'{"a":1}', b'{"b":2}', b"[DONE]"], b"")


def test_event_completed_only_by_its_blank_line() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b'data: {"a"') == []
    assert decoder.feed(b":1}\n") == []  # one newline ends the line, not the event
    assert decoder.feed(b"\n") == [b'{"a":1}']
    assert decoder.pending == b""


@pytest.mark.parametrize(
    "pieces",
    [
        [b"data: x\r\n\r\ndata: y\r\n\r\n"],
        [b"data: x\r", b"\n\r", b"\ndata: y\r\n", b"\r\n"],  # CRLF split between reads
        [b"data: x\r\n\r\n", b"data: y\n\n"],  # mixed line ends
    ],
)
def test_crlf_line_ends(pieces: list[bytes]) -> None:
    assert feed_all(pieces) == ([b"x", b"y"], b"")


def test_multi_line_data_is_joined_with_newlines() -> None:
    assert feed_all([b"data: first\ndata: second\ndata:third\n\n"]) == ([b"first\nsecond\nthird"], b"")


def test_other_fields_and_comments_are_ignored() -> None:
    events, _ = feed_all([b": keep-alive\n\nevent: message\nid: 7\ndata: x\nretry: 10\n\n"])
    assert events == [b"x"]


def test_data_without_space_and_empty_data() -> None:
    assert feed_all([b"data:x\n\ndata:\n\n"]) == ([b"x", b""], b"")


def test_pending_after_a_cut_mid_event() -> None:
    events, pending = feed_all([b"data: x\n\n", b'data: {"id":"c","choi'])
    assert events == [b"x"]
    assert pending == b'data: {"id":"c","choi'


def test_pending_after_a_cut_between_lines_of_an_event() -> None:
    events, pending = feed_all([b"data: x\n\ndata: y\n"])
    assert events == [b"x"]
    assert pending.strip() == b"data: y"  # never delivered: the blank line did not come


def test_malformed_payload_is_passed_through_for_the_caller_to_reject() -> None:
    assert feed_all([b"data: {not json\n\n"]) == ([b"{not json"], b"")


def test_an_event_without_its_terminator_is_capped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: " + b"x" * (MAX_EVENT_BYTES - 6)) == []  # up to the cap it may still end
    with pytest.raises(SSEError, match=r"longer than 1,048,576 bytes without its terminating blank line"):
        decoder.feed(b"x")
