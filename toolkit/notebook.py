"""What the measuring notebooks call: their parameters as RunParams, and the measurement itself.

Nothing here displays; tables and figures come from :mod:`toolkit.views` and :mod:`toolkit.plots`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from toolkit import runs
from toolkit.params import RunParams, make_params
from toolkit.runner import run_matrix
from toolkit.store import to_dataframe

# Notebook parameter (UPPER_CASE) -> RunParams field.
_PARAMETER_NAMES = {name.upper(): name for name in RunParams.model_fields}


def params_from(namespace: dict[str, Any]) -> RunParams:
    """RunParams from the notebook's UPPER_CASE parameters (None means: use the default)."""
    values = {field: namespace[name] for name, field in _PARAMETER_NAMES.items() if namespace.get(name) is not None}
    return make_params(values)


def measure(params: RunParams, results_dir: str | Path, phases: list[str]) -> pd.DataFrame:
    """Run the phases into the shared results folder (continuing it); the measurements of those phases."""
    measurements = run_matrix(params, results_dir, phases=phases, attach=True)
    return to_dataframe([m for m in measurements if m.phase in phases])


def load_results(results_dir: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The latest record of every measurement of a run (measured or imported), and its run.json."""
    return runs.load_run(results_dir)
