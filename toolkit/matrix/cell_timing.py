"""Where a decode cell's time went: the breakdown (toolkit.method.breakdown) of the requests that ended inside its
window, and the server's histograms between the window's edge scrapes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.loadgen.open_loop import server_fields
from toolkit.loadgen.stream_events import StreamResult
from toolkit.matrix.prometheus import MetricsSnapshot, histogram_split
from toolkit.method.breakdown import breakdown_row, request_split


def cell_breakdown(
    results: Sequence[StreamResult],
    start: float,
    end: float,
    before: MetricsSnapshot | None,
    after: MetricsSnapshot | None,
) -> dict[str, Any]:
    """The cell's `BREAKDOWN_COLUMNS`: its requests that ended without error inside [start, end], and the server's
    queue, prefill and decode histograms between the scrapes at the window's edges."""
    import pandas as pd

    rows = []
    for r in results:
        if r.error is not None or not r.done or not r.token_events or r.ttft_s is None:
            continue
        last = r.token_events[-1][0]
        if not start <= last <= end:
            continue
        fields = server_fields(r.server_timing, r.ttft_s * 1e3)
        rows.append({"error": None, "sent_s": r.started, "first_token_s": r.started + r.ttft_s,
                     "last_token_s": last, "output_tokens": r.completion_tokens, **fields})  # fmt: skip
    columns = ["error", "sent_s", "first_token_s", "last_token_s", "output_tokens", *server_fields(None, None)]
    frame = pd.DataFrame(rows, columns=columns).astype({c: "float64" for c in columns if c != "error"})
    frame["error"] = frame["error"].astype(object)
    return breakdown_row(request_split(frame), histogram_split(before, after))
