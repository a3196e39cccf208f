"""The notebooks' `parameters` cells and what `toolkit run` passes them agree name for name."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

from toolkit.notebook import params_from
from toolkit.params import make_params
from toolkit.publish import notebook_parameters

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _parameter_cell(name: str) -> dict[str, object]:
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    (cell,) = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
    namespace: dict[str, object] = {}
    exec(compile(ast.parse(cell.source), name, "exec"), namespace)  # plain assignments of literals
    return {k: v for k, v in namespace.items() if k.isupper()}


@pytest.mark.parametrize("name", ["prefill", "decode_matrix"])
def test_every_passed_parameter_is_declared_in_the_notebook(name: str, tmp_path: Path) -> None:
    passed = notebook_parameters(make_params({"disturbed_retries": 5}), tmp_path)
    declared = _parameter_cell(name)
    assert sorted(passed) == sorted(declared)  # papermill would warn of any unknown one and the run ignore it


def test_notebook_values_reach_the_run_parameters(tmp_path: Path) -> None:
    passed = notebook_parameters(make_params({"disturbed_retries": 5, "read_timeout_s": 7}), tmp_path)
    params = params_from(_parameter_cell("decode_matrix") | passed)
    assert params.disturbed_retries == 5 and params.read_timeout_s == 7
