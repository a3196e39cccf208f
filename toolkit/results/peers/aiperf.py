"""AIPerf 0.13.0's profile exports, read into our per-request records (pure parsing of local files).

`aiperf profile` writes, among other artifacts, two files this reads (aiperf/config/artifacts.py):
- `profile_export.jsonl`, one line per request (aiperf/post_processors/record_export_jsonl_writer.py): its
  `metadata` (`request_start_ns`, wall clock; `credit_issued_ns`, when the rate limiter released it;
  `benchmark_phase`) and its `metrics` in display units (`time_to_first_token`, `request_latency`, ms;
  `inter_chunk_latency`, every gap between content chunks, ms; `input_/output_sequence_length`, tokens), or `error`;
- `profile_export_aiperf.json`, the run's aggregate figures (`time_to_first_token: {unit, avg, p50, p99, …}`,
  `output_token_throughput`, …), `aiperf_version` and the `input_config`.
Either may be given: the other is looked for beside it (`profile_export.jsonl` with `profile_export_aiperf.json`,
or `<prefix>.jsonl` with `<prefix>.json` under `--profile-export-prefix`). Records come from the JSONL (none when
only the aggregate is found); `reported` from the aggregate (all None when only the JSONL is found). Warm-up
requests are left out, as AIPerf leaves them out of its figures.

A request is sent at `request_start_ns`, scheduled at `credit_issued_ns` (AIPerf keeps no target time: this is when
its timing manager issued the request), its first token `time_to_first_token` after the send, a chunk at every
inter-chunk gap after that, its last token `request_latency` after the send.

Under our names (docs/peer-definitions.md): AIPerf's inter_token_latency, (latency − TTFT) / (output − 1) per
request, is our TPOT and goes to `tpot_*`; its inter_chunk_latency (every gap) is our ITL and goes to `itl_*`.
`reproduced` recomputes its figures from the records by its definitions (aiperf/metrics/types/*.py; percentiles by
linear interpolation, aiperf/metrics/metric_dicts.py: metric_result_from_array).
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

import pandas as pd

from toolkit.base.errors import ResultsError
from toolkit.method.goodput import inter_token_ms
from toolkit.results.peers.step import QUANTITIES, PeerStep, number, records_frame

FORMAT = (
    "AIPerf's profile_export.jsonl (metadata.request_start_ns, metrics per request) or profile_export_aiperf.json "
    "(aiperf_version, time_to_first_token, output_token_throughput, …)"
)
RECORDS_FILE = "profile_export.jsonl"  # AIPerf's default names, without --profile-export-prefix
AGGREGATE_FILE = "profile_export_aiperf.json"
# our name -> AIPerf's aggregate metric, statistic and the unit it must be in
AIPERF_REPORTED: dict[str, tuple[str, str, str]] = {
    "output_tok_s": ("output_token_throughput", "avg", "tokens/sec"),
    "request_throughput": ("request_throughput", "avg", "requests/sec"),
    "ttft_p50_ms": ("time_to_first_token", "p50", "ms"),
    "ttft_p99_ms": ("time_to_first_token", "p99", "ms"),
    "tpot_p50_ms": ("inter_token_latency", "p50", "ms"),
    "tpot_p99_ms": ("inter_token_latency", "p99", "ms"),
    "itl_p50_ms": ("inter_chunk_latency", "p50", "ms"),
    "itl_p99_ms": ("inter_chunk_latency", "p99", "ms"),
    "e2e_p50_ms": ("request_latency", "p50", "ms"),
    "e2e_p99_ms": ("request_latency", "p99", "ms"),
    "completed": ("request_count", "avg", "requests"),
}


def read(path: Path, document: Any) -> PeerStep | None:
    """The run in `document` (either export file, the other found beside it), when it is AIPerf's; else None."""
    if _is_aggregate(document):
        records_path = _beside(path, ".jsonl", AGGREGATE_FILE, RECORDS_FILE)
        records = _records(records_path, _json_lines(records_path)) if records_path else None
        return _step(path, records, path, document)
    lines = [document] if _is_record(document) else document  # a one-request JSONL parses as one JSON value
    if not (isinstance(lines, list) and lines and _is_record(lines[0])):
        return None
    aggregate_path = _beside(path, ".json", RECORDS_FILE, AGGREGATE_FILE)
    aggregate = _aggregate(aggregate_path) if aggregate_path else {}
    # numbered as AIPerf writes the file, without blank lines
    return _step(path, _records(path, list(enumerate(lines, 1))), aggregate_path or path, aggregate)


def _is_aggregate(document: Any) -> bool:
    return isinstance(document, dict) and "aiperf_version" in document


def _is_record(value: Any) -> bool:
    metadata = value.get("metadata") if isinstance(value, dict) else None
    return isinstance(metadata, dict) and "request_start_ns" in metadata and isinstance(value.get("metrics"), dict)


def _beside(path: Path, suffix: str, default_name: str, default_other: str) -> Path | None:
    """The other export of the same run: `<prefix><suffix>`, or AIPerf's default name beside its default name."""
    candidates = [path.with_suffix(suffix), *([path.with_name(default_other)] if path.name == default_name else [])]
    return next((candidate for candidate in candidates if candidate.is_file()), None)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None


def _aggregate(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(_text(path))
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); expected AIPerf's aggregate export") from None
    if not _is_aggregate(document):
        raise ResultsError(f"{path}: not AIPerf's aggregate export (it has no aiperf_version)")
    return document


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line."""
    lines = []
    for line_no, line in enumerate(_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append((line_no, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{path}:{line_no}: not a JSON line ({exc.msg}); expected an AIPerf record") from None
    return lines


def _step(path: Path, records: pd.DataFrame | None, aggregate_path: Path, aggregate: dict[str, Any]) -> PeerStep:
    """The run from its records (None: no JSONL found) and its aggregate ({}: none found) at `aggregate_path`."""
    version = aggregate.get("aiperf_version")
    config = _dict(aggregate.get("input_config"))
    return PeerStep(
        source=f"AIPerf {version}" if version else "AIPerf",
        file=path,
        offered_rate=_offered(config),
        records=records,
        reported=_reported(aggregate_path, aggregate),
        reproduced=_reproduced(records, _window_s(aggregate)) if records is not None and len(records) else {},
        model=_model(config),
        duration_s=_figure(aggregate_path, aggregate, "benchmark_duration", "avg", "sec"),
    )


def _offered(config: dict[str, Any]) -> float:
    """The profiling phase's request rate; NaN where none was set (a concurrency run) or no aggregate was found."""
    rates = [
        number(_dict(phase).get("rate"))
        for phase in _list(config.get("phases"))
        if _dict(phase).get("kind") == "profiling"
    ]
    return next((rate for rate in rates if rate is not None), math.nan)


def _model(config: dict[str, Any]) -> str | None:
    names = [_dict(item).get("name") for item in _list(_dict(config.get("models")).get("items"))]
    return next((name for name in names if isinstance(name, str)), None)


def _reported(path: Path, aggregate: dict[str, Any]) -> dict[str, float | None]:
    figures = {ours: _figure(path, aggregate, *spec) for ours, spec in AIPERF_REPORTED.items()}
    if aggregate:
        counts = [number(_dict(entry).get("count")) for entry in _list(aggregate.get("error_summary"))]
        figures["failed"] = float(sum(count for count in counts if count is not None))
    return {name: figures.get(name) for name in QUANTITIES}


def _figure(path: Path, aggregate: dict[str, Any], metric: str, statistic: str, unit: str) -> float | None:
    result = aggregate.get(metric)
    if not isinstance(result, dict):
        return None
    if result.get("unit") != unit:
        raise ResultsError(f"{path}: {metric} is in {result.get('unit')!r}; expected {unit!r} (AIPerf 0.13.0)")
    return number(result.get(statistic))


def _records(path: Path, lines: list[tuple[int, Any]]) -> pd.DataFrame:
    """The profiling phase's requests in the order they were sent, times from the first send."""
    kept = []
    for line, value in lines:
        if not _is_record(value):
            raise ResultsError(f"{path}:{line}: not an AIPerf record (no metadata.request_start_ns and metrics)")
        start = value["metadata"]["request_start_ns"]
        if not isinstance(start, int) or isinstance(start, bool):
            raise ResultsError(f"{path}:{line}: request_start_ns {start!r} is not a time in ns; the file is damaged")
        if value["metadata"].get("benchmark_phase", "profiling") == "profiling":
            kept.append((start, line, value))
    kept.sort(key=lambda item: item[0])
    base = kept[0][0] if kept else 0
    return records_frame([_row(path, i, line, value, base) for i, (_, line, value) in enumerate(kept)])


def _row(path: Path, i: int, line: int, value: dict[str, Any], base: int) -> dict[str, Any]:
    metadata, metrics = value["metadata"], value["metrics"]
    sent = (metadata["request_start_ns"] - base) / 1e9
    issued = number(metadata.get("credit_issued_ns"))
    ttft, latency = _metric(path, line, metrics, "time_to_first_token"), _metric(path, line, metrics, "request_latency")
    error = _error_text(value.get("error"))
    failed = error is not None or latency is None
    first = math.nan if failed or ttft is None else sent + ttft / 1e3
    gaps = _dict(metrics.get("inter_chunk_latency")).get("value", [])
    if not (isinstance(gaps, list) and all(number(gap) is not None for gap in gaps)):
        raise ResultsError(f"{path}:{line}: inter_chunk_latency is not a list of numbers; the file is damaged")
    return {
        "step": 0, "offered_rate": math.nan, "request": i,
        "scheduled_s": sent if issued is None else (issued - base) / 1e9, "sent_s": sent,
        "first_token_s": first, "last_token_s": math.nan if latency is None or failed else sent + latency / 1e3,
        "chunk_times_s": None if math.isnan(first) else list(accumulate((gap / 1e3 for gap in gaps), initial=first)),
        "input_tokens": int(_metric(path, line, metrics, "input_sequence_length", "tokens") or 0),
        "output_tokens": int(_metric(path, line, metrics, "output_sequence_length", "tokens") or 0),
        "error": (error or "no request latency recorded") if failed else None,
    }  # fmt: skip


def _metric(path: Path, line: int, metrics: dict[str, Any], tag: str, unit: str = "ms") -> float | None:
    entry = metrics.get(tag)
    if entry is None:
        return None
    if not (isinstance(entry, dict) and entry.get("unit") == unit and number(entry.get("value")) is not None):
        raise ResultsError(f"{path}:{line}: {tag} is not a number in {unit}: {entry!r}; the file is damaged")
    return number(entry["value"])


def _error_text(error: Any) -> str | None:
    """AIPerf's ErrorDetails (code, type, message) as one line; None for no error."""
    if error is None:
        return None
    if not isinstance(error, dict):
        return " ".join(str(error).split()) or "error"
    head = " ".join(str(part) for part in (error.get("type"), error.get("code")) if part is not None)
    return " ".join(f"{head or 'error'}: {error.get('message') or 'no message'}".split())


def _window_s(aggregate: dict[str, Any]) -> float | None:
    """The profiling phase's span, `start_time` to `end_time` in the aggregate: from the phase's start (before its
    first request) to the end of its last request, what AIPerf's throughputs divide by (observation_duration)."""
    try:
        start, end = datetime.fromisoformat(aggregate["start_time"]), datetime.fromisoformat(aggregate["end_time"])
    except (KeyError, TypeError, ValueError):
        return None
    return (end - start).total_seconds()


def _reproduced(records: pd.DataFrame, window_s: float | None) -> dict[str, float | None]:
    """AIPerf's figures from its records, by its definitions: over the requests without error; TTFT to the first
    content chunk; ITL (our TPOT) (latency − TTFT) / (output − 1) for outputs of 2 or more; every inter-chunk gap;
    percentiles by linear interpolation; throughputs over the phase's window (None without the aggregate)."""
    ok = records[records["error"].isna()]
    ttft = (ok["first_token_s"] - ok["sent_s"]) * 1e3
    long = ok[ok["output_tokens"] >= 2]
    tpot = (long["last_token_s"] - long["first_token_s"]) / (long["output_tokens"] - 1) * 1e3
    e2e = (ok["last_token_s"] - ok["sent_s"]) * 1e3
    gaps = pd.Series(inter_token_ms(ok), dtype=float)
    over = window_s if window_s is not None and window_s > 0 else None
    return {
        "ttft_p50_ms": _quantile(ttft, 0.5), "ttft_p99_ms": _quantile(ttft, 0.99),
        "tpot_p50_ms": _quantile(tpot, 0.5), "tpot_p99_ms": _quantile(tpot, 0.99),
        "itl_p50_ms": _quantile(gaps, 0.5), "itl_p99_ms": _quantile(gaps, 0.99),
        "e2e_p50_ms": _quantile(e2e, 0.5), "e2e_p99_ms": _quantile(e2e, 0.99),
        "output_tok_s": float(ok["output_tokens"].sum()) / over if over else None,
        "request_throughput": len(ok) / over if over else None,
        "completed": float(len(ok)),
    }  # fmt: skip


def _quantile(values: pd.Series, q: float) -> float | None:
    values = values.dropna()
    return float(values.quantile(q)) if len(values) else None
