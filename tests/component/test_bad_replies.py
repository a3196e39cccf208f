"""Malformed replies from the server: an Error cell or a one-line refusal naming the URL, never a traceback.

The fault server answers what vLLM never sends: a gateway's HTML page, `/tokenize` without a count, SSE fields
of the wrong type, an event that never ends. Each must end as an Error cell (the run goes on) or, before any
load, as one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import re
from pathlib import Path
from typing import Any

import pytest

from tests.component.test_faults import KEY_ENV, P64, RAN, D64x1, D64x2, server
from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.cli import main
from toolkit.loadgen.client import StreamClient, StreamResult
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.store import RESULTS_FILE

__all__ = ["server"]  # the fault server fixture, shared with test_faults

pytestmark = pytest.mark.timeout(120)


def run(server: FaultServer, out: Path) -> dict[tuple[str, int, int], dict[str, Any]]:
    p = make_params(tiny_params(base_url=server.base_url, concurrency=[1, 2], api_key_env=KEY_ENV))
    run_matrix(p, out, progress=False)
    lines = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    return {(r["phase"], r["context_tokens"], r["concurrency"]): r for r in lines}


def no_traceback_logged(caplog: pytest.LogCaptureFixture) -> None:
    """asyncio logs an exception raised in a protocol callback ("Fatal error: protocol.data_received() ...")."""
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


STREAM_ERRORS = {
    "usage-not-object": r"^malformed SSE data: usage is not an object",
    "choices-object": r"^malformed SSE data: choices is not a list of objects",
    "string-count": r"^malformed SSE data: usage\.completion_tokens is not a token count \('3'\)",
    "unterminated": r"^an SSE event longer than 1,048,576 bytes without its terminating blank line",
}


@pytest.mark.parametrize("kind", list(STREAM_ERRORS))
def test_a_malformed_stream_is_an_error_cell_and_the_run_goes_on(
    kind: str, server: FaultServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.set_fault(kind, after=3, times=1)  # request 1 is the prefill, 2 and 3 are cell 64 × 1's first two
    by_key = run(server, tmp_path)
    assert list(by_key) == [P64, D64x1, D64x2]
    assert by_key[P64]["status"] == "Valid"
    failed = by_key[D64x1]
    assert failed["status"] == "Error" and re.search(STREAM_ERRORS[kind], failed["error"]), failed["error"]
    assert by_key[D64x2]["status"] in RAN and by_key[D64x2]["error"] is None
    no_traceback_logged(caplog)


def test_tokenize_without_a_count_makes_error_cells_naming_the_url(
    server: FaultServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server.set_reply("/tokenize", '{"tokens": [1, 2, 3]}')
    by_key = run(server, tmp_path)
    assert list(by_key) == [P64, D64x1, D64x2]  # every cell recorded: the run went on
    url = re.escape(f"{server.base_url}/tokenize")
    for record in by_key.values():
        assert record["status"] == "Error", record
        assert re.fullmatch(rf"ServerAPIError: {url} answered 200 with no token count \(got 'None'\)", record["error"])
    assert not server.completion_requests()
    no_traceback_logged(caplog)


@pytest.mark.parametrize(
    ("path", "body", "content_type", "says"),
    [
        ("/v1/models", "<html><body>502 Bad Gateway</body></html>", "text/html",
         r"answered 200 but not with a JSON object \(text/html; charset=utf-8: '<html>"),
        ("/version", "<html>login</html>", "text/html", r"answered 200 but not with a JSON object \(text/html"),
        ("/version", '{"version": 7}', "application/json", r"answered 200 with a version that is not a string"),
        ("/v1/models", '{"data": ["fault-model"]}', "application/json",
         r"answered 200 with `data` that is not a list of objects \(got \"\['fault-model'\]\"\)"),
        ("/v1/models", '{"data": {"id": "fault-model"}}', "application/json",
         r"answered 200 with `data` that is not a list of objects"),
    ],
    ids=["models-html", "version-html", "version-number", "models-strings", "models-object"],
)  # fmt: skip
def test_a_malformed_discovery_reply_is_one_line_naming_the_url(
    path: str, body: str, content_type: str, says: str, server: FaultServer, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    server.set_reply(path, body, content_type)
    code = main(["matrix", "--base-url", server.base_url, "--out", str(tmp_path / "out"), "--api-key-env", KEY_ENV,
                 "--contexts", "64", "--concurrency", "1", "--duration", "1", "--max-output", "8",
                 "--control-window", "0"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert re.match(rf"error: base_url: {re.escape(server.base_url + path)} {says}", err), err
    assert not server.completion_requests()


def test_a_max_model_len_of_the_wrong_type_is_one_line(server: FaultServer, capsys: pytest.CaptureFixture[str],
                                                        tmp_path: Path) -> None:  # fmt: skip
    server.set_reply("/v1/models", '{"data": [{"id": "fault-model", "max_model_len": "4096"}]}')
    code = main(["matrix", "--base-url", server.base_url, "--out", str(tmp_path / "out"), "--api-key-env", KEY_ENV])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"error: max_model_len: {server.base_url}/v1/models reports '4096', not a positive "
                                 "whole number; give it as a parameter")  # fmt: skip


def test_an_implausible_max_model_len_is_one_line_before_any_prompt_is_built(
    server: FaultServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    server.set_reply("/v1/models", '{"data": [{"id": "fault-model", "max_model_len": 1000000000000}]}')
    code = main(["matrix", "--base-url", server.base_url, "--out", str(tmp_path / "out"), "--api-key-env", KEY_ENV])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err == (f"error: max_model_len: {server.base_url}/v1/models reports 1,000,000,000,000 "
                                 "tokens, more than the 16,777,216 any served model takes; "
                                 "give it as a parameter")  # fmt: skip
    assert not server.completion_requests() and not [e for e in server.log if e["path"] == "/tokenize"]


def test_the_streaming_client_survives_random_replies(caplog: pytest.LogCaptureFixture) -> None:
    """A raw socket server answers each request with random bytes (sometimes after a good head), split at random,
    then closes: every stream ends with an error or `[DONE]`, nothing raises, asyncio logs no traceback."""

    async def scenario() -> list[StreamResult]:
        rng = random.Random(19)

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            raw = rng.randbytes(rng.randint(0, 3000))
            if rng.random() < 0.6:
                raw = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {}\n\n" + raw
            while raw:
                size = rng.randint(1, 700)
                writer.write(raw[:size])
                raw = raw[size:]
                await writer.drain()
            writer.close()

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        results = []
        async with server, StreamClient(f"http://127.0.0.1:{port}", read_timeout_s=5) as client:
            for _ in range(40):
                results.append(await client.stream("/v1/completions", {"model": "m", "prompt": "p"}))
        return results

    results = asyncio.run(scenario())
    assert all(r.done or r.error for r in results)
    assert all(r.error is None or isinstance(r.error, str) for r in results)
    no_traceback_logged(caplog)
