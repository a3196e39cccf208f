"""What notebooks/rate_sweep.ipynb's measuring cell asks before it measures, and the arguments it measures with.

The load generator itself (`toolkit.rates`) is imported by that cell only when it measures, so a finished sweep
is shown and re-judged without it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.params import ParamsError, RunParams
from toolkit.results.rate_runs import has_rates

if TYPE_CHECKING:
    from toolkit.rates.params import RateParams

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

# The notebook's parameters that are RateParams fields (lower-cased); RESULTS_DIR is its `results_dir`.
RATE_PARAMETERS: tuple[str, ...] = (
    "BASE_URL", "SERVER_METRICS", "MODEL", "ENDPOINT", "BATCH_SIZE", "RATES", "ARRIVAL", "BURSTINESS", "DURATION_S",
    "REQUESTS_PER_STEP",
    "MAX_IN_FLIGHT", "RESCALE_SCHEDULE", "STEADY_TRIM", "SEED", "COLD_PROMPTS", "INPUT_TOKENS", "OUTPUT_TOKENS",
    "DATASET", "SLO_TTFT_MS", "SLO_TPOT_MS", "SLO_E2E_MS", "GOODPUT_TARGET", "SEARCH", "SEARCH_PRECISION",
    "SEARCH_MAX_PROBES",
    "SEARCH_REPEATS", "RAY_ADDRESS", "CLIENTS", "API_KEY_ENV", "REPLAY", "WORKLOAD", "PREFIXES", "PREFIX_TOKENS",
    "PREFIX_CHOICE", "TURNS", "THINK_TIME_S", "THINK_TIME_DIST", "WARMUP_TURNS", "COLD_CONTROL", "TRACE",
    "TRACE_FORMAT", "TIME_SCALE", "TRACE_START_S", "TRACE_DURATION_S", "TRACE_BLOCK_TOKENS", "WARMUP_S",
    "PERCENTILES", "RESPONSE_FORMAT", "TOOLS", "TOOL_CHOICE", "CLASSES", "IMAGES", "IMAGE_SIZE",
)  # fmt: skip
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


def run_sweep_parameters(
    params: RunParams, results_dir: Path, *, resume: bool = False, checked: bool = False
) -> dict[str, Any]:
    """The notebook's parameters for a run's `rate_sweep:` block, measured into the run's folder (`resume`: the
    sweep there continued).

    The block is checked here, before any load (ParamsError naming ``rate_sweep.<field>``), unless it was
    `checked` where the run entered (`check_rate_sweep`). The files it names are handed on as absolute paths: the
    kernel runs in notebooks/.
    """
    from toolkit.rates.file_fields import with_absolute_files
    from toolkit.rates.params import run_sweep_values

    if not checked:
        check_rate_sweep(params)
    values = with_absolute_files(run_sweep_values(params.model_dump(), params.rate_sweep), Path.cwd())
    values.pop("run_label", None)  # names a new folder only; the run's folder is given
    if values.get("classes") is not None:  # each class has its own lengths: not the notebook's default ones
        values |= {"input_tokens": None, "output_tokens": None}
    if isinstance(values.get("rates"), list):  # papermill would write inf as a bare name
        values["rates"] = ["inf" if isinstance(r, float) and math.isinf(r) else r for r in values["rates"]]
    shown = {name.upper(): value for name, value in values.items()}
    return {**shown, "RESULTS_DIR": str(Path(results_dir).resolve()), "MEASURE": True, "RESUME": resume}


def sweep_of(params: RunParams, results_dir: Path) -> RateParams | None:
    """The run's `rate_sweep:` block as the sweep it measures into results_dir (None: the run has none)."""
    from toolkit.rates.file_fields import with_absolute_files
    from toolkit.rates.params import SWEEP_BLOCK, make_rate_params, run_sweep_values

    if params.rate_sweep is None:
        return None
    values = with_absolute_files(run_sweep_values(params.model_dump(), params.rate_sweep), Path.cwd())
    return make_rate_params({**values, "results_dir": str(results_dir)}, prefix=f"{SWEEP_BLOCK}.")


def check_rate_sweep(params: RunParams) -> RateParams | None:
    """A run's `rate_sweep:` block, checked before anything is launched or sent: ParamsError naming the field;
    the sweep (its folder given when it measures: `run_sweep_parameters`), or None when the run has none."""
    from toolkit.rates.params import FROM_THE_RUN, SWEEP_BLOCK, run_sweep_values

    if params.rate_sweep is None:
        return None
    run_sweep_values(params.model_dump(), params.rate_sweep)  # a mapping, without the fields the run sets
    allowed = [n.lower() for n in RATE_PARAMETERS if n.lower() not in FROM_THE_RUN]
    # a model mix (NAME=W,NAME=W) is the block's own; a plain name, the run's, was refused above
    if unknown := sorted(set(params.rate_sweep) - set(allowed) - {"model"}):
        raise ParamsError(f"{SWEEP_BLOCK}.{unknown[0]}: not a rate sweep parameter; allowed: {', '.join(allowed)}")
    return sweep_of(params, Path("."))  # every field checked as the sweep will read it
