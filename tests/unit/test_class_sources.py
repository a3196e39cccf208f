"""A traffic class's own prompt source (a dataset, shared-prefix settings): the sweep's fields, the class's own where
it gives them, else the sweep's; checked by the sweep's rules, each a one-line error naming the class."""

from __future__ import annotations

import pytest

from toolkit.params import ParamsError
from toolkit.rates.lengths import check_lengths
from toolkit.rates.params import make_rate_params
from toolkit.rates.prompt_sources import PromptSource, prompt_source

A = {"name": "a", "weight": 1, "input_tokens": 64, "output_tokens": 8, "slo_ttft_ms": 500}
B = {"name": "b", "weight": 1, "input_tokens": 64, "output_tokens": 8, "slo_ttft_ms": 500}
READ = {k: v for k, v in A.items() if k != "input_tokens"}  # a class whose prompts are a dataset's


def sources(sweep: dict, *classes: dict) -> list[PromptSource]:
    params = make_rate_params({**sweep, "classes": list(classes)})
    return [prompt_source(params, c) for c in params.classes or []]


def test_a_classs_source_is_its_own_else_the_sweeps() -> None:
    shared = {"workload": "shared-prefix", "prefixes": 4, "prefix_tokens": 32}
    own, taken = sources(shared, {**B, "prefix_tokens": 16, "prefix_choice": "zipf"}, A)
    assert own == PromptSource(None, "shared-prefix", 4, 16, "zipf") and taken == PromptSource(None, **shared)
    # a class's own dataset takes none of the sweep's shared prefixes; its own workload not the sweep's dataset
    assert sources(shared, {**READ, "dataset": "d.jsonl"}) == [PromptSource("d.jsonl")]
    mixed = sources({"dataset": "all.jsonl"}, READ, {**B, "workload": "shared-prefix", "prefixes": 2,
                                                   "prefix_tokens": 8})  # fmt: skip
    assert mixed == [PromptSource("all.jsonl"), PromptSource(None, "shared-prefix", 2, 8)]


def test_sweep_json_holds_a_classs_source_only_where_it_gives_one() -> None:
    params = make_rate_params({"classes": [{**READ, "dataset": "d.jsonl"}, B]})
    read, built = params.public()["classes"]
    assert read["dataset"] == "d.jsonl" and read["input_tokens"] is None and "workload" not in read
    assert not {"dataset", "workload", "prefixes", "prefix_tokens", "prefix_choice"} & set(built)
    assert make_rate_params({"classes": [read, built]}).classes == params.classes  # reads back the same


@pytest.mark.parametrize(("classes", "sweep", "said"), [
    ([READ], {}, "rate_sweep: classes.a.input_tokens: required without a dataset (the class's or the sweep's)"),
    ([{**A, "dataset": "d.jsonl"}], {}, "rate_sweep: classes.a.input_tokens: not with a dataset"),
    ([A], {"dataset": "d.jsonl"}, "rate_sweep: classes.a.input_tokens: not with a dataset"),
    ([{**A, "workload": "shared-prefix", "prefixes": 2}], {}, "rate_sweep: classes.a: workload: shared-prefix needs "
     "prefixes (how many) and prefix_tokens (how long)"),
    ([{**A, "prefix_choice": "zipf"}], {}, "rate_sweep: classes.a: prefixes, prefix_tokens, prefix_choice: apply to "
     "workload shared-prefix only"),
    ([{**READ, "dataset": "d.jsonl", "prefixes": 2}], {"workload": "shared-prefix", "prefixes": 2,
     "prefix_tokens": 8}, "rate_sweep: classes.a: prefixes, prefix_tokens, prefix_choice: apply to workload"),
    ([{**A, "prefixes": 3}], {"dataset": "d.jsonl"}, "rate_sweep: classes.a: prefixes, prefix_tokens, prefix_choice: "
     "apply to workload shared-prefix only"),
    ([{**READ, "dataset": "d.jsonl", "workload": "shared-prefix", "prefixes": 1, "prefix_tokens": 8}], {},
     "rate_sweep: classes.a: workload: shared-prefix builds its own prompts; it takes no dataset and no replay"),
    ([{**A, "workload": "conversation"}], {}, "rate_sweep.classes.a.workload: Input should be 'shared-prefix'"),
    ([{**A, "workload": "shared-prefix", "prefixes": 0, "prefix_tokens": 8}], {},
     "rate_sweep.classes.a.prefixes: Input should be greater than or equal to 1"),
    ([A], {"workload": "conversation", "turns": 2}, "rate_sweep: workload: not with classes"),
])  # fmt: skip
def test_a_classs_source_breaking_the_sweeps_rules_is_one_line_naming_it(
    classes: list[dict], sweep: dict, said: str
) -> None:
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"classes": classes, **sweep}, "rate_sweep.")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(said), line


def test_each_classs_shared_prefix_leaves_room_for_its_prompts_and_a_datasets_lengths_are_its_own() -> None:
    wide = {**B, "input_tokens": "uniform:40:200", "prefix_tokens": 16}
    params = make_rate_params({"workload": "shared-prefix", "prefixes": 2, "prefix_tokens": 48, "classes": [A, wide]})
    check_lengths(params, 4096)  # a: 64 tokens, 48 shared; b: from 40, 16 shared
    short = make_rate_params({"workload": "shared-prefix", "prefixes": 2, "prefix_tokens": 56, "classes": [A, B]})
    with pytest.raises(ParamsError, match=r"^classes\.a: input_tokens: from 64; a shared prefix of 56 tokens needs "
                                          r"at least 16 more for each prompt's unique rest$"):  # fmt: skip
        check_lengths(short, 4096)
    check_lengths(make_rate_params({"classes": [{**READ, "dataset": "d.jsonl"}, B]}), 4096)  # a dataset's: as sent
