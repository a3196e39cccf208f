"""What notebooks/rate_sweep.ipynb's measuring cell asks before it measures, and the arguments it measures with.

The load generator itself (`toolkit.rates`) is imported by that cell only when it measures, so a finished sweep
is shown and re-judged without it. A run's `rate_sweep:` block (check_rate_sweep, run_sweep_parameters,
sweep_of) is toolkit.jupyter.run_sweep's, named here too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolkit.jupyter.run_sweep import RATE_PARAMETERS, check_rate_sweep, run_sweep_parameters, sweep_of
from toolkit.params import ParamsError
from toolkit.results.rate_runs import has_rates

__all__ = [
    "OUTPUTS",
    "RATE_PARAMETERS",
    "check_rate_sweep",
    "new_results_dir",
    "rate_arguments",
    "run_sweep_parameters",
    "should_measure",
    "sweep_of",
]

OUTPUTS = Path("../outputs/rates")  # where a sweep goes when RESULTS_DIR is None (relative to notebooks/)


def should_measure(
    measure: bool, results_dir: str | Path | None, say: Callable[[str], object] = print, *, resume: bool = False
) -> bool:
    """Measure when asked and RESULTS_DIR does not hold a sweep yet, or holds one to resume; a sweep is otherwise
    shown as it is."""
    if not measure:
        return False
    if results_dir is not None and has_rates(results_dir) and not resume:
        say(
            f"{results_dir} holds a rate sweep already: shown as it is (RESULTS_DIR = None measures a new one, "
            "RESUME = True continues it)"
        )
        return False
    return True


def new_results_dir(outputs: Path = OUTPUTS) -> Path:
    """outputs/<UTC timestamp>: a fresh folder name for a sweep (not created here)."""
    return outputs / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def _field_names(params_class: type) -> set[str]:
    if hasattr(params_class, "model_fields"):  # pydantic
        return set(params_class.model_fields)
    if dataclasses.is_dataclass(params_class):
        return {f.name for f in dataclasses.fields(params_class)}
    raise TypeError(f"{params_class.__name__}: neither a pydantic model nor a dataclass")


def rate_arguments(namespace: Mapping[str, Any], params_class: type) -> dict[str, Any]:
    """RateParams keyword arguments from the notebook's UPPER_CASE parameters (None: the field's default) and
    `results_dir` from RESULTS_DIR (None: a new folder); ParamsError naming any parameter RateParams does not take."""
    fields = _field_names(params_class)
    values = {name.lower(): namespace[name] for name in RATE_PARAMETERS if namespace.get(name) is not None}
    values["results_dir"] = str(namespace.get("RESULTS_DIR") or new_results_dir())
    unknown = sorted("RESULTS_DIR" if name == "results_dir" else name.upper() for name in values if name not in fields)
    if unknown:
        raise ParamsError(f"{', '.join(unknown)}: not fields of {params_class.__name__}")
    return values
