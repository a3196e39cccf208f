"""The engine tests' cross-check of the client's tokens against vLLM's own counter (vllm:generation_tokens_total).

The server reads its counter somewhere inside each /metrics scrape; the client's tokens between the scrapes' inner
and outer edges bracket that count, 2 % allowed either way (a fast scrape makes the bracket a few tokens wide). The
server counts a token when it sends it, the client when it has read it: when delivery lags more at the window's end
than at its start, the server has counted tokens the client has not yet read. So the upper edge also allows what
the window's rate delivers in the lag: `DELIVERY_LAG_S`, or the cell's longest silence (no stream read a token)
where that is longer, since a stall at the window's end holds back all the server sent meanwhile. Seen: behind the
tests' gateway proxy (a thread in the test's process), 645 tokens against the client's 628 at 324 tok/s, and in CI
373 against 285 at 184 tok/s with a silence of 0.45 s; on the session vLLM in a `make test`, 953 against 910 at
238 tok/s, the measuring kernel's event loop logged late by 106 ms at the window's end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolkit.base.schema import Measurement

DELIVERY_LAG_S = 0.2


def assert_server_agrees(cell: Measurement | Mapping[str, Any]) -> None:
    """The cell's server count lies in its client bracket: 2 % under the inner edge at most, and over the outer edge
    by at most 2 % plus the tokens of the longer of `DELIVERY_LAG_S` and the cell's longest silence at the window's
    rate. `cell`: a measurement, or a run folder's row of one (the failure shows it whole)."""
    m = cell.to_dict() if isinstance(cell, Measurement) else cell
    server, low, high, rate = (m[k] for k in ("server_output_tokens", "client_tokens_min", "client_tokens_max",
                                              "total_tok_s"))  # fmt: skip
    assert server is not None and low and high is not None and rate, cell
    lag = max(DELIVERY_LAG_S, m["longest_silence_s"] or 0.0) * rate
    assert 0.98 * low <= server <= 1.02 * high + lag, cell
