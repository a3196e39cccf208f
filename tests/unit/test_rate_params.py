"""Rate sweep parameters, request lengths and datasets: valid input accepted, bad input one line naming it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from toolkit.params import ParamsError
from toolkit.rates.dataset import DatasetError, load_dataset
from toolkit.rates.lengths import draw_lengths
from toolkit.rates.params import Lengths, load_rate_params, make_rate_params

FIXTURES = Path(__file__).parents[1] / "fixtures" / "rates"


def test_rates_parse_sort_and_take_inf() -> None:
    params = make_rate_params({"rates": "4, 1,inf,2", "requests_per_step": 10})
    assert params.rates == [1.0, 2.0, 4.0, math.inf]
    assert params.public()["rates"] == [1.0, 2.0, 4.0, "inf"]
    assert make_rate_params({}).duration_s == 30.0 and make_rate_params({}).requests_per_step is None


@pytest.mark.parametrize(("values", "message"), [
    ({"rates": "1,x"}, "rates: 'x' is not a rate"),
    ({"rates": [0]}, "rates: 0 is not a positive rate"),
    ({"rates": []}, "rates: [] is not a list of rates"),
    ({"rates": [True]}, "rates: True is not a rate"),
    ({"rates": "1,inf"}, "rates: inf (all at once) needs requests_per_step"),
    ({"duration_s": 3, "requests_per_step": 4}, "duration_s and requests_per_step: give one of them"),
    ({"burstiness": 0.5}, "burstiness: applies to arrival gamma only"),
    ({"arrival": "gamma", "burstiness": 0}, "burstiness: Input should be greater than 0"),
    ({"arrival": "bursty"}, "arrival: Input should be 'poisson', 'constant' or 'gamma'"),
    ({"search": True}, "search: needs a service level"),
    ({"goodput_target": 1.5}, "goodput_target: Input should be less than or equal to 1"),
    ({"input_tokens": "normal:128"}, "input_tokens: 'normal:128' is not a token count or a distribution"),
    ({"input_tokens": 0}, "input_tokens: 0 is not between 1"),
    ({"output_tokens": {"dist": "uniform", "min": 9, "max": 3}}, "output_tokens: max 3 is below min 9"),
    ({"output_tokens": {"dist": "lognormal", "min": 1, "max": 9, "mean": 4}}, "lognormal needs sigma"),
    ({"base_url": "http://user:pw@127.0.0.1:1"}, "base_url: holds user info"),
    ({"api_key_env": "sk-secret"}, "api_key_env: is not an upper-case environment variable name"),
    ({"concurrency": [1]}, "concurrency: unknown parameter; allowed: base_url"),
])  # fmt: skip
def test_bad_parameters_are_one_line_naming_them(values: dict, message: str) -> None:
    with pytest.raises(ParamsError) as caught:
        make_rate_params(values)
    text = str(caught.value)
    assert message in text and "\n" not in text
    assert "pw" not in text and "sk-secret" not in text


def test_lengths_from_text_and_mappings() -> None:
    params = make_rate_params({"input_tokens": "uniform:64:256", "output_tokens": "lognormal:128:0.5:16:1024"})
    assert params.input_tokens == Lengths(dist="uniform", min=64, max=256)
    assert params.output_tokens == Lengths(dist="lognormal", min=16, max=1024, mean=128, sigma=0.5)
    assert make_rate_params({"input_tokens": "512"}).input_tokens == 512
    normal = make_rate_params({"input_tokens": {"dist": "normal", "mean": 100, "std": 10, "min": 1, "max": 200}})
    assert normal.input_tokens == Lengths(dist="normal", min=1, max=200, mean=100, std=10)


def test_drawn_lengths_follow_their_distribution_within_bounds() -> None:
    rng = np.random.default_rng(0)
    assert draw_lengths(128, 3, rng) == [128, 128, 128]
    uniform = np.array(draw_lengths(Lengths(dist="uniform", min=10, max=20), 5000, rng))
    assert uniform.min() == 10 and uniform.max() == 20 and uniform.mean() == pytest.approx(15, rel=0.02)
    normal = np.array(draw_lengths(Lengths(dist="normal", min=1, max=1000, mean=300, std=30), 5000, rng))
    assert normal.mean() == pytest.approx(300, rel=0.01) and normal.std() == pytest.approx(30, rel=0.05)
    lognormal = np.array(draw_lengths(Lengths(dist="lognormal", min=1, max=100_000, mean=200, sigma=0.5), 20_000, rng))
    assert lognormal.mean() == pytest.approx(200, rel=0.03)
    assert np.median(lognormal) == pytest.approx(200 * math.exp(-0.125), rel=0.03)  # exp(mu)
    clipped = draw_lengths(Lengths(dist="lognormal", min=150, max=250, mean=200, sigma=1.0), 2000, rng)
    assert min(clipped) == 150 and max(clipped) == 250


def test_a_run_params_file_gives_its_rate_sweep_block_the_runs_server(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("base_url: http://127.0.0.1:9\nmodel: m\napi_key_env: MY_KEY\nendpoint: completions\n"
                    "contexts: [512]\nrate_sweep:\n  rates: [1, 2, inf]\n  requests_per_step: 20\n"
                    "  slo_ttft_ms: 300\n")  # fmt: skip
    params = load_rate_params(path)
    assert params.rates == [1.0, 2.0, math.inf] and params.slo_ttft_ms == 300 and params.requests_per_step == 20
    assert (params.base_url, params.model, params.api_key_env, params.endpoint) == (
        "http://127.0.0.1:9", "m", "MY_KEY", "completions")  # fmt: skip
    assert load_rate_params(path, base_url="http://127.0.0.1:7").base_url == "http://127.0.0.1:7"  # flags win


@pytest.mark.parametrize(("block", "message"), [
    ("[1, 2]", "rate_sweep: must be a mapping of rate sweep parameters, e.g. rates: [1, 2, 4]"),
    ("{base_url: 'http://127.0.0.1:1'}", "rate_sweep.base_url: set by the run, not the sweep; give it at the top"),
    ("{rates: [1], arrival: steady}", "rate_sweep.arrival: Input should be 'poisson', 'constant' or 'gamma'"),
    ("{rates: [1], duration_s: 5, requests_per_step: 9}", "rate_sweep: duration_s and requests_per_step"),
])  # fmt: skip
def test_a_bad_rate_sweep_block_is_one_line_naming_the_block(tmp_path: Path, block: str, message: str) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(f"base_url: http://127.0.0.1:9\nrate_sweep: {block}\n")
    with pytest.raises(ParamsError) as caught:
        load_rate_params(path)
    assert caught.value.line.startswith(message) and "\n" not in caught.value.line


def test_fixture_datasets_load() -> None:
    jsonl = load_dataset(FIXTURES / "requests.jsonl")
    assert [bool(i.prompt) for i in jsonl] == [True, True, False]
    assert jsonl[0].output_tokens == 24 and jsonl[2].messages is not None and jsonl[2].messages[0]["role"] == "system"
    sharegpt = load_dataset(FIXTURES / "sharegpt.json")
    assert len(sharegpt) == 2  # the one-turn conversation is skipped, as vllm bench serve does
    assert sharegpt[0].prompt and sharegpt[0].reply and sharegpt[0].output_tokens is None


@pytest.mark.parametrize(("text", "message"), [
    ('{"prompt": "a"}\n{"prompt": "b"\n', ":2: not a JSON object"),
    ('{"prompt": "a"}\n\n[1, 2]\n', ":3: not a JSON object"),
    ('{"text": "a"}\n', ':1: needs "prompt" (text) or "messages"'),
    ('{"prompt": "a", "messages": []}\n', ":1: needs"),
    ('{"prompt": ""}\n', ':1: "prompt" is not a non-empty string'),
    ('{"prompt": "a", "output_tokens": 0}\n', ':1: "output_tokens" is not a whole number >= 1'),
    ('{"prompt": "a", "output_tokens": "9"}\n', ':1: "output_tokens" is not a whole number >= 1'),
    ('{"messages": [{"role": "user"}]}\n', ':1: "messages" is not a list'),
    ("\n\n", "holds no request"),
    ('[{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt"}]}]', "entry 1: a turn is not"),
    ('[{"id": 3}]', 'entry 1: no "conversations" list'),
    ('[{"conversations": [{"from": "gpt", "value": "a"}, {"from": "gpt", "value": "b"}]}]', "entry 1: no human"),
    ('[{"conversations": []},\n {"conversations": [}]', ":2: not valid JSON"),
    ('{"a": 1}', "needs"),
])  # fmt: skip
def test_a_malformed_dataset_is_one_line_naming_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(text)
    with pytest.raises(DatasetError) as caught:
        load_dataset(path)
    assert message in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


def test_a_missing_dataset_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"cannot read .*nothing\.jsonl"):
        load_dataset(tmp_path / "nothing.jsonl")
    (tmp_path / "bin.jsonl").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(DatasetError, match="not UTF-8"):
        load_dataset(tmp_path / "bin.jsonl")
    assert json.loads('{"prompt": "x"}')  # the fixture layout is plain JSON lines
