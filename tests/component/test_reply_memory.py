"""Memory a server can make a conversation take (issue 40): 100 events of 1 MB for the 4 tokens asked. The history
keeps what the server sent up to the reply's byte bound; the records and the step say which replies were cut."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from tests.faultserver import HUGE_EVENT_BYTES, HUGE_EVENTS, FaultServer
from toolkit.loadgen.stream_events import REPLY_BYTES_PER_TOKEN
from toolkit.rates.files import read_records
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

pytestmark = [pytest.mark.component, pytest.mark.timeout(120)]
PEAK_BOUND = 200 * 1024 * 1024  # bytes: the 100 MB a reply holds must not be kept, nor re-sent
OUTPUT_TOKENS = 4


def test_a_conversation_keeps_each_reply_up_to_its_byte_bound(tmp_path: Path) -> None:
    said: list[str] = []
    with FaultServer(token_interval_s=0.002) as server:
        server.set_fault("huge-events")
        params = make_rate_params({"base_url": server.base_url, "requests_per_step": 1, "rates": ["inf"],
                                   "input_tokens": 30, "output_tokens": OUTPUT_TOKENS, "workload": "conversation",
                                   "turns": 3, "endpoint": "completions",
                                   "results_dir": str(tmp_path / "run")})  # fmt: skip
        tracemalloc.start()
        try:
            out = run_rates(params, say=said.append)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        prompts = [e["prompt"] for e in server.completion_requests()]
    assert peak < PEAK_BOUND, f"peak {peak / 2**20:.0f} MiB"
    kept = REPLY_BYTES_PER_TOKEN * OUTPUT_TOKENS
    assert len(prompts) == 3  # the conversation went on with what was kept
    assert len(prompts[1]) - len(prompts[0]) < kept + 200 and prompts[1].count("x") == kept  # turn 1's reply, cut
    assert prompts[2].count("x") == 2 * kept
    records = read_records(out).sort_values("request")
    assert records["error"].isna().all() and list(records["output_tokens"]) == [OUTPUT_TOKENS] * 3
    sent = HUGE_EVENTS * HUGE_EVENT_BYTES
    assert list(records["note"]) == [f"reply cut to its first {kept:,} bytes of {sent:,} ({REPLY_BYTES_PER_TOKEN:,} "
                                     f"bytes a token asked for)"] * 3  # fmt: skip
    cut = [line for line in said if "replies cut" in line]
    assert cut == [f"step 0: 3 of 3 replies cut to {REPLY_BYTES_PER_TOKEN:,} bytes a token asked for; the first: "
                   f"{records['note'].iloc[0]}"], said  # fmt: skip
