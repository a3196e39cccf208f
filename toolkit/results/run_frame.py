"""The runs of a combined frame (`toolkit.results.runs.load_runs`): their labels in order and one run's rows."""

from __future__ import annotations

import pandas as pd

from toolkit.results.runs import RUN_COLUMN


def run_labels(frame: pd.DataFrame) -> list[str]:
    """The runs of a combined frame, in their order of appearance (the first is the baseline)."""
    return list(dict.fromkeys(str(label) for label in frame[RUN_COLUMN]))


def run_rows(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """The rows of one run of a combined frame (ValueError naming the runs when it holds none of that label)."""
    if label not in run_labels(frame):
        raise ValueError(f"run {label!r} is not among the runs {run_labels(frame)}")
    return frame[frame[RUN_COLUMN] == label]
