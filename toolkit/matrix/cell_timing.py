"""Where a decode cell's time went: the breakdown (toolkit.method.breakdown) of the requests that ended inside its
window, and the server's histograms between the window's edge scrapes; and, with speculative decoding, the same
requests' acceptance rate by draft position (toolkit.method.speculation)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolkit.loadgen.open_loop import server_fields
from toolkit.loadgen.stream_events import StreamResult
from toolkit.matrix.prometheus import MetricsSnapshot, histogram_split
from toolkit.method.breakdown import breakdown_row, request_split
from toolkit.method.speculation import position_rates, positions_text, summed_histogram


def ended_inside(results: Sequence[StreamResult], start: float, end: float) -> list[StreamResult]:
    """The requests that ended without error, their last token inside [start, end]."""
    return [
        r for r in results
        if r.error is None and r.done and r.token_events and r.ttft_s is not None
        and start <= r.token_events[-1][0] <= end
    ]  # fmt: skip


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
    for r in ended_inside(results, start, end):
        assert r.ttft_s is not None
        last = r.token_events[-1][0]
        fields = server_fields(r.server_timing, r.ttft_s * 1e3)
        rows.append({"error": None, "sent_s": r.started, "first_token_s": r.started + r.ttft_s,
                     "last_token_s": last, "output_tokens": r.completion_tokens, **fields})  # fmt: skip
    columns = ["error", "sent_s", "first_token_s", "last_token_s", "output_tokens", *server_fields(None, None)]
    frame = pd.DataFrame(rows, columns=columns).astype({c: "float64" for c in columns if c != "error"})
    frame["error"] = frame["error"].astype(object)
    return breakdown_row(request_split(frame), histogram_split(before, after))


def cell_speculation(results: Sequence[StreamResult], start: float, end: float) -> dict[str, Any]:
    """`spec_acceptance_by_position` and `spec_request_steps`: the acceptance histograms of the requests that ended
    inside [start, end], summed; both None when none of them carried one (no speculation, or a server that does not
    say per request), the rates also None when they counted no verify step."""
    histograms = [
        r.server_timing.acceptance_histogram
        for r in ended_inside(results, start, end)
        if r.server_timing is not None and r.server_timing.acceptance_histogram is not None
    ]
    total = summed_histogram(histograms)
    if total is None:
        return {"spec_acceptance_by_position": None, "spec_request_steps": None}
    rates = position_rates(total)
    return {"spec_acceptance_by_position": None if rates is None else positions_text(rates),
            "spec_request_steps": sum(total)}  # fmt: skip
