"""Each traffic class's own prompt source against the fault server: a class drawing from its own dataset, one from
the sweep's, one after its own shared prefixes, classes taking the sweep's shared-prefix settings, each body and
record following its class; a bad class dataset or class shared prefix is one line and nothing is sent."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.cli.entry import main
from toolkit.method.goodput import CLASS_COLUMN
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

pytestmark = pytest.mark.timeout(60)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "rates"
MARKER = re.compile(r"\[rate sweep \S+ step (\d+) request (\d+)\] ")  # each prompt's own prefix (rates.workload)
SHARED = re.compile(r"^\[shared prefix \d+ of class (\S+) step 000, run \S+\] ")  # a class's own shared prefix
LEVEL = {"slo_e2e_ms": 5000}
Sent = dict[str, list[tuple[str, str]]]  # class -> each of its requests' path and prompt (a chat's first message)


def first_turns(path: Path) -> set[str]:
    """The prompts a ShareGPT file gives: each conversation's first human turn."""
    return {next(t["value"] for t in entry["conversations"] if t["from"] == "human")
            for entry in json.loads(path.read_text()) if len(entry["conversations"]) > 1}  # fmt: skip


def by_class(records: pd.DataFrame, sent: list[dict[str, Any]]) -> Sent:
    """Each class's requests as sent, found by the marker each prompt carries."""
    drawn = {(int(r["step"]), int(r["request"])): r[CLASS_COLUMN] for _, r in records.iterrows()}
    found: Sent = {}
    for entry in sent:
        text = entry["prompt"] if isinstance(entry["prompt"], str) else entry["prompt"][0]["content"]
        marker = MARKER.search(text)
        assert marker is not None, text
        found.setdefault(drawn[(int(marker[1]), int(marker[2]))], []).append((entry["path"], text))
    return found


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[pd.DataFrame, Sent, list[dict]]]]:
    """Two class sweeps on one server, run once for the module, each with its records, the requests it sent by
    class and its steps: "data" (a class with its own dataset, one with the sweep's, one with its own shared
    prefixes sent to completions) and "prefix" (two classes with the sweep's shared-prefix settings)."""
    folder = tmp_path_factory.mktemp("sources")
    data = [{"name": "faq", "weight": 1, "output_tokens": 5, "dataset": str(FIXTURES / "requests.jsonl"), **LEVEL},
            {"name": "share", "weight": 1, "output_tokens": 6, **LEVEL},
            {"name": "rag", "weight": 1, "input_tokens": 60, "output_tokens": 4, "workload": "shared-prefix",
             "prefixes": 2, "prefix_tokens": 30, "endpoint": "completions", **LEVEL}]  # fmt: skip
    prefix = [{"name": "rag", "weight": 1, "input_tokens": 70, "output_tokens": 4, **LEVEL},
              {"name": "chat", "weight": 1, "input_tokens": 60, "output_tokens": 4, **LEVEL}]  # fmt: skip
    runs = {"data": (data, {"dataset": str(FIXTURES / "sharegpt.json")}),
            "prefix": (prefix, {"workload": "shared-prefix", "prefixes": 1, "prefix_tokens": 40})}  # fmt: skip
    found = {}
    with FaultServer(token_interval_s=0.002) as server:
        for label, (classes, sweep) in runs.items():
            before = len(server.completion_requests())
            params = make_rate_params({"base_url": server.base_url, "rates": [100], "requests_per_step": 18,
                                       "classes": classes, "seed": 2, "results_dir": str(folder / label),
                                       **sweep})  # fmt: skip
            out = run_rates(params, say=lambda _: None)
            records = read_records(out)
            found[label] = (records, by_class(records, server.completion_requests()[before:]), read_steps(out))
        yield found


def test_each_class_draws_its_prompts_from_its_own_dataset_or_the_sweeps(sweeps: dict) -> None:
    records, sent, _ = sweeps["data"]
    assert len(records) == sum(map(len, sent.values())) == 18 and records["error"].isna().all()
    assert set(sent) == {"faq", "share", "rag"}
    # after its own marker, each prompt is one of its class's dataset's: faq's own file, share's the sweep's
    faq = {json.loads(line).get("prompt") for line in (FIXTURES / "requests.jsonl").read_text().splitlines()}
    faq = (faq - {None}) | {"You answer briefly."}  # the chat line: its first message, the system's
    assert {MARKER.split(text)[-1] for _, text in sent["faq"]} <= faq
    assert {MARKER.split(text)[-1] for _, text in sent["share"]} <= first_turns(FIXTURES / "sharegpt.json")
    assert set(records.loc[records[CLASS_COLUMN] == "faq", "output_tokens"]) <= {24, 5, 16}  # the file's, else 5
    # rag's: to its own endpoint, each after one of its own two shared prefixes
    assert {path for path, _ in sent["rag"]} == {"/v1/completions"}
    heads = {SHARED.match(text) for _, text in sent["rag"]}
    assert None not in heads and {h[1] for h in heads if h} == {"rag"} and len({h[0] for h in heads if h}) <= 2
    assert not any(text.startswith("[shared prefix") for name in ("faq", "share") for _, text in sent[name])


def test_classes_without_their_own_prefix_settings_take_the_sweeps_each_its_own_prefixes(sweeps: dict) -> None:
    records, sent, steps = sweeps["prefix"]
    assert set(sent) == {"rag", "chat"}
    for name, requests in sent.items():  # the sweep's one prefix a class: each its own, none another's
        heads = {SHARED.match(text) for _, text in requests}
        assert None not in heads and len({h[0] for h in heads if h}) == 1 and {h[1] for h in heads if h} == {name}
    tokens = records.groupby(CLASS_COLUMN)["input_tokens"]
    assert tokens.min()["rag"] > tokens.max()["chat"]  # each its own length (70, 60), the prefix's 40 within it
    assert steps[0]["expected_hit_rate"] is not None  # over both classes' prompts


@pytest.mark.parametrize(("change", "said"), [
    ({"dataset": "missing.jsonl"}, "classes.faq.dataset: cannot read missing.jsonl: No such file or directory"),
    ({"dataset": "BAD"}, "classes.faq.dataset: BAD:1: not a JSON object"),
    ({"dataset": None, "workload": "shared-prefix", "prefixes": 2},
     "classes.faq: workload: shared-prefix needs prefixes (how many) and prefix_tokens (how long)"),
    ({"prefix_tokens": 8}, "classes.faq: prefixes, prefix_tokens, prefix_choice: apply to workload shared-prefix only"),
    ({"workload": "shared-prefix", "prefixes": 1, "prefix_tokens": 8},
     "classes.faq: workload: shared-prefix builds its own prompts; it takes no dataset"),
    ({"dataset": None, "input_tokens": 20, "workload": "shared-prefix", "prefixes": 1, "prefix_tokens": 16},
     "classes.faq: input_tokens: from 20; a shared prefix of 16 tokens needs at least 16 more"),
])  # fmt: skip
def test_a_bad_class_source_is_one_line_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict, said: str
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    faq = {"name": "faq", "weight": 1, "output_tokens": 4, "dataset": str(FIXTURES / "requests.jsonl"), **LEVEL}
    faq = {k: v for k, v in (faq | change).items() if v is not None}
    faq = {k: str(bad) if v == "BAD" else v for k, v in faq.items()}
    other = {"name": "other", "weight": 1, "input_tokens": 20, "output_tokens": 4, **LEVEL}
    classes = tmp_path / "classes.yaml"
    classes.write_text(json.dumps([faq, other]))
    with FaultServer() as server:
        status = main(["rates", "--base-url", server.base_url, "--rates", "1", "--requests", "2", "--classes",
                       str(classes), "--out", str(tmp_path / "run")])  # fmt: skip
        sent = server.completion_requests()
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {said.replace('BAD', str(bad))}"), err
    assert sent == []


@pytest.mark.parametrize(("sweep", "said"), [
    ({"classes": [{"name": "faq", "weight": 1, "output_tokens": 4, "dataset": "MISSING", **LEVEL}]},
     "rate_sweep.classes.faq.dataset: cannot read MISSING: No such file or directory"),
    ({"dataset": "BAD"}, "rate_sweep.dataset: BAD:1: not a JSON object"),
])  # fmt: skip
def test_toolkit_run_refuses_a_bad_sweep_or_class_dataset_before_its_matrix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], sweep: dict, said: str
) -> None:
    """`toolkit run` reads the files its `rate_sweep:` block names where it enters: a bad one is one line, exit 2,
    before the matrix measures anything (it failed at the rate notebook, after the matrix, before)."""
    files = {"MISSING": str(tmp_path / "missing.jsonl"), "BAD": str(tmp_path / "bad.jsonl")}
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    sweep = json.loads(json.dumps(sweep).replace('"MISSING"', json.dumps(files["MISSING"]))
                       .replace('"BAD"', json.dumps(files["BAD"])))  # fmt: skip
    with FaultServer() as server:
        params = tmp_path / "run.yaml"
        params.write_text(json.dumps({**tiny_params(), "base_url": server.base_url,
                                      "rate_sweep": {"rates": [1], **sweep}}))  # fmt: skip
        status = main(["run", str(params), "--out", str(tmp_path / "out")])
        sent = server.completion_requests()
    err = capsys.readouterr().err
    expected = said.replace("MISSING", files["MISSING"]).replace("BAD", files["BAD"])
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {expected}"), err
    assert sent == [] and not (tmp_path / "out").exists()
