"""An embeddings run's cells as a table of display strings and a report section (pure; nothing for a run
without embeddings cells)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from toolkit.reports.extras import table_rows
from toolkit.reports.number_format import MISSING, format_bounded, format_count, format_ms, format_tok_s

EMBEDDINGS_CAPTION = (
    "Embeddings: each cell keeps that many requests of `Batch` inputs of that length in flight for a fixed window, "
    "sending the next as soon as a reply comes. Items/s and input tok/s count the requests whose reply ended in the "
    "window, ± their 95 % interval (batch means); end-to-end latency percentiles [95 % bounds]; server tokens: the "
    "prompt tokens the server counted over the cell against those the replies counted."
)
COLUMNS: tuple[str, ...] = ("Input tokens", "Requests at once", "Batch", "Status", "Items/s", "Input tok/s",
                            "e2e p50 ms", "e2e p90 ms", "e2e p99 ms", "Server tokens")  # fmt: skip


def has_embeddings(frame: pd.DataFrame) -> bool:
    """Whether the run measured embeddings cells."""
    return bool(len(frame)) and bool((frame["phase"] == "embeddings").any())


def _with_ci(value: Any, half_width: Any) -> str:
    shown = format_tok_s(value)
    return shown if shown == MISSING or half_width is None else f"{shown} ± {format_tok_s(half_width)}"


def _server_tokens(row: dict[str, Any]) -> str:
    server, client = row.get("server_prompt_tokens"), row.get("client_prompt_tokens")
    if server is None or client is None:
        return MISSING
    return f"{format_count(server)} / {format_count(client)}"


def _cells(row: dict[str, Any]) -> list[str]:
    status = str(row["status"]) + (f" ({' '.join(str(row['error']).split())[:80]})" if row.get("error") else "")
    latencies = [format_bounded(row[f"e2e_p{q}_ms"], row[f"e2e_p{q}_low_ms"], row[f"e2e_p{q}_high_ms"], _ms)
                 for q in (50, 90, 99)]  # fmt: skip
    return [row["context"], format_count(row["concurrency"]), format_count(row["batch_size"]), status,
            _with_ci(row["items_s"], row["items_s_ci"]), _with_ci(row["input_tok_s"], row["input_tok_s_ci"]),
            *latencies, _server_tokens(row)]  # fmt: skip


def embeddings_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Every embeddings cell, by input length then simultaneous requests, as display strings."""
    rows = table_rows(frame, "embeddings")  # missing values None, by input length then simultaneous requests
    return pd.DataFrame([_cells(r) for r in rows], columns=list(COLUMNS), dtype=object)


def _ms(value: Any) -> str:
    return format_ms(value).removesuffix(" ms")
