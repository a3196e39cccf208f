"""Each traffic class's own request kinds against the fault server: a class with a JSON schema and a class with an
image in one sweep, each body and record following its class, and each class's valid share in its step's row."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from toolkit.method.goodput import CLASS_COLUMN
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

pytestmark = pytest.mark.timeout(60)

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
VALID, INVALID = '{"a": 3}', '{"a": "three"}'
MARKER = re.compile(r"step (\d+) request (\d+)\]")  # each prompt's own prefix (toolkit.rates.workload)


def test_each_class_sends_and_records_its_own_request_kinds(tmp_path: Path) -> None:
    schema = tmp_path / "answer.json"
    schema.write_text(json.dumps(SCHEMA))
    classes = [
        {"name": "shaped", "weight": 1, "input_tokens": 40, "output_tokens": 8, "slo_e2e_ms": 5000,
         "response_format": f"json_schema:{schema}"},
        {"name": "seeing", "weight": 1, "input_tokens": 40, "output_tokens": 8, "slo_e2e_ms": 5000, "images": 1,
         "image_size": "32x24"},
    ]  # fmt: skip
    lines: list[str] = []
    with FaultServer(token_interval_s=0.002, reply_text=VALID) as server:

        def say(line: str) -> None:  # after the first step, the replies no longer match the schema
            lines.append(line)
            if line.startswith("step 0:"):
                server.reply_text = INVALID

        params = make_rate_params({"base_url": server.base_url, "rates": [50, 100], "requests_per_step": 10,
                                   "classes": classes, "steady_trim": 0, "seed": 1,
                                   "results_dir": str(tmp_path / "run")})  # fmt: skip
        out = run_rates(params, say=say)
        sent = server.completion_requests()
    records = read_records(out)
    assert len(sent) == len(records) == 20 and records["error"].isna().all()
    drawn = {(int(r["step"]), int(r["request"])): r[CLASS_COLUMN] for _, r in records.iterrows()}
    assert all(set(step[CLASS_COLUMN]) == {"shaped", "seeing"} for _, step in records.groupby("step"))
    expected = {"type": "json_schema", "json_schema": {"name": "answer", "schema": SCHEMA}}
    for entry in sent:
        (message,) = entry["prompt"]
        content = message["content"]
        text = content if isinstance(content, str) else content[0]["text"]
        found = MARKER.search(text)
        assert found is not None, text
        if drawn[(int(found[1]), int(found[2]))] == "shaped":  # the schema, plain text
            assert entry["response_format"] == expected and isinstance(content, str)
        else:  # one image after the text, no schema
            assert entry["response_format"] is None
            assert [part["type"] for part in content] == ["text", "image_url"]
    shaped = records[CLASS_COLUMN] == "shaped"
    assert (records.loc[shaped, "images"] == 0).all() and (records.loc[~shaped, "images"] == 1).all()
    assert records.loc[~shaped, "schema_valid"].isna().all()  # no format: nothing to keep to
    kept = [set(step.loc[step[CLASS_COLUMN] == "shaped", "schema_valid"]) for _, step in records.groupby("step")]
    assert kept == [{True}, {False}]  # the schema's replies, then others
    # each step's share: of the replies that carried the format (the shaped class's), beside that class's own
    steps = read_steps(out)
    assert [s["schema_valid_share"] for s in steps] == [1.0, 0.0]
    assert [s["classes"]["shaped"]["schema_valid_share"] for s in steps] == [1.0, 0.0]
    assert all("schema_valid_share" not in s["classes"]["seeing"] for s in steps)
    progress = [line for line in lines if line.startswith("step ") and "req/s" in line]
    assert ", 100% valid" in progress[0] and ", 0% valid" in progress[1], lines
    written = json.loads((out / "rates" / "sweep.json").read_text())["classes"]
    assert written[0]["response_format"] == f"json_schema:{schema}" and "images" not in written[0]
    assert (written[1]["images"], written[1]["image_size"]) == (1, "32x24")
