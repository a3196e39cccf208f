"""A rate sweep's input files, read and checked before anything is sent: its dataset, its classes' own datasets,
a peer's result to replay or a trace's window (each defect one line naming the field and the file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from toolkit.rates.classes import load_class_datasets
from toolkit.rates.dataset import DatasetItem, load_dataset
from toolkit.rates.params import RateParams
from toolkit.rates.replay import MOONCAKE_BLOCK_TOKENS, Replay, load_replay, load_trace
from toolkit.servers.request_log import log_size

__all__ = ["SweepInputs", "load_inputs"]


@dataclass(frozen=True)
class SweepInputs:
    """What a sweep's files hold: the sweep's dataset, each class's own (by class name), the step to replay."""

    dataset: list[DatasetItem] | None = None
    class_datasets: dict[str, list[DatasetItem]] = field(default_factory=dict)
    replay: Replay | None = None


def load_inputs(params: RateParams) -> SweepInputs:
    """Every file the sweep names, read and checked: DatasetError, ParamsError or ResultsError in one line."""
    if params.server_log is not None:
        log_size(Path(params.server_log))  # readable now: each step reads what it adds
    dataset = load_dataset(params.dataset) if params.dataset else None
    class_datasets = load_class_datasets(params.classes or [])
    replay = load_replay(params.replay) if params.replay else None
    if params.trace is not None:
        assert params.trace_format is not None
        block = params.trace_block_tokens or MOONCAKE_BLOCK_TOKENS
        replay = load_trace(params.trace, params.trace_format, params.trace_window(), block)
    return SweepInputs(dataset, class_datasets, replay)
