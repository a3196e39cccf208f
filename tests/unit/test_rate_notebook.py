"""rate_sweep.ipynb's measuring cell: whether it measures, and the RateParams arguments it builds."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from tests.rate_folders import write_rate_sweep
from tests.unit.test_notebook_parameters import _parameter_cell
from toolkit.jupyter import rate_notebook
from toolkit.jupyter.execute import declared_parameters
from toolkit.params import ParamsError

NAMESPACE: dict[str, Any] = {
    "BASE_URL": "http://127.0.0.1:9", "MODEL": None, "RATES": [1, 2], "ARRIVAL": "gamma", "BURSTINESS": 0.5,
    "SLO_TTFT_MS": 300, "GOODPUT_TARGET": 0.9, "API_KEY_ENV": "MY_KEY", "RESULTS_DIR": "/tmp/out",
    "MEASURE": True, "REJUDGE_TTFT_MS": 100, "steps": object(),
}  # fmt: skip


class PydanticParams(pydantic.BaseModel):
    base_url: str
    model: str | None = None
    rates: list[float]
    arrival: str = "poisson"
    burstiness: float = 1.0
    slo_ttft_ms: float | None = None
    goodput_target: float = 0.99
    api_key_env: str = "VLLM_API_KEY"
    results_dir: str


@dataclasses.dataclass
class NarrowParams:
    base_url: str
    rates: list[float]
    results_dir: str


def test_measures_only_when_asked_and_the_folder_holds_no_sweep(tmp_path: Path) -> None:
    said: list[str] = []
    assert rate_notebook.should_measure(True, None, said.append)
    assert rate_notebook.should_measure(True, tmp_path / "empty", said.append)
    assert not rate_notebook.should_measure(False, tmp_path / "empty", said.append) and said == []
    folder = write_rate_sweep(tmp_path / "done")
    assert not rate_notebook.should_measure(True, folder, said.append)
    assert said == [f"{folder} holds a rate sweep already: shown as it is (RESULTS_DIR = None measures a new one, "
                    "RESUME = True continues it)"]  # fmt: skip
    assert rate_notebook.should_measure(True, folder, said.append, resume=True)
    assert not rate_notebook.should_measure(False, folder, said.append, resume=True) and len(said) == 1


def test_the_arguments_are_the_parameters_given_lower_cased_and_the_folder_as_out() -> None:
    arguments = rate_notebook.rate_arguments(NAMESPACE, PydanticParams)
    assert arguments == {
        "base_url": "http://127.0.0.1:9", "rates": [1, 2], "arrival": "gamma", "burstiness": 0.5, "slo_ttft_ms": 300,
        "goodput_target": 0.9, "api_key_env": "MY_KEY", "results_dir": "/tmp/out",
    }  # fmt: skip
    assert PydanticParams(**arguments).model is None  # None: the field's default


def test_no_folder_is_a_new_one_under_outputs() -> None:
    out = Path(rate_notebook.rate_arguments({**NAMESPACE, "RESULTS_DIR": None}, PydanticParams)["results_dir"])
    assert out.parent == rate_notebook.OUTPUTS and out.name.endswith("Z") and len(out.name) == 16


def test_a_parameter_the_params_do_not_take_is_named() -> None:
    with pytest.raises(ParamsError, match=r"^API_KEY_ENV, ARRIVAL, BURSTINESS, GOODPUT_TARGET, SLO_TTFT_MS: not fields "
                                          r"of NarrowParams$"):  # fmt: skip
        rate_notebook.rate_arguments(NAMESPACE, NarrowParams)
    with pytest.raises(TypeError, match="neither a pydantic model nor a dataclass"):
        rate_notebook.rate_arguments(NAMESPACE, dict)


def test_the_notebook_declares_every_rate_parameter_and_the_re_judging_ones() -> None:
    declared = _parameter_cell("rate_sweep")
    rejudging = {"REJUDGE_TTFT_MS", "REJUDGE_TPOT_MS", "REJUDGE_E2E_MS", "REJUDGE_TARGET"}
    assert {*rate_notebook.RATE_PARAMETERS, "RESULTS_DIR", "MEASURE", *rejudging} <= set(declared)
    assert declared_parameters("rate_sweep") == set(declared)  # papermill's inspection reads the same cell
    assert all(declared[name] is None for name in rejudging)  # the sweep's own level unless asked
    assert declared["API_KEY_ENV"] == "VLLM_API_KEY" and not any("KEY" in n and n != "API_KEY_ENV" for n in declared)


def test_the_notebooks_own_parameters_make_the_engines_rate_params(tmp_path: Path) -> None:
    """The parameters cell of rate_sweep.ipynb, as committed, gives RateParams that validate (no field unknown)."""
    import nbformat

    from toolkit.rates.params import RateParams

    notebook = nbformat.read(Path(__file__).resolve().parents[2] / "notebooks" / "rate_sweep.ipynb", as_version=4)
    cell = next(c for c in notebook.cells if "parameters" in c.metadata.get("tags", []))
    namespace: dict[str, object] = {}
    exec(cell.source, namespace)
    namespace["RESULTS_DIR"] = str(tmp_path / "run")
    params = RateParams(**rate_notebook.rate_arguments(namespace, RateParams))
    assert params.results_dir == str(tmp_path / "run") and params.rates == [1, 2, 4, 8]


def test_a_runs_rate_sweep_block_becomes_the_notebooks_parameters_into_the_runs_folder(tmp_path: Path) -> None:
    from toolkit.params import make_params
    from toolkit.rates.params import RateParams

    run = make_params({
        "base_url": "http://127.0.0.1:9", "model": "m", "api_key_env": "MY_KEY", "endpoint": "completions",
        "run_label": "demo", "rate_sweep": {"rates": [1, float("inf")], "requests_per_step": 6, "slo_ttft_ms": 500},
    })  # fmt: skip
    got = rate_notebook.run_sweep_parameters(run, tmp_path)
    assert got == {
        "BASE_URL": "http://127.0.0.1:9", "MODEL": "m", "API_KEY_ENV": "MY_KEY", "ENDPOINT": "completions",
        "RATES": [1, "inf"], "REQUESTS_PER_STEP": 6, "SLO_TTFT_MS": 500, "RESULTS_DIR": str(tmp_path.resolve()),
        "MEASURE": True, "RESUME": False,
    }  # fmt: skip
    assert rate_notebook.run_sweep_parameters(run, tmp_path, resume=True) == {**got, "RESUME": True}
    assert set(got) <= declared_parameters("rate_sweep")  # papermill would warn about, and drop, any other
    namespace = {**got, "RESULTS_DIR": str(tmp_path)}
    assert RateParams(**rate_notebook.rate_arguments(namespace, RateParams)).rates == [1.0, float("inf")]


@pytest.mark.parametrize(("block", "message"), [
    ({"rates": [1], "drain": False}, "rate_sweep.drain: not a rate sweep parameter; allowed: endpoint, batch_size, "),
    ({"rates": [1], "model": "x"}, "rate_sweep.model: set by the run, not the sweep"),
    ({"rates": [1], "clients": 2}, "rate_sweep: clients: more than one client process needs ray_address"),
])  # fmt: skip
def test_a_bad_rate_sweep_block_is_refused_before_any_load(tmp_path: Path, block: dict[str, Any], message: str) -> None:
    from toolkit.params import make_params

    with pytest.raises(ParamsError) as caught:
        rate_notebook.run_sweep_parameters(make_params({"rate_sweep": block}), tmp_path)
    assert caught.value.line.startswith(message)


def test_the_files_a_runs_rate_sweep_names_reach_the_notebook_as_absolute_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel runs in notebooks/: a schema, tools or dataset file named relative to where `toolkit run` ran
    would be read from there, after the matrix had measured (seen: "cannot read the schema file")."""
    from toolkit.params import make_params

    monkeypatch.chdir(tmp_path)
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "schema.json").write_text('{"type": "object"}')
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    (tmp_path / "files" / "tools.json").write_text(json.dumps([tool]))
    (tmp_path / "files" / "prompts.jsonl").write_text('{"prompt": "one two three"}\n')
    classes = [{"name": "a", "weight": 1, "input_tokens": 8, "output_tokens": 4, "tools": "files/tools.json"},
               {"name": "b", "weight": 1, "output_tokens": 4, "dataset": "files/prompts.jsonl"}]  # fmt: skip
    passed = {}
    for block in ({"rates": [1], "response_format": "json_schema:files/schema.json", "dataset": "files/prompts.jsonl"},
                  {"rates": [1], "classes": classes}):  # fmt: skip
        run = make_params({"base_url": "http://127.0.0.1:9", "model": "m", "endpoint": "chat", "rate_sweep": block})
        passed |= rate_notebook.run_sweep_parameters(run, tmp_path / "out")
    assert passed["RESPONSE_FORMAT"] == f"json_schema:{tmp_path}/files/schema.json"
    assert passed["DATASET"] == f"{tmp_path}/files/prompts.jsonl"
    assert [c.get("tools") for c in passed["CLASSES"]] == [f"{tmp_path}/files/tools.json", None]
    assert [c.get("dataset") for c in passed["CLASSES"]] == [None, f"{tmp_path}/files/prompts.jsonl"]
    got = {k: v for k, v in passed.items() if k not in ("CLASSES", "INPUT_TOKENS", "OUTPUT_TOKENS")}
    monkeypatch.chdir(tmp_path / "files")  # as the kernel, elsewhere: every file still found
    namespace = {**got, "RESULTS_DIR": str(tmp_path / "out")}
    from toolkit.rates.params import RateParams

    assert RateParams(**rate_notebook.rate_arguments(namespace, RateParams)).response_format == got["RESPONSE_FORMAT"]


@pytest.mark.parametrize(
    ("field", "given", "made"),
    [("response_format", "json_schema:../files/schema.json", "json_schema:{files}/schema.json"),  # through ..
     ("tools", "linked.json", "{files}/tools.json")],  # through a symlink
)  # fmt: skip
def test_the_run_and_its_rate_sweep_make_one_file_the_same_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str, given: str, made: str
) -> None:
    """RunParams and the rate_sweep block make a file absolute by one rule (toolkit.base.file_paths): a path
    through `..` or a symlink is the same path in the matrix's parameters and the sweep's (the sweep's used to keep
    them unresolved)."""
    from toolkit.params import make_params

    files = tmp_path / "files"
    files.mkdir()
    (files / "schema.json").write_text('{"type": "object"}')
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    (files / "tools.json").write_text(json.dumps([tool]))
    (tmp_path / "here").mkdir()
    (tmp_path / "here" / "linked.json").symlink_to(files / "tools.json")
    monkeypatch.chdir(tmp_path / "here")
    run = make_params({"base_url": "http://127.0.0.1:9", "model": "m", field: given,
                       "rate_sweep": {"rates": [1], field: given}})  # fmt: skip
    expected = made.format(files=files)
    sweep = rate_notebook.run_sweep_parameters(run, tmp_path / "out")
    assert (getattr(run, field), sweep[field.upper()]) == (expected, expected)
