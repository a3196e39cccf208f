"""How often did real decode cells' halves tie in whole tokens? Counted again from the traces that runs keep.

Every decode cell of a run keeps its token events (`traces/decode-<context>x<N>.parquet`,
`toolkit.matrix.traces`). This rebuilds each cell's streams from its trace, over the window the cell was judged
over (the trace's last `window` row), and counts the cells whose two halves received the same whole number
of tokens (`tokens_between`): an interval of ± 0 before the product counted halves continuously. It also reports how
many of the same cells the product's interval (`window_spread`, counted continuously) now gives ± 0. The cells are
grouped by the server that served them (run.json's engine version; the fault server's is `0.0.0-faultserver`).

    .venv/bin/python benchmarks/trace_ties.py FOLDER [FOLDER ...]  # run folders, or folders to search for them

Last line: `trace-ties: engine=<name> cells=N tied=<share> zero_width_now=<share>` per engine.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.window_ties import whole_token_halves  # noqa: E402
from toolkit.loadgen.client import StreamResult  # noqa: E402
from toolkit.method.window import window_spread  # noqa: E402


def streams_of(trace: pd.DataFrame) -> list[StreamResult]:
    """One StreamResult per request of the trace, its token events as the client recorded them."""
    tokens = trace[trace["kind"] == "token"].sort_values("t_s")
    found = []
    for _, rows in tokens.groupby(["stream", "request"]):
        events = [(float(t), int(n)) for t, n in zip(rows["t_s"], rows["tokens"], strict=True)]
        found.append(StreamResult(started=events[0][0], first_token_at=events[0][0], token_events=events,
                                  completion_tokens=events[-1][1]))  # fmt: skip
    return found


def kept_window(trace: pd.DataFrame) -> tuple[float, float] | None:
    """The window the cell was judged over: its trace's last `window` row (start, planned end)."""
    rows = trace[trace["kind"] == "window"]
    if rows.empty:
        return None
    last = rows.iloc[-1]
    return float(last["t_s"]), float(last["end_s"])


def engine_of(folder: Path) -> str:
    """The server that served the run: run.json's engine version (a fault server's is `0.0.0-faultserver`)."""
    try:
        return str(json.loads((folder / "run.json").read_text(encoding="utf-8"))["engine"]["Version"]) or "unnamed"
    except (OSError, KeyError, TypeError, ValueError):
        return "unnamed"


def folder_cells(folder: Path) -> list[tuple[bool, bool]]:
    """Per traced cell: (its halves tied in whole tokens, the product's interval is ± 0)."""
    cells = []
    for path in sorted((folder / "traces").glob("decode-*.parquet")):
        try:
            trace = pd.read_parquet(path)
        except (OSError, ValueError):  # a damaged trace (the tests damage files on purpose)
            continue
        streams, window = streams_of(trace), kept_window(trace)
        if not streams or window is None:
            continue
        start, end = window
        halves = whole_token_halves(streams, start, end)
        spread = window_spread(streams, start, end).total_tok_s
        cells.append((halves[0] == halves[1] and all(halves), spread is not None and spread.half_width == 0))
    return cells


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("folders", nargs="+", type=Path)
    args = ap.parse_args(argv)
    runs = sorted({p.parent.parent for f in args.folders for p in f.rglob("traces/decode-*.parquet")})
    by_engine: dict[str, list[tuple[bool, bool]]] = defaultdict(list)
    for folder in runs:
        by_engine[engine_of(folder)] += folder_cells(folder)
    print(f"{len(runs)} run folders")
    for engine, cells in sorted((e, c) for e, c in by_engine.items() if c):
        tied, zero = sum(t for t, _ in cells), sum(z for _, z in cells)
        print(f"trace-ties: engine={engine} cells={len(cells)} tied={tied / len(cells):.3f} "
              f"zero_width_now={zero / len(cells):.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
