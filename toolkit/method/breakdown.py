"""Where a request's time went: queue, prefill, decode and the wire, from the server's own clock (pure).

Per request (`toolkit.loadgen.server_timing`): the server's queue (queued to scheduled), its TTFT from scheduling
(the prefill), its generation (first token to last), and the wire: the client's TTFT less queue and server TTFT,
the time outside the engine (network, HTTP, the API server's own work, the client). Per step or cell, the medians of
those (`breakdown_basis` "per-request", with the same requests' mean time between tokens on the client's clock
beside the server's); where no reply carried them, the means of the server's histograms over the
step (toolkit.matrix.prometheus.histogram_split, basis "histograms"); else nothing (basis "").

The API process's own TTFT histogram (`api_ttft_mean_ms`: from a request's arrival there to its first token there)
splits the wire in two: its mean less the queue and prefill means is the hand-over between the API process and the
engine; the client's mean TTFT less it is the rest (HTTP, the work before arrival, the stream out, the client).

The cross-check: a request's client TTFT holds the server's queue and TTFT, and its client end-to-end the server's
whole span, within `CLOCK_TOLERANCE_MS` plus `CLOCK_TOLERANCE_SHARE` of the client's figure. A request that breaks it
(a proxy that rewrites timing, a server clock that runs wrong) is counted in `timing_mismatches`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

BASES: tuple[str, ...] = ("per-request", "histograms", "")
CLOCK_TOLERANCE_MS = 1.0  # two clocks on one machine agree to microseconds; 1 ms covers their reading and rounding
CLOCK_TOLERANCE_SHARE = 0.01  # and 1 % of the client's figure, for clocks that run at slightly different rates
# The step's or cell's columns, in order (None: not known).
BREAKDOWN_COLUMNS: tuple[str, ...] = (
    "breakdown_basis", "queue_p50_ms", "server_ttft_p50_ms", "wire_ttft_p50_ms", "decode_p50_ms",
    "server_itl_p50_ms", "client_itl_p50_ms", "timed_requests", "timing_mismatches",
    "queue_mean_ms", "server_ttft_mean_ms", "wire_ttft_mean_ms", "decode_mean_ms", "api_ttft_mean_ms",
)  # fmt: skip


def request_split(records: pd.DataFrame) -> pd.DataFrame:
    """Per record (the rate records' columns): client TTFT and end-to-end, the server's parts, and whether the
    request breaks the cross-check (`mismatch`; False where the server gave no timing)."""
    import pandas as pd

    ok = records["error"].isna() & records["first_token_s"].notna()
    ttft = ((records["first_token_s"] - records["sent_s"]) * 1e3).where(ok)
    e2e = ((records["last_token_s"] - records["sent_s"]) * 1e3).where(ok)
    queue, prefill = records["server_queue_ms"].where(ok), records["server_ttft_ms"].where(ok)
    decode = records["server_generation_ms"].where(ok)
    gaps = records["output_tokens"] - 1
    client_itl = ((records["last_token_s"] - records["first_token_s"]) * 1e3 / gaps).where(ok & (gaps > 0))
    span = queue + prefill + decode
    late_first = (queue + prefill) - ttft > CLOCK_TOLERANCE_MS + CLOCK_TOLERANCE_SHARE * ttft
    late_last = span - e2e > CLOCK_TOLERANCE_MS + CLOCK_TOLERANCE_SHARE * e2e
    return pd.DataFrame({
        "ttft_ms": ttft, "e2e_ms": e2e, "queue_ms": queue, "server_ttft_ms": prefill,
        "wire_ttft_ms": records["wire_ttft_ms"].where(ok), "decode_ms": decode,
        "server_itl_ms": records["server_itl_ms"].where(ok), "client_itl_ms": client_itl,
        "timed": ok & queue.notna() & prefill.notna(),
        "mismatch": (late_first.fillna(False) | late_last.fillna(False)).astype(bool),
    })  # fmt: skip


def breakdown_row(
    split: pd.DataFrame, histograms: dict[str, float | None], counted: pd.Series | None = None
) -> dict[str, Any]:
    """A step's or cell's `BREAKDOWN_COLUMNS` from its requests' split (`request_split`) and the server's histogram
    means over it, in ms (toolkit.matrix.prometheus.histogram_split). The medians are over the `counted` requests
    (a step's steady part; default all), the mismatches and the client's mean TTFT over all."""
    timed = split[split["timed"] & (True if counted is None else counted)]
    client_ttft = split["ttft_ms"].dropna()
    queue, prefill = histograms.get("queue"), histograms.get("server_ttft")
    wire_mean = None
    if queue is not None and prefill is not None and len(client_ttft):
        wire_mean = float(client_ttft.mean()) - queue - prefill
    basis = "per-request" if len(timed) else "histograms" if queue is not None and prefill is not None else ""
    return {
        "breakdown_basis": basis,
        "queue_p50_ms": _median(timed["queue_ms"]),
        "server_ttft_p50_ms": _median(timed["server_ttft_ms"]),
        "wire_ttft_p50_ms": _median(timed["wire_ttft_ms"]),
        "decode_p50_ms": _median(timed["decode_ms"]),
        "server_itl_p50_ms": _median(timed["server_itl_ms"]),
        "client_itl_p50_ms": _median(timed["client_itl_ms"]),
        "timed_requests": len(timed),
        "timing_mismatches": int(split["mismatch"].sum()),
        "queue_mean_ms": queue,
        "server_ttft_mean_ms": prefill,
        "wire_ttft_mean_ms": wire_mean,
        "decode_mean_ms": histograms.get("decode"),
        "api_ttft_mean_ms": histograms.get("api_ttft"),
    }


def _median(values: pd.Series) -> float | None:
    found = values.dropna()
    value = float(found.median()) if len(found) else math.nan
    return None if math.isnan(value) else value


def mismatch_text(where: str, row: dict[str, Any], requests: int) -> str | None:
    """One line when requests broke the cross-check: how many, and what it means."""
    count = row.get("timing_mismatches") or 0
    if not count:
        return None
    return (f"{where}: {count} of {requests} requests' server timing exceeds the client's clock (the server's "
            f"queue and TTFT above the client's TTFT, or its span above the client's end-to-end, by more than "
            f"{CLOCK_TOLERANCE_MS:g} ms + {CLOCK_TOLERANCE_SHARE:.0%}): a proxy rewriting timing, or a clock "
            "problem")  # fmt: skip
