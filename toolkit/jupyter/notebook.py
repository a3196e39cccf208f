"""What the measuring notebooks call: their parameters as RunParams, and the measurement itself.

Nothing here displays; tables and figures come from :mod:`toolkit.reports.views` and :mod:`toolkit.reports.plots`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.errors import ParamsError
from toolkit.matrix.runner import run_matrix
from toolkit.params import RunParams, make_params
from toolkit.results.store import to_dataframe

__all__ = ["measure", "params_from"]

# Notebook parameter (UPPER_CASE) -> RunParams field.
_PARAMETER_NAMES = {name.upper(): name for name in RunParams.model_fields}


def params_from(namespace: dict[str, Any]) -> RunParams:
    """RunParams from the notebook's UPPER_CASE parameters (None means: use the default)."""
    values = {field: namespace[name] for name, field in _PARAMETER_NAMES.items() if namespace.get(name) is not None}
    return make_params(values)


def measure(params: RunParams, results_dir: str | Path, phases: list[str], server: str | None = None) -> pd.DataFrame:
    """Run the phases into the shared results folder (continuing it); the measurements of those phases.

    `server`: None measures `params.base_url`; "embedded" launches the embedded vLLM (CPU, tiny model) for this
    call, in this kernel's session, and stops it when the measurement ends, fails or is interrupted.
    """
    if server not in (None, "embedded"):
        raise ParamsError(f"SERVER: {server!r}; allowed: None (measure BASE_URL) or 'embedded'")
    launched: AbstractContextManager[RunParams] = nullcontext(params)
    if server == "embedded":
        from toolkit.servers.embedded.server import launched_embedded

        launched = launched_embedded(params, Path(results_dir))
    with launched as measured:
        measurements = run_matrix(measured, results_dir, phases=phases, attach=True)
    return to_dataframe([m for m in measurements if m.phase in phases])
