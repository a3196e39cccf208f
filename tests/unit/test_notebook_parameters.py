"""The notebooks' `parameters` cells, RunParams and what `toolkit run` passes them agree name for name."""

from __future__ import annotations

import ast
import logging
from pathlib import Path

import nbformat
import pytest
from papermill.translators import PythonTranslator

from toolkit.jupyter.execute import RUN_ONLY, declared_parameters, notebook_parameters, parameters_for
from toolkit.jupyter.notebook import params_from
from toolkit.params import RunParams, make_params

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
# The `rate_sweep:` block is rate_sweep.ipynb's (toolkit.jupyter.rate_notebook.run_sweep_parameters), the
# `capacity:` block the report's (through run.json): not theirs.
RUN_PARAMETERS = {name.upper() for name in RunParams.model_fields if name not in RUN_ONLY}
SLO = {"SLO_TTFT_MS", "SLO_PER_REQUEST_TOK_S"}


def _parameter_cell(name: str) -> dict[str, object]:
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    namespace: dict[str, object] = {}
    exec(compile(ast.parse(cell.source), name, "exec"), namespace)  # plain assignments of literals
    return {k: v for k, v in namespace.items() if k.isupper()}


@pytest.mark.parametrize("name", ["prefill", "decode_matrix"])
def test_measuring_notebooks_take_every_run_parameter_with_its_default(name: str) -> None:
    declared = _parameter_cell(name)
    assert RUN_PARAMETERS | {"RESULTS_DIR", "MEASURE"} <= set(declared)
    defaults = RunParams().model_dump(exclude=RUN_ONLY)
    for field, default in defaults.items():
        if declared[field.upper()] is not None:  # None: the toolkit's default
            assert declared[field.upper()] == default, field


@pytest.mark.parametrize("name", ["prefill", "decode_matrix"])
def test_toolkit_run_passes_each_measuring_notebook_only_what_it_declares(name: str, tmp_path: Path) -> None:
    passed = parameters_for(name, notebook_parameters(make_params({"disturbed_retries": 5}), tmp_path))
    declared = set(_parameter_cell(name))
    assert set(passed) == RUN_PARAMETERS | {"RESULTS_DIR"} and set(passed) <= declared
    assert declared_parameters(name) == declared  # papermill's inspection reads the same cell


def test_report_and_compare_take_only_what_they_use() -> None:
    report, compare = set(_parameter_cell("report")), set(_parameter_cell("compare"))
    assert not (report | compare) & RUN_PARAMETERS
    assert {"RESULTS_DIR", *SLO} <= report and "RUN_DIRS" not in report
    assert {"RUN_DIRS", "LABELS", *SLO} <= compare and "RESULTS_DIR" not in compare
    for name in ("report", "compare"):
        assert all(_parameter_cell(name)[slo] is None for slo in SLO)  # no service level unless asked
    assert parameters_for("report", {"RESULTS_DIR": "x", "BASE_URL": "y"}) == {"RESULTS_DIR": "x"}


def test_notebook_values_reach_the_run_parameters(tmp_path: Path) -> None:
    passed = notebook_parameters(make_params({"disturbed_retries": 5, "read_timeout_s": 7}), tmp_path)
    params = params_from(_parameter_cell("decode_matrix") | passed)
    assert params.disturbed_retries == 5 and params.read_timeout_s == 7


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.stem)
def test_papermill_reads_every_parameters_cell_without_a_warning(path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Papermill's inspection gives up on a line with two `=` (a comment's example included) and logs 'Unable to
    parse line' in every run of the notebook: each cell parses whole, and it finds the names the cell assigns."""
    notebook = nbformat.read(path, as_version=4)
    (cell,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    with caplog.at_level(logging.WARNING, logger="papermill"):
        found = PythonTranslator.inspect(cell)
    assert [r.getMessage() for r in caplog.records] == []
    assert {p.name for p in found} == set(_parameter_cell(path.stem))
