"""A model mix on a rate sweep (issue 47): `--model NAME=W,NAME=W` parsed, bad weights one line, each arrival's
model drawn by weight from the seed, its figures model by model, its tables only when the sweep has a mix."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from toolkit.cli.entry import build_parser
from toolkit.jupyter.rate_notebook import check_rate_sweep, run_sweep_parameters
from toolkit.method.slo_fraction import fraction_interval
from toolkit.params import ParamsError, make_params
from toolkit.rates.cli import params_from_args, summary_table
from toolkit.rates.model_mix import check_mix_models, draw_models, model_rng, parse_model_mix
from toolkit.rates.params import load_rate_params, make_rate_params
from toolkit.reports.class_tables import models_table

MIX = "tiny-llama=1,tiny-lora=3"


def test_a_mix_parses_from_the_flag_and_a_params_files_rate_sweep_block(tmp_path: Path) -> None:
    params = params_from_args(build_parser().parse_args(["rates", "--base-url", "http://h:1", "--model", MIX]))
    assert params.model_mix() == {"tiny-llama": 1.0, "tiny-lora": 3.0} and params.served_model == "tiny-llama"
    assert make_rate_params({"model": "tiny-lora=2"}).model_mix() is None  # a mix of one name is that model
    assert make_rate_params({"model": "tiny-lora=2"}).served_model == "tiny-lora"
    assert make_rate_params({"model": "tiny-lora"}).model_mix() is None
    # a run's rate_sweep block takes a mix as its own `model:` string; a plain name is still the run's
    run = {"base_url": "http://h:1", "model": "tiny-llama", "rate_sweep": {"rates": [1], "model": MIX}}
    (path := tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    assert load_rate_params(path).model_mix() == {"tiny-llama": 1.0, "tiny-lora": 3.0}
    run_params = make_params(run)
    checked = check_rate_sweep(run_params)
    assert checked is not None and checked.model == MIX
    assert run_sweep_parameters(run_params, tmp_path, checked=True)["MODEL"] == MIX  # the notebook's MODEL
    plain = {**run, "rate_sweep": {"rates": [1], "model": "tiny-lora"}}
    with pytest.raises(ParamsError, match=r"^rate_sweep\.model: set by the run, not the sweep"):
        check_rate_sweep(make_params(plain))


@pytest.mark.parametrize(
    ("model", "said"),
    [
        ("a=x", "model: 'a=x': the weight 'x' is not a number; allowed: NAME=WEIGHT,NAME=WEIGHT"),
        ("a=0,b=0", "model: 'a=0': a weight of 0; allowed: NAME=WEIGHT,NAME=WEIGHT with weights above 0"),
        ("a=1,b=-2", "model: 'b=-2': a weight of -2; allowed"),
        ("a=1,b=inf", "model: 'b=inf': a weight of inf; allowed"),
        ("a=1,b", "model: 'b' is not NAME=WEIGHT; allowed"),
        ("=1,b=1", "model: '=1' is not NAME=WEIGHT; allowed"),
        ("a=1,a=2", "model: 'a' is given twice; each model once, with its weight"),
        ("a=1e308,b=1e308", "model: the weights sum past the largest number"),
    ],
)
def test_a_bad_mix_is_one_line_naming_the_part(model: str, said: str) -> None:
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"model": model})
    assert str(caught.value).startswith(said) and "\n" not in str(caught.value)


def test_a_mix_is_refused_beside_classes_embeddings_and_conversations() -> None:
    chat = {"name": "chat", "weight": 1, "input_tokens": 8, "output_tokens": 8}
    with pytest.raises(ParamsError, match=r"^model: a mix and classes: give each class its model instead$"):
        make_rate_params({"model": MIX, "classes": [chat]})
    for other in ({"endpoint": "embeddings"}, {"workload": "conversation", "turns": 2}):
        with pytest.raises(ParamsError, match=r"^model: a mix applies to single generation requests"):
            make_rate_params({"model": MIX, **other})


def test_each_arrival_draws_its_model_by_weight_from_the_seed() -> None:
    """The same seed and step, the same models; the shares drawn hold the weights' within their 95 % binomial
    (Clopper-Pearson) interval, for several seeds and steps."""
    mix = parse_model_mix("a=1,b=3,c=4")
    first = draw_models(mix, 50, model_rng(7, 0))
    assert first == draw_models(mix, 50, model_rng(7, 0)) and first != draw_models(mix, 50, model_rng(7, 1))
    n, held = 2000, 0
    for seed, step in [(0, 0), (1, 0), (2, 3), (47, 1)]:
        drawn = draw_models(mix, n, model_rng(seed, step))
        for name, weight in mix.items():
            low, high = fraction_interval(drawn.count(name), n)
            held += low <= weight / 8 <= high
    assert held == 12  # of 12 intervals at 95 % one could miss by chance; with these fixed seeds none does


def test_a_model_the_server_does_not_serve_is_one_line() -> None:
    check_mix_models({"a": 1.0, "b": 1.0}, ["a", "b"], "http://h:1")
    with pytest.raises(ParamsError, match=r"^model: 'b' is not served by http://h:1; served: a, c$"):
        check_mix_models({"a": 1.0, "b": 1.0}, ["a", "c"], "http://h:1")


def _figures(requests: int, share: float, slo: bool) -> dict:
    return {"requests": requests, "completed": requests, "share": share, "share_low": share - 0.1,
            "share_high": share + 0.1, "weight_share": 0.5, "achieved_rate": 2.5 * share, "goodput": 1.0,
            "slo_fraction": 1.0, "slo_fraction_low": 0.9, "slo_fraction_high": 1.0, "slo_verdict": "meets",
            "ttft_sched_p50_ms": 10.0, "ttft_sched_p90_ms": 20.0, "ttft_sched_p99_ms": 30.0, "tpot_p90_ms": 4.0,
            "limit_fractions": {"ttft": 1.0} if slo else {}}  # fmt: skip


@pytest.mark.parametrize("slo", [True, False])
def test_the_models_table_shows_each_model_of_each_step_and_nothing_for_one_model(slo: bool) -> None:
    models = {"tiny-llama": _figures(6, 0.6, slo), "tiny-lora": _figures(4, 0.4, slo)}
    steps = pd.DataFrame([{"step": 1, "models": models}, {"step": 0, "models": models}])
    table = models_table(steps)
    assert table is not None and list(table["Step"]) == ["0", "0", "1", "1"]
    assert list(table["Model"]) == ["tiny-llama", "tiny-lora"] * 2
    assert list(table["Achieved req/s"])[:2] == ["1.50", "1.00"] and table["TTFT p90"].iloc[0] == "20 ms"
    assert ("Goodput req/s" in table) is slo and ("Meets the SLO" in table) is slo
    assert models_table(pd.DataFrame([{"step": 0}])) is None  # one model: no new table
    text = summary_table([_row(models)])
    assert "tiny-lora" in text.splitlines()[-2] and "each served model of the mix" in text
    assert "tiny-lora" not in summary_table([_row(None)])


def _row(models: dict | None) -> dict:
    row = {"step": 0, "offered_rate": 4.0, "achieved_rate": 4.0, "completed": 10, "requests": 10,
           "output_tok_s": 100.0, "tpot_p50_ms": 4.0, "goodput": 1.0, "slo_fraction": 1.0,
           "server_waiting_max": 0, "lag_p99_ms": 1.0, "lag_flagged": False}  # fmt: skip
    return row if models is None else {**row, "models": models}


def test_the_draw_is_numpys_choice_of_the_normalised_weights() -> None:
    """What `draw_models` does, in one line of numpy: so the shares' expectation is the weights' exactly."""
    mix = {"a": 1.0, "b": 3.0}
    expected = np.random.default_rng((3, 2, 5)).choice(2, size=20, p=[0.25, 0.75])
    assert draw_models(mix, 20, model_rng(3, 2)) == [["a", "b"][i] for i in expected]
