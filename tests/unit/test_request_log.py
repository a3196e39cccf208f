"""A vLLM server's request log read for each request's adapter (toolkit.servers.request_log; issue 47)."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError
from toolkit.rates.step_lines import logged_text
from toolkit.servers.embedded.server import ServerConfig, launch_command
from toolkit.servers.request_log import LoggedRequests, count_requests, log_size, requests_since

HEAD = "(APIServer pid=6243) INFO 12-06 09:12:41 [request_logger.py:65] Received request "
PARAMS = "params: SamplingParams(n=1, temperature=1.0, max_tokens=4), prompt_token_ids: [1, 2], "
ADAPTER = (
    "lora_request: LoRARequest(lora_name='tiny-lora', lora_int_id=1, lora_path='/c/tiny-lora', base_model_name=None)."
)
BASE = "lora_request: None."


def test_each_received_request_is_counted_by_its_adapter_and_nothing_else_is() -> None:
    text = "\n".join([
        HEAD + "cmpl-baa2cf347a633e1d-0: " + PARAMS + ADAPTER,
        "(APIServer pid=6243) INFO 12-06 09:12:41 [async_llm.py:578] Added request cmpl-baa2cf347a633e1d-0-86776f8f.",
        HEAD + "chatcmpl-913986db5d840059: " + PARAMS + BASE,
        HEAD + "cmpl-1-0: prompt: 'Received request x: lora_request: None', " + PARAMS + ADAPTER,  # the last one counts
        HEAD + "cmpl-2-0: " + PARAMS + ADAPTER.replace("tiny-lora", "other"),
        "INFO 12-06 09:12:50 [loggers.py:259] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    ]).encode()  # fmt: skip
    counted = count_requests(text)
    assert counted == LoggedRequests(base=1, adapters={"tiny-lora": 2, "other": 1}) and counted.total == 4
    assert count_requests(b"") == LoggedRequests() and count_requests(b"\x00\xff Received request") == LoggedRequests()


def test_only_whole_lines_written_after_the_mark_are_read(tmp_path: Path) -> None:
    log = tmp_path / "vllm.log"
    log.write_text(HEAD + "cmpl-0-0: " + PARAMS + BASE + "\n")
    mark = log_size(log)
    with log.open("a") as out:
        out.write(HEAD + "cmpl-1-0: " + PARAMS + ADAPTER + "\n" + HEAD + "cmpl-2-0: " + PARAMS + BASE)  # no newline yet
    assert requests_since(log, mark) == LoggedRequests(base=0, adapters={"tiny-lora": 1})
    with pytest.raises(ParamsError, match=r"^server_log: cannot read .*nowhere\.log: No such file or directory$"):
        log_size(tmp_path / "nowhere.log")


def test_the_step_line_gives_the_counts_or_says_none_were_logged() -> None:
    row = {"step": 2, "requests": 24, "server_log_requests": {"base": 11, "adapters": {"tiny-lora": 13}}}
    assert logged_text(row) == "step 2 server log: received 11 for the base model, 13 for tiny-lora"
    none = {**row, "server_log_requests": {"base": 0, "adapters": {}}}
    assert (
        logged_text(none) == "step 2 server log: none of its 24 requests logged (start vLLM with --enable-log-requests)"
    )


def test_the_embedded_server_logs_requests_when_asked() -> None:
    command = launch_command(ServerConfig(lora=True, log_requests=True), 8000, Path("/m"), Path("/l"))
    at = command.index("--enable-log-requests")
    assert command[at : at + 3] == ["--enable-log-requests", "--max-log-len", "32"]
    assert "--enable-log-requests" not in launch_command(ServerConfig(lora=True), 8000, Path("/m"), Path("/l"))
