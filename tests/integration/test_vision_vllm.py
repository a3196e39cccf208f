"""Images on the real engine (issue 46): the embedded vLLM serving `tiny-vision`, a BLIP-2 shaped random-weight
model that takes one image a chat request and counts it as 32 prompt tokens whatever its size."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.servers.embedded.models import VISION_IMAGE_TOKENS
from toolkit.servers.embedded.server import EmbeddedServer


def test_a_class_with_an_image_a_request_counts_its_image_tokens_as_the_server_does(
    vision_server: EmbeddedServer, tmp_path: Path
) -> None:
    """Two classes of the same 64-token chat prompts, one of them with a 96x64 image each: every request completes,
    each record carries its class's images, an image request's prompt counts the model's 32 image tokens more than
    a text one's (as its reply's usage says), and the server's prompt-token counter agrees with the client's."""
    classes = [
        {"name": "text", "weight": 1, "input_tokens": 64, "output_tokens": 8, "slo_ttft_ms": 5000},
        {"name": "vision", "weight": 1, "input_tokens": 64, "output_tokens": 8, "slo_ttft_ms": 5000, "images": 1,
         "image_size": "96x64"},
    ]  # fmt: skip
    params = make_rate_params({
        "base_url": vision_server.base_url, "endpoint": "chat", "rates": [3.0], "arrival": "constant",
        "requests_per_step": 16, "classes": classes, "seed": 46, "results_dir": str(tmp_path),
    })  # fmt: skip
    lines: list[str] = []
    out = run_rates(params, say=lines.append)
    print("\n".join(lines))  # the step's figures, for the record (run with -s)
    (row,) = read_steps(out)
    records = read_records(out)
    assert row["failed"] == 0 and row["completed"] == row["requests"] == 16 and records["error"].isna().all(), lines
    text, vision = records[records["class"] == "text"], records[records["class"] == "vision"]
    assert len(text) >= 3 and len(vision) >= 3
    assert (text["images"] == 0).all() and (vision["images"] == 1).all()
    print(sorted(text["input_tokens"]), sorted(vision["input_tokens"]))
    assert vision["input_tokens"].median() - text["input_tokens"].median() == pytest.approx(VISION_IMAGE_TOKENS, abs=2)
    assert row["server_prompt_tokens"] == pytest.approx(row["client_prompt_tokens"], rel=0.02)
