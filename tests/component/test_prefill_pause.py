"""A pause that blocks the client during a prefill request inflates its TTFT: the request is measured again
with a fresh prompt (cold again), and one still disturbed after the retries is kept and flagged."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.loadgen.client import StreamClient, _Connection
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.store import RESULTS_FILE

pytestmark = pytest.mark.timeout(120)
BLOCK_S = 0.5  # the client's event loop is held this long, like the machine's pauses seen here


@pytest.fixture
def server(fault_server: FaultServer) -> FaultServer:
    return fault_server


def _pause_prefills(monkeypatch: pytest.MonkeyPatch, how_many: int) -> list[dict[str, Any]]:
    """Block the event loop when the reply to each of the first `how_many` prefill requests starts to arrive (before
    its first token is read, so its TTFT holds the block whatever the machine's load); every streamed body is
    logged. A timer 1 ms after the send raced the fault server's reply under load: the block then missed the TTFT."""
    sent: list[dict[str, Any]] = []
    block_next_reply: list[bool] = []
    real_stream, real_data_received = StreamClient.stream, _Connection.data_received

    async def stream(self: StreamClient, path: str, body: dict[str, Any], *args: Any) -> Any:
        sent.append(body)
        prefills = [b for b in sent if b["max_tokens"] == 1]
        if body["max_tokens"] == 1 and len(prefills) <= how_many:
            block_next_reply.append(True)  # a prefill runs alone: the next reply bytes are its own
        return await real_stream(self, path, body, *args)

    def data_received(self: _Connection, data: bytes) -> None:
        if block_next_reply:
            block_next_reply.pop()
            time.sleep(BLOCK_S)
        real_data_received(self, data)

    monkeypatch.setattr(StreamClient, "stream", stream)
    monkeypatch.setattr(_Connection, "data_received", data_received)
    return sent


def _run(server: FaultServer, out: Path, retries: int) -> list[dict[str, Any]]:
    params = make_params(tiny_params(base_url=server.base_url, read_timeout_s=None, disturbed_retries=retries))
    run_matrix(params, out, progress=False)
    return [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]


def _prompt(body: dict[str, Any]) -> str:
    return body["messages"][0]["content"] if "messages" in body else body["prompt"]


def test_a_paused_prefill_is_measured_again_cold_and_decode_uses_that_prompt(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    sent = _pause_prefills(monkeypatch, how_many=1)
    prefill, decode = _run(server, tmp_path, retries=2)
    assert prefill["phase"] == "prefill" and prefill["status"] == "Valid"
    assert prefill["attempts"] == 2 and prefill["disturbed"] is None
    assert prefill["ttft_ms"] < BLOCK_S * 1000  # the kept request is the undisturbed one
    assert prefill["cached_tokens"] == 0  # its fresh prompt was cold
    first, second = [_prompt(b) for b in sent if b["max_tokens"] == 1]
    assert first != second
    # The decode cell warms and streams the prompt of the prefill that counted.
    assert {_prompt(b) for b in sent if b["max_tokens"] == 8} == {second}
    assert decode["status"] == "Valid"
    assert "prefill 64: request disturbed (client event loop blocked" in capfd.readouterr().err


def test_a_prefill_paused_on_every_attempt_is_kept_and_flagged(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    _pause_prefills(monkeypatch, how_many=2)
    prefill, _ = _run(server, tmp_path, retries=1)
    assert prefill["status"] == "Valid" and prefill["attempts"] == 2
    assert prefill["disturbed"].startswith("client event loop blocked")
    assert prefill["ttft_ms"] >= BLOCK_S * 1000 * 0.9
    # The run ends by counting it.
    assert "1 of 2 measurements disturbed after their retries" in capfd.readouterr().err
