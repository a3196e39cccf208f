"""Reading an open-loop rate sweep back from a run folder: `<run>/rates/` (docs/method/rates.md, Open-loop rates).

`rates/sweep.json` holds the parameters as run (and the search's result), `rates/steps.jsonl` one line per step
(its summary, server samples and token cross-check), `rates/step-<NNN>.parquet` that step's per-request records
(`toolkit.method.goodput.RECORD_COLUMNS`). A file that is missing or malformed is one line naming it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.errors import RateSweepError
from toolkit.method.embeddings import complete_embedding_records
from toolkit.method.goodput import (
    BOUND_COLUMNS,
    RECORD_COLUMNS,
    REQUIRED_RECORD_COLUMNS,
    ServiceLevel,
)
from toolkit.results.documents.step import STEPS_FILE, read_steps
from toolkit.results.documents.sweep import SWEEP_FILE, SweepDocument
from toolkit.results.runs import default_label, unique_labels
from toolkit.results.store import RUN_FILE, read_json

__all__ = [
    "DEFAULT_TARGET",
    "RATES_DIR",
    "STEPS_FILE",
    "STEP_FLAGS",
    "STEP_NUMBERS",
    "SWEEP_FILE",
    "RateSweep",
    "RateSweepError",
    "has_rates",
    "load_rate_sweep",
    "load_rate_sweeps",
    "service_level",
    "step_file",
]

RATES_DIR = "rates"
DEFAULT_TARGET = 0.99  # the fraction of requests that must meet the limits when the sweep names none
# Per-step columns a reader can count on (NaN where a line lacks one: an older sweep's percentile bounds, or an
# unbounded end); booleans are False where missing.
STEP_NUMBERS: tuple[str, ...] = (
    "offered_rate", "scheduled_rate", "achieved_rate", "requests", "completed", "failed", "duration_s",
    "request_throughput", "output_tok_s", "goodput", "slo_fraction", "slo_fraction_low", "slo_fraction_high", "held",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
    "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms", "lag_p50_ms", "lag_p99_ms", "lag_max_ms",
    "ttft_sched_p50_ms", "ttft_sched_p99_ms", "e2e_sched_p50_ms", "e2e_sched_p99_ms", *BOUND_COLUMNS,
    "server_running_max", "server_waiting_max", "server_waiting_mean", "kv_usage_max",
    "server_prompt_tokens", "server_generation_tokens", "client_prompt_tokens", "client_generation_tokens",
    "prefix_cache_hit_rate", "external_prefix_cache_hit_rate", "expected_hit_rate",
)  # fmt: skip
STEP_FLAGS: tuple[str, ...] = ("searched", "lag_flagged", "slo_met")


def step_file(step: int) -> str:
    """The per-request records of step `step`: ``step-007.parquet``."""
    return f"step-{step:03d}.parquet"


@dataclass(frozen=True)
class RateSweep:
    """One sweep as run: its parameters, one row per step, and the per-request records of every step."""

    folder: Path
    sweep: SweepDocument  # a mapping given is read as sweep.json would be
    steps: pd.DataFrame  # by step number; STEP_NUMBERS and STEP_FLAGS always present; no cold control
    records: pd.DataFrame  # RECORD_COLUMNS, every step's requests (cold controls' too)
    controls: pd.DataFrame | None = None  # the cold control steps (`control_of`: the step each repeats), if any

    def __post_init__(self) -> None:
        if not isinstance(self.sweep, SweepDocument):
            object.__setattr__(self, "sweep", SweepDocument.parsed(dict(self.sweep), self.folder / SWEEP_FILE))

    @property
    def level(self) -> ServiceLevel:
        """The service level the sweep was judged against (its SLO_* limits and goodput target)."""
        return service_level(self.sweep)

    @property
    def search(self) -> dict[str, Any] | None:
        """``{"highest_rate": x | None, "bracket": [lo, hi]}`` when the sweep searched, else None."""
        return self.sweep.search_result


def service_level(sweep: SweepDocument) -> ServiceLevel:
    """`ServiceLevel` from sweep.json's slo_ttft_ms, slo_tpot_ms, slo_e2e_ms and goodput_target (a fraction)."""
    target = sweep.goodput_target
    try:
        return ServiceLevel(
            ttft_ms=sweep.slo_ttft_ms,
            tpot_ms=sweep.slo_tpot_ms,
            e2e_ms=sweep.slo_e2e_ms,
            target=DEFAULT_TARGET if target is None else target,
        )
    except (TypeError, ValueError) as exc:
        raise RateSweepError(f"{SWEEP_FILE}: service level: {exc}") from None


def has_rates(folder: str | Path) -> bool:
    """Whether a run folder holds a rate sweep (a `rates/` folder with its sweep.json)."""
    return (Path(folder) / RATES_DIR / SWEEP_FILE).is_file()


def _read_steps(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise RateSweepError(f"{path}: missing; the sweep recorded no step")
    rows = [step.as_dict() for step in read_steps(path, rated=True)]
    if not rows:
        raise RateSweepError(f"{path}: no step recorded")
    steps = pd.DataFrame(rows)
    if steps["step"].duplicated().any():
        raise RateSweepError(f"{path}: step {int(steps['step'][steps['step'].duplicated()].iloc[0])} twice")
    for column in STEP_NUMBERS:
        steps[column] = pd.to_numeric(steps[column], errors="coerce") if column in steps else math.nan
    for column in STEP_FLAGS:
        steps[column] = steps[column].map(lambda v: v is True) if column in steps else False  # JSON true only
    return steps.sort_values("step").reset_index(drop=True)


def _read_records(folder: Path, steps: Sequence[int]) -> pd.DataFrame:
    frames = []
    for step in steps:
        path = folder / step_file(step)
        if not path.is_file():
            raise RateSweepError(f"{path}: missing; {STEPS_FILE} lists step {step}")
        try:
            frame = pd.read_parquet(path)
        except Exception as exc:  # pyarrow raises several kinds for a damaged file
            raise RateSweepError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
        missing = [c for c in REQUIRED_RECORD_COLUMNS if c not in frame.columns]
        if missing:
            raise RateSweepError(f"{path}: missing record columns {', '.join(missing)}")
        if len(frame) and not (frame["step"] == step).all():
            raise RateSweepError(f"{path}: holds records of another step than {step}")
        if "items" in frame.columns and not pd.api.types.is_integer_dtype(frame["items"]):  # an embeddings step's
            raise RateSweepError(f"{path}: items: not whole counts of inputs per request")
        frames.append(complete_embedding_records(frame))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(RECORD_COLUMNS))


def load_rate_sweep(folder: str | Path) -> RateSweep:
    """The sweep of a run folder; RateSweepError (one line) when a file is missing or malformed."""
    folder = Path(folder)
    rates = folder / RATES_DIR
    if not rates.is_dir():
        raise RateSweepError(f"{folder}: no rate sweep (no {RATES_DIR}/ folder)")
    sweep = SweepDocument.read(rates / SWEEP_FILE)
    service_level(sweep)  # a bad service level is named here, not in the first figure
    steps = _read_steps(rates / STEPS_FILE)
    records = _read_records(rates, [int(s) for s in steps["step"]])
    if "control_of" not in steps or steps["control_of"].isna().all():
        return RateSweep(folder=folder, sweep=sweep, steps=steps, records=records)
    control = steps["control_of"].notna()
    measured, controls = steps[~control].reset_index(drop=True), steps[control].reset_index(drop=True)
    return RateSweep(folder=folder, sweep=sweep, steps=measured, records=records, controls=controls)


def load_rate_sweeps(folders: Sequence[str | Path], labels: Sequence[str] | None = None) -> dict[str, RateSweep]:
    """The sweeps of those run folders that hold one, by run label (the labels `runs.load_runs` gives them)."""
    if labels is None:
        infos = [read_json(Path(f) / RUN_FILE) if (Path(f) / RUN_FILE).exists() else {} for f in folders]
        labels = unique_labels([default_label(info, f) for info, f in zip(infos, folders, strict=True)])
    return {
        str(label): load_rate_sweep(folder) for label, folder in zip(labels, folders, strict=True) if has_rates(folder)
    }
