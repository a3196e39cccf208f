"""A run's `rate_sweep:` block: checked once where the run enters (`run_sweep`), and handed to
notebooks/rate_sweep.ipynb as its parameters (`sweep_parameters`).

The block gives the notebook's parameters (RATE_PARAMETERS) but the server and the key's variable, which are the
run's. The files it names reach the notebook as absolute paths: its kernel runs in notebooks/.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolkit.params import ParamsError, RunParams

if TYPE_CHECKING:
    from toolkit.rates.params import RateParams

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


@dataclass(frozen=True)
class RunSweep:
    """A run's `rate_sweep:` block, checked: the notebook's values (`sweep_values`) and the sweep they make (its
    folder given when it measures)."""

    values: dict[str, Any]
    params: RateParams


def run_sweep(params: RunParams) -> RunSweep | None:
    """A run's `rate_sweep:` block, checked before anything is launched or sent (ParamsError naming
    ``rate_sweep.<field>``), every field as the sweep will read it and every file it names read (its dataset, its
    classes' own, a result to replay, a trace), so that a bad one fails here, not after the matrix; None when the
    run has none."""
    from toolkit.base.errors import ResultsError
    from toolkit.rates.inputs import load_inputs
    from toolkit.rates.params import SWEEP_BLOCK, make_rate_params

    if params.rate_sweep is None:
        return None
    values = sweep_values(params)
    sweep = make_rate_params({**values, "results_dir": "."}, prefix=f"{SWEEP_BLOCK}.")
    try:
        load_inputs(sweep)
    except (ParamsError, ResultsError) as exc:  # its class kept: the same exit code, one line
        raise type(exc)(f"{SWEEP_BLOCK}.{exc}") from None
    return RunSweep(values, sweep)


def sweep_values(params: RunParams) -> dict[str, Any]:
    """A run's `rate_sweep:` block as RateParams values: the run's server and key variable with the block's fields
    (ParamsError naming one it may not give), the files they name absolute."""
    from toolkit.rates.file_fields import with_absolute_files
    from toolkit.rates.params import FROM_THE_RUN, SWEEP_BLOCK, run_sweep_values

    values = run_sweep_values(params.model_dump(), params.rate_sweep)  # a mapping, without the fields the run sets
    allowed = [n.lower() for n in RATE_PARAMETERS if n.lower() not in FROM_THE_RUN]
    # a model mix (NAME=W,NAME=W) is the block's own; a plain name, the run's, was refused above
    if unknown := sorted(set(params.rate_sweep or {}) - set(allowed) - {"model"}):
        raise ParamsError(f"{SWEEP_BLOCK}.{unknown[0]}: not a rate sweep parameter; allowed: {', '.join(allowed)}")
    return with_absolute_files(values, Path.cwd())


def sweep_parameters(values: Mapping[str, Any], results_dir: Path, *, resume: bool = False) -> dict[str, Any]:
    """The notebook's parameters for a run's sweep (`sweep_values`), measured into the run's folder (`resume`: the
    sweep there continued)."""
    shown = {k: v for k, v in values.items() if k != "run_label"}  # names a new folder only; the run's is given
    if shown.get("classes") is not None:  # each class has its own lengths: not the notebook's default ones
        shown |= {"input_tokens": None, "output_tokens": None}
    if isinstance(shown.get("rates"), list):  # papermill would write inf as a bare name
        shown["rates"] = ["inf" if isinstance(r, float) and math.isinf(r) else r for r in shown["rates"]]
    named = {name.upper(): value for name, value in shown.items()}
    return {**named, "RESULTS_DIR": str(Path(results_dir).resolve()), "MEASURE": True, "RESUME": resume}


def run_sweep_parameters(
    params: RunParams, results_dir: Path, *, resume: bool = False, checked: bool = False
) -> dict[str, Any]:
    """The notebook's parameters for a run's `rate_sweep:` block, measured into the run's folder (`resume`: the
    sweep there continued); the block is checked here unless it was `checked` where the run entered."""
    if not checked:
        check_rate_sweep(params)
    return sweep_parameters(sweep_values(params), results_dir, resume=resume)


def sweep_of(params: RunParams, results_dir: Path) -> RateParams | None:
    """The run's `rate_sweep:` block as the sweep it measures into results_dir (None: the run has none)."""
    from toolkit.rates.params import SWEEP_BLOCK, make_rate_params

    if params.rate_sweep is None:
        return None
    return make_rate_params({**sweep_values(params), "results_dir": str(results_dir)}, prefix=f"{SWEEP_BLOCK}.")


def check_rate_sweep(params: RunParams) -> RateParams | None:
    """A run's `rate_sweep:` block, checked before anything is launched or sent: ParamsError naming the field;
    the sweep (its folder given when it measures), or None when the run has none."""
    return None if (sweep := run_sweep(params)) is None else sweep.params
