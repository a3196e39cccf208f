"""Sweep files: variants, grid expansion with readable labels, placeholders, and one-line refusals."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolkit.batch.sweep import SweepError, expand, load_sweep
from toolkit.params import ServerSpec

EXAMPLE = Path(__file__).resolve().parents[2] / "params" / "sweep-example.yaml"
SERVER = {"command": "vllm serve m --port 8000 --max-num-seqs {max_num_seqs} -tp {tensor_parallel_size}",
          "env": {"VLLM_LOGGING_LEVEL": "INFO"}}  # fmt: skip


def test_listed_variants_change_their_fields_over_the_common_ones() -> None:
    variants = expand({"duration_s": 5, "concurrency": [1, 2], "variants": [
        {"label": "a", "base_url": "http://127.0.0.1:8001"},
        {"label": "b", "base_url": "http://127.0.0.1:8002", "duration_s": 9, "resources": {"GPU": 8}},
    ]})  # fmt: skip
    assert [v.label for v in variants] == ["a", "b"]
    assert [v.params.base_url for v in variants] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert [v.params.duration_s for v in variants] == [5, 9]
    assert all(v.params.concurrency == [1, 2] for v in variants)
    assert [v.resources for v in variants] == [{}, {"GPU": 8}]
    assert [v.params.run_label for v in variants] == ["a", "b"]  # the label, unless the sweep sets run_label
    assert not any(v.launched for v in variants)


def test_a_grid_expands_into_labelled_variants_and_fills_placeholders() -> None:
    variants = expand({"server": SERVER, "resources": {"GPU": "{tensor_parallel_size}"},
                       "grid": {"max_num_seqs": [64, 128, 256], "tensor_parallel_size": [4, 8]}})  # fmt: skip
    assert [v.label for v in variants] == [f"max_num_seqs={n},tensor_parallel_size={tp}"
                                           for n in (64, 128, 256) for tp in (4, 8)]  # fmt: skip
    first = variants[0]
    assert first.server == ServerSpec(command=["vllm", "serve", "m", "--port", "8000", "--max-num-seqs", "64", "-tp",
                                               "4"], env={"VLLM_LOGGING_LEVEL": "INFO"})  # fmt: skip
    assert first.grid == {"max_num_seqs": 64, "tensor_parallel_size": 4}
    assert first.resources == {"GPU": 4} and first.launched
    assert first.params.run_label == "max_num_seqs_64_tensor_parallel_size_4"


def test_a_grid_key_that_is_a_field_sets_it_and_fills_its_placeholders_too() -> None:
    variants = expand({"base_url": "http://127.0.0.1:{port}", "title": "ctx {max_model_len}",
                       "grid": {"port": [8001, 8002], "max_model_len": [2048]}})  # fmt: skip
    assert [v.params.base_url for v in variants] == ["http://127.0.0.1:8001", "http://127.0.0.1:8002"]
    assert all(v.params.max_model_len == 2048 and v.params.title == "ctx 2048" for v in variants)


def test_a_string_that_is_one_placeholder_takes_the_value_itself() -> None:
    variants = expand({"contexts": "{ctx}", "grid": {"ctx": [["1K", "2K"], [512]]}})
    assert [v.params.contexts for v in variants] == [[1024, 2048], [512]]
    assert [v.label for v in variants] == ["ctx=1K+2K", "ctx=512"]


def test_variants_times_grid_and_a_variant_changes_keys_of_the_common_server_block() -> None:
    variants = expand(
        {
            "server": SERVER,
            "grid": {"max_num_seqs": [1, 2], "tensor_parallel_size": [1]},
            "variants": [{"label": "old", "server": {"env": {"VLLM_USE_V1": 0}}}, {"label": "new"}],
        }
    )
    assert [v.label for v in variants] == ["old,max_num_seqs=1,tensor_parallel_size=1",
                                           "old,max_num_seqs=2,tensor_parallel_size=1",
                                           "new,max_num_seqs=1,tensor_parallel_size=1",
                                           "new,max_num_seqs=2,tensor_parallel_size=1"]  # fmt: skip
    old, new = variants[0].server, variants[2].server
    assert old is not None and new is not None
    assert old.env == {"VLLM_USE_V1": "0"} and new.env == {"VLLM_LOGGING_LEVEL": "INFO"}
    assert old.command == new.command  # the command came from the common block, filled per grid point


def test_grid_values_are_made_safe_for_folder_names() -> None:
    variants = expand({"model": "{model_id}", "grid": {"model_id": ["org/Model 7B", "org/other"]}})
    assert [v.label for v in variants] == ["model_id=org_Model_7B", "model_id=org_other"]
    assert variants[0].params.model == "org/Model 7B"


def test_the_example_sweep_file_loads() -> None:
    variants = load_sweep(EXAMPLE)
    assert len(variants) >= 2
    assert len({v.label for v in variants}) == len(variants)


REFUSALS: list[tuple[dict[str, Any], str]] = [
    ({"duration": 5, "variants": [{"label": "a"}]}, r"^sweep: duration: unknown field; allowed: variants, grid, "),
    ({"variants": [{"label": "a", "max_ouput": 5}]}, r"^sweep: variant 1 \(a\): max_ouput: unknown field; allowed: "),
    ({"variants": [{"label": "a"}, {"label": "a"}]}, r"^sweep: duplicate label 'a' \(variants 1 and 2\)"),
    ({"grid": {"x": [1, 1]}, "title": "{x}"}, r"^sweep: duplicate label 'x=1' \(variants 1 and 2\)"),
    ({"grid": {}}, r"^sweep: grid: empty; allowed: a mapping"),
    ({"grid": {"max_num_seqs": []}, "title": "{max_num_seqs}"}, r"^sweep: grid\.max_num_seqs: empty"),
    (
        {"grid": {"max_num_seq": [1]}, "title": "{max_num_seqs}"},
        r"^sweep: grid\.max_num_seq: unknown field; not a "
        r"run parameter, and no \{max_num_seq\} placeholder",
    ),
    ({"grid": {"n": [1]}, "server": {"command": "vllm --x {m}"}}, r"^sweep: grid\.n: unknown field"),
    ({"grid": {"n": [1]}, "title": "{n} {m}"}, r"^sweep: variant n=1: title: \{m\} has no grid value; grid keys: n$"),
    ({"variants": [{"label": "a", "duration_s": -1}]}, r"^sweep: variant a: duration_s: .*greater than 0"),
    (
        {"variants": [{"label": "a", "server": {"command": "x", "comand": "x"}}]},
        r"^sweep: variant a: server\.comand: unknown param",
    ),
    ({"variants": [{"label": "a b"}]}, r"^sweep: variant 1 \(a b\): label: String should match pattern"),
    ({"variants": [{"label": "compare"}]}, r"^sweep: variant 1: label: 'compare' is reserved"),
    ({"variants": [{"base_url": "http://x:1"}]}, r"^sweep: variant 1: label: required$"),
    ({"variants": []}, r"^sweep: variants: empty"),
    ({"duration_s": 3}, r"^sweep: no variants; give `variants`"),
    ({"variants": [{"label": "a", "resources": {"GPU": -1}}]}, r"^sweep: variant a: resources\.GPU: .*greater than"),
    ({"variants": [{"label": "a", "resources": [1]}]}, r"^sweep: variant 1 \(a\): resources: .*valid dict"),
    ({"grid": {"server": [1]}}, r"^sweep: grid\.server: cannot be a grid key"),
    (
        {"variants": [{"label": "a", "resources": {"GPU": float("inf")}}]},
        r"^sweep: variant a: resources\.GPU: .*finite",
    ),
    ({"variants": [{"label": "a", "duration_s": float("inf")}]}, r"^sweep: variant a: duration_s: .*finite number"),
    (
        {"variants": [{"label": "a", "concurrency": [1.5, True]}]},
        r"^sweep: variant a: concurrency: .*not a list of int",
    ),
    ({"grid": {"concurrency": [[2, 1.5]]}}, r"^sweep: variant concurrency=2\+1\.5: concurrency: .*not a list of int"),
    ({"variants": [{"label": "_" + "x" * 150}]}, r"^sweep: variant _x{59}\.\.\.: label: longer than 150 characters"),
]


@pytest.mark.parametrize(("data", "expected"), REFUSALS)
def test_a_bad_sweep_is_refused_in_one_line(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(SweepError) as info:
        expand(data)
    message = str(info.value)
    assert "\n" not in message
    assert re.search(expected, message), message


def test_a_file_that_is_no_mapping_or_no_yaml(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(SweepError, match=r"must hold a mapping"):
        load_sweep(path)
    path.write_text("grid: {a: [1\n")
    with pytest.raises(SweepError, match=r"is not valid YAML"):
        load_sweep(path)
    with pytest.raises(SweepError, match=r"cannot read"):
        load_sweep(tmp_path / "missing.yaml")
    path.write_text(yaml.safe_dump({"variants": [{"label": "a"}]}))
    assert [v.label for v in load_sweep(path)] == ["a"]


def test_interleave_runs_every_variant_once_a_round_in_alternating_order() -> None:
    variants = expand({"server": {"command": "vllm serve m --max-num-seqs {n}"}, "grid": {"n": [1, 2]},
                       "interleave": 4})  # fmt: skip
    assert [v.label for v in variants] == ["n=1-round1", "n=2-round1", "n=2-round2", "n=1-round2", "n=1-round3",
                                           "n=2-round3", "n=2-round4", "n=1-round4"]  # fmt: skip
    assert [(v.configuration, v.round) for v in variants[:2]] == [("n=1", 1), ("n=2", 1)]
    assert all(v.launched for v in variants)  # each round launches its server anew
    assert variants[2].server == variants[1].server and variants[2].params == variants[1].params
    assert len(expand({"variants": [{"label": "a"}, {"label": "b"}], "interleave": True})) == 8  # true: 4 rounds
    assert [v.round for v in expand({"variants": [{"label": "a"}, {"label": "b"}], "interleave": False})] == [None] * 2


@pytest.mark.parametrize(
    ("interleave", "variants", "expected"),
    [
        (
            1,
            2,
            "sweep: interleave: 1; allowed: true (4 rounds) or an even number of rounds, 2 or more (one round has "
            "no spread across rounds)",
        ),
        (
            0,
            2,
            "sweep: interleave: 0; allowed: true (4 rounds) or an even number of rounds, 2 or more (one round has "
            "no spread across rounds)",
        ),
        (
            3,
            2,
            "sweep: interleave: 3; allowed: true (4 rounds) or an even number of rounds, 2 or more (an odd count "
            "leaves the order unbalanced: one side goes first once more, and a drift from run to run biases the "
            "ratio)",
        ),
        (4, 1, "sweep: interleave: needs at least two variants to compare"),
    ],
)
def test_a_bad_interleave_is_refused_in_one_line(interleave: int, variants: int, expected: str) -> None:
    with pytest.raises(SweepError, match=f"^{re.escape(expected)}$"):
        expand({"variants": [{"label": f"v{i}"} for i in range(variants)], "interleave": interleave})
