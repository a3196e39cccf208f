"""A results DataFrame as sorted rows, and the Extras table: every recorded quantity beyond the published reports.

Pure, like :mod:`toolkit.reports.tables`: display strings from a results DataFrame.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from toolkit.base.schema import COLUMNS, PHASE_TITLES
from toolkit.method.speculation import read_positions
from toolkit.reports.number_format import (
    MISSING,
    as_number,
    format_active,
    format_bounded,
    format_count,
    format_ms,
    format_percent,
    format_seconds,
    format_tbt_ms,
    format_tok_s,
)

Row = dict[str, Any]


def _clean(value: Any) -> Any:
    return None if pd.api.types.is_scalar(value) and pd.isna(value) else value


def table_rows(df: pd.DataFrame, phase: str | None = None) -> list[Row]:
    """Rows as dicts (missing values None), prefill first, then by context tokens and concurrency."""
    blank: Row = dict.fromkeys(COLUMNS)
    rows = [blank | {str(k): _clean(v) for k, v in rec.items()} for rec in df.to_dict("records")]
    rows = [r for r in rows if phase is None or r["phase"] == phase]
    order = {"prefill": 0, "decode": 1}
    rows.sort(key=lambda r: (order.get(r["phase"], 2), int(r["context_tokens"]), int(r["concurrency"])))
    return rows


def _yes_no(value: Any) -> str:
    return "yes" if value else "no"


def _whole_percent(value: Any) -> str:
    number = as_number(value)
    return MISSING if number is None else f"{number:.0f}%"


def _unit(unit: str) -> Callable[[Any], str]:
    def whole(value: Any) -> str:
        number = as_number(value)
        return MISSING if number is None else f"{number:,.0f} {unit}"

    return whole


def _digits(places: int, unit: str = "") -> Callable[[Any], str]:
    def fixed(value: Any) -> str:
        number = as_number(value)
        return MISSING if number is None else f"{number:,.{places}f}{unit}"

    return fixed


def _by_position(value: Any) -> str:
    """`spec_acceptance_by_position` as whole percentages, position 1 first: ``62 % · 31 %``."""
    rates = read_positions(value)
    return str(value) if rates is None else " · ".join(f"{rate * 100:.0f} %" for rate in rates)


# Extras beyond the published reports: (key, column title, formatter).
_EXTRAS: tuple[tuple[str, str, Callable[[Any], str]], ...] = (
    ("prompt_tokens", "Prompt tokens", format_count),
    ("server_output_tokens", "Server output tokens", format_count),
    ("token_check", "Server ÷ client tokens", format_percent),
    ("ttft_p90_ms", "TTFT p90 [95 %]", format_ms),
    ("ttft_p99_ms", "TTFT p99 [95 %]", format_ms),
    ("tbt_p90_ms", "Time between tokens p90 [95 %]", format_tbt_ms),  # over every gap of the window
    ("tbt_p99_ms", "Time between tokens p99 [95 %]", format_tbt_ms),
    ("server_tbt_ms", "Server time between tokens", format_tbt_ms),
    ("per_request_tok_s_p10", "Per request tok/s p10", format_tok_s),
    ("per_request_tok_s_ci", "Per request tok/s ±", format_tok_s),
    ("tbt_ms_ci", "Time between tokens ±", format_tbt_ms),
    ("ttft_ms_ci", "TTFT median 95 %", format_ms),  # its ends, [low, high]; ± its larger side where not kept
    ("sub_windows", "Sub-windows", format_count),
    ("spec_acceptance_rate", "Draft acceptance", format_percent),
    ("spec_acceptance_by_position", "Draft acceptance by position", _by_position),
    ("spec_mean_accepted_len", "Mean accepted length", _digits(2)),
    ("client_avg_active", "Client average active", format_active),
    ("requests_started", "Requests started", format_count),
    ("cached_tokens", "Cached tokens", format_count),
    ("max_waiting", "Max waiting", format_count),
    ("waiting_fraction", "Time with waiting", format_percent),
    ("preemptions", "Preemptions", format_count),
    ("kv_usage_peak", "KV usage peak", format_percent),
    ("kv_budget_tokens", "KV budget tokens", format_count),
    ("status_basis", "Status basis", str),
    ("client_saturated", "Client saturated", _yes_no),
    ("loop_lag_p99_ms", "Client loop lag p99", format_tbt_ms),
    ("longest_silence_s", "Longest silence", format_seconds),
    ("attempts", "Attempts", format_count),
    ("disturbed", "Disturbed", str),
    ("client_cpu_pct", "Client CPU", _whole_percent),
    ("gpu_power_w", "GPU power", _unit("W")),
    ("gpu_temp_peak_c", "GPU temperature peak", _unit("°C")),
    ("gpu_sm_clock_mhz", "GPU SM clock", _unit("MHz")),
    ("gpu_throttled", "GPU throttled", _yes_no),
    ("gpu_energy_w", "GPU power (energy counter)", _unit("W")),
    ("joules_per_token", "Energy per token", _digits(3, " J")),
    ("tokens_per_joule", "Tokens per joule", _digits(2)),
    ("concurrency_held", "Concurrency held", format_percent),
    ("cell_wall_s", "Cell wall time", format_seconds),
    ("schema_valid_share", "Valid replies", format_percent),  # decode with a response format (as rate_tables)
    ("tool_called_share", "Tool called", format_percent),  # decode with tools
    ("tool_args_valid_share", "Tool arguments valid", format_percent),
    ("error", "Error", str),
)


_BOUNDED = ("ttft_p90_ms", "ttft_p99_ms", "tbt_p90_ms", "tbt_p99_ms")  # with their 95 % bounds where recorded


def _median_ttft_interval(row: dict[str, Any], fmt: Callable[[Any], str]) -> str:
    """The median TTFT's 95 % interval by its own ends, ``[361, 442]``; a record made before them, ``± 48 ms`` (the
    larger side it kept)."""
    if as_number(row.get("ttft_ms_low")) is None:
        return MISSING if row["ttft_ms_ci"] is None else f"± {fmt(row['ttft_ms_ci'])}"
    return f"[{fmt(row['ttft_ms_low']).removesuffix(' ms')}, {fmt(row['ttft_ms_high']).removesuffix(' ms')}]"


def _shown(row: dict[str, Any], key: str, fmt: Callable[[Any], str]) -> str:
    """One extra's display: ``41.3 ms [40.1, 43.0]`` for a bounded percentile (unbounded: too few values)."""
    if key == "ttft_ms_ci":
        return _median_ttft_interval(row, fmt)
    if key not in _BOUNDED:
        return MISSING if row[key] is None else fmt(row[key])
    stem = key.removesuffix("_ms")
    return format_bounded(row[key], row.get(f"{stem}_low_ms"), row.get(f"{stem}_high_ms"), fmt)


def extras_table(df: pd.DataFrame) -> pd.DataFrame:
    """Recorded quantities beyond the published reports, only rows and columns that have data."""
    rows = table_rows(df)
    for r in rows:
        same_interval = as_number(r.get("client_tokens_server_interval"))
        server = as_number(r["server_output_tokens"])
        client = same_interval if same_interval is not None else as_number(r["output_tokens"])
        r["token_check"] = server / client if server is not None and client else None
    extras = [(k, title, fmt) for k, title, fmt in _EXTRAS if any(r[k] is not None for r in rows)]
    kept = [r for r in rows if any(r[k] is not None for k, _, _ in extras)]
    data = [
        [PHASE_TITLES.get(r["phase"], str(r["phase"])), r["context"], format_count(r["concurrency"])]
        + [_shown(r, k, fmt) for k, _, fmt in extras]
        for r in kept
    ]
    return pd.DataFrame(
        data, columns=["Phase", "Context", "Requests at once", *(t for _, t, _ in extras)], dtype=object
    )
