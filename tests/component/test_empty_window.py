"""A pause as long as the decode window leaves it without a single token: the cell measured nothing, so it is
an Error (after the disturbed retries), never a Valid cell without numbers, and --resume measures it again."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.matrix import decode
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.results.store import RESULTS_FILE

pytestmark = pytest.mark.timeout(120)
DURATION_S = 1.0


def _pause_every_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hold the client's event loop for longer than the window, the moment each window opens.

    The "before" scrape is created right after the window's start is taken, before the loop can read any
    byte: blocking there (not in a callback a loop pass later, when a token may already have been read into
    the window) leaves the window empty every time.
    """
    scrape_with_time = decode._scrape_with_time

    def block_then_scrape(*args: Any) -> Any:
        time.sleep(DURATION_S + 0.5)
        return scrape_with_time(*args)

    monkeypatch.setattr(decode, "_scrape_with_time", block_then_scrape)


def test_a_window_without_tokens_is_an_error_that_resume_redoes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with FaultServer() as server:
        params = make_params(tiny_params(base_url=server.base_url, duration_s=DURATION_S, read_timeout_s=None,
                                         disturbed_retries=1))  # fmt: skip
        with monkeypatch.context() as patch:
            _pause_every_window(patch)
            run_matrix(params, tmp_path, progress=False)
        cell = [json.loads(line) for line in (tmp_path / RESULTS_FILE).read_text().splitlines()][-1]
        assert cell["phase"] == "decode" and cell["status"] == "Error", cell
        assert cell["error"].startswith("no token arrived in the 1 s window (client event loop blocked"), cell
        assert cell["attempts"] == 2 and cell["output_tokens"] == 0 and cell["total_tok_s"] is None

        run_matrix(params, tmp_path, resume=True, progress=False)
        redone = [json.loads(line) for line in (tmp_path / RESULTS_FILE).read_text().splitlines()][-1]
        assert redone["phase"] == "decode" and redone["status"] == "Valid" and redone["output_tokens"] > 0
