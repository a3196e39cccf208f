"""Compare's trade-off: each run's decode cells by per-request against total tok/s, and the Pareto frontier of
each run (pure: DataFrames in, DataFrames of numbers or display strings out)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from toolkit.base.schema import RAN_STATUSES
from toolkit.method.disturbed import disturbed_mask
from toolkit.reports.number_format import as_number, format_tok_s
from toolkit.results.run_frame import run_labels, run_rows

TRADEOFF_CAPTION = "Pareto frontier of each run: no other cell of that run is faster both per request and in total."


def pareto_mask(x: Sequence[float], y: Sequence[float]) -> list[bool]:
    """True for each point that no other point dominates (at least as high in both, higher in one)."""
    points = list(zip(x, y, strict=True))
    return [not any(ox >= px and oy >= py and (ox > px or oy > py) for ox, oy in points) for px, py in points]


def tradeoff_points(frame: pd.DataFrame) -> pd.DataFrame:
    """Decode cells that ran undisturbed, with per-request and total tok/s, and ``on_frontier`` within their run."""
    decode = frame[(frame["phase"] == "decode") & frame["status"].isin(RAN_STATUSES) & ~disturbed_mask(frame)]
    points = pd.DataFrame(
        {
            "run": decode["run"],
            "context": decode["context"],
            "context_tokens": decode["context_tokens"],
            "concurrency": decode["concurrency"],
            "status": decode["status"],
            "per_request_tok_s": [as_number(v) for v in decode["per_request_tok_s"]],
            "total_tok_s": [as_number(v) for v in decode["total_tok_s"]],
        }
    ).dropna(subset=["per_request_tok_s", "total_tok_s"])
    points["on_frontier"] = False
    for label in run_labels(frame):
        mine = points["run"] == label
        points.loc[mine, "on_frontier"] = pareto_mask(
            points.loc[mine, "per_request_tok_s"].tolist(), points.loc[mine, "total_tok_s"].tolist()
        )
    return points.reset_index(drop=True)


def pareto_frontier(frame: pd.DataFrame, label: str) -> pd.DataFrame:
    """The frontier cells of one run, by per-request tok/s ascending (so total tok/s descends)."""
    points = tradeoff_points(run_rows(frame, label))
    frontier = points[points["on_frontier"]]
    return frontier.sort_values(["per_request_tok_s", "total_tok_s"]).reset_index(drop=True)


def frontier_display(frame: pd.DataFrame) -> pd.DataFrame:
    """Every run's Pareto frontier cells as display strings."""
    data = [
        [
            label,
            row["context"],
            f"{int(row['concurrency']):,}",
            str(row["status"]),
            format_tok_s(row["per_request_tok_s"]),
            format_tok_s(row["total_tok_s"]),
        ]
        for label in run_labels(frame)
        for row in pareto_frontier(frame, label).to_dict("records")
    ]
    columns = ["Run", "Context", "Requests at once", "Status", "Per request tok/s", "Total tok/s"]
    return pd.DataFrame(data, columns=columns, dtype=object)
