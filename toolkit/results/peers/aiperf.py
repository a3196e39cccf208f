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

Every field read is validated first (peers.aiperf_schema: JSON types, finite, in range, each metric in its unit),
and a request's times against each other (its latency not before its first token, within a week of the first
send); a file that fails is refused in one line naming the file, the line and the field.
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
from toolkit.results.json_text import json_lines, parse_json
from toolkit.results.limits import MAX_DURATION_S, MIN_WINDOW_S
from toolkit.results.peers.aiperf_schema import Aggregate, Figure, Record
from toolkit.results.peers.step import QUANTITIES, PeerStep, number, records_frame
from toolkit.results.validation import document_where, line_where, shown, validated

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
# a record's metrics this reads, and the unit each must be in
RECORD_UNITS: dict[str, str] = {"time_to_first_token": "ms", "request_latency": "ms",
                                "input_sequence_length": "tokens", "output_sequence_length": "tokens"}  # fmt: skip


def read(path: Path, document: Any) -> PeerStep | None:
    """The run in `document` (either export file, the other found beside it), when it is AIPerf's; else None."""
    if _is_aggregate(document):
        records_path = _beside(path, ".jsonl", AGGREGATE_FILE, RECORDS_FILE)
        records = _records(records_path, _json_lines(records_path)) if records_path else None
        return _step(path, records, path, _validated_aggregate(path, document))
    lines = [document] if _is_record(document) else document  # a one-request JSONL parses as one JSON value
    if not (isinstance(lines, list) and lines and _is_record(lines[0])):
        return None
    aggregate_path = _beside(path, ".json", RECORDS_FILE, AGGREGATE_FILE)
    aggregate = _aggregate(aggregate_path) if aggregate_path else Aggregate()
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


def _aggregate(path: Path) -> Aggregate:
    try:
        document = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}:{exc.lineno}: not JSON ({exc.msg}); expected AIPerf's aggregate export") from None
    if not _is_aggregate(document):
        raise ResultsError(f"{path}: not AIPerf's aggregate export (it has no aiperf_version)")
    return _validated_aggregate(path, document)


def _validated_aggregate(path: Path, document: dict[str, Any]) -> Aggregate:
    """The aggregate's fields this reads, each of its type and in its unit (ResultsError naming file, line, field)."""
    aggregate = validated(Aggregate, document, document_where(path))
    for metric, _, unit in [*AIPERF_REPORTED.values(), ("benchmark_duration", "avg", "sec")]:
        figure: Figure[float] | None = getattr(aggregate, metric)
        if figure is not None and figure.unit != unit:
            raise ResultsError(f"{document_where(path)((metric, 'unit'))}: {metric}.unit: {shown(figure.unit)}; "
                               f"expected {unit!r} (AIPerf 0.13.0)")  # fmt: skip
    _window_s(path, aggregate)
    return aggregate


def _json_lines(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of each non-blank line, read a line at a time."""
    lines = []
    try:
        for line_no, line in json_lines(path):
            try:
                if line is None:
                    raise json.JSONDecodeError("a line longer than a JSON line reader reads", "", 0)
                lines.append((line_no, parse_json(line)))
            except json.JSONDecodeError as exc:
                message = f"{path}:{line_no}: not a JSON line ({exc.msg}); expected an AIPerf record"
                raise ResultsError(message) from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc}") from None
    return lines


def _step(path: Path, records: pd.DataFrame | None, aggregate_path: Path, aggregate: Aggregate) -> PeerStep:
    """The run from its records (None: no JSONL found) and its aggregate (empty: none found) at `aggregate_path`."""
    version = " ".join(aggregate.aiperf_version.split())[:40] if aggregate.aiperf_version else None
    models = aggregate.input_config.models if aggregate.input_config else None
    window_s = _window_s(aggregate_path, aggregate)
    return PeerStep(
        source=f"AIPerf {version}" if version else "AIPerf",
        file=path,
        offered_rate=_offered(aggregate),
        records=records,
        reported=_reported(aggregate),
        reproduced=_reproduced(records, window_s) if records is not None and len(records) else {},
        model=next((item.name for item in (models.items or []) if item.name), None) if models else None,
        duration_s=aggregate.benchmark_duration.avg if aggregate.benchmark_duration else None,
    )


def _offered(aggregate: Aggregate) -> float:
    """The profiling phase's request rate; NaN where none was set (a concurrency run) or no aggregate was found."""
    phases = aggregate.input_config.phases if aggregate.input_config else None
    rates = [phase.rate for phase in phases or [] if phase.kind == "profiling" and phase.rate is not None]
    return rates[0] if rates else math.nan


def _reported(aggregate: Aggregate) -> dict[str, float | None]:
    figures: dict[str, float | None] = {}
    for ours, (metric, statistic, _) in AIPERF_REPORTED.items():
        figure: Figure[float] | None = getattr(aggregate, metric)
        figures[ours] = getattr(figure, statistic) if figure is not None else None
    if aggregate.model_fields_set:
        counts = [entry.count for entry in aggregate.error_summary or [] if entry.count is not None]
        figures["failed"] = float(sum(counts))
    return {name: figures.get(name) for name in QUANTITIES}


def _records(path: Path, lines: list[tuple[int, Any]]) -> pd.DataFrame:
    """The profiling phase's requests in the order they were sent, times from the first send."""
    kept = []
    for line, value in lines:
        if not _is_record(value):
            raise ResultsError(f"{path}:{line}: not an AIPerf record (no metadata.request_start_ns and metrics)")
        start = value["metadata"]["request_start_ns"]
        if not isinstance(start, int) or isinstance(start, bool):
            message = f"{path}:{line}: request_start_ns {shown(start)} is not a time in ns; the file is damaged"
            raise ResultsError(message)
        for tag, unit in RECORD_UNITS.items():
            _metric(path, line, value["metrics"], tag, unit)
        gaps = _dict(value["metrics"].get("inter_chunk_latency")).get("value", [])
        if not (isinstance(gaps, list) and all(number(gap) is not None for gap in gaps)):
            raise ResultsError(f"{path}:{line}: inter_chunk_latency is not a list of numbers; the file is damaged")
        record = validated(Record, value, line_where(path, line))
        if (record.metadata.benchmark_phase or "profiling") == "profiling":
            kept.append((record.metadata.request_start_ns, line, record, value.get("error")))
    kept.sort(key=lambda item: item[0])
    base = kept[0][0] if kept else 0
    if kept and (kept[-1][0] - base) / 1e9 > MAX_DURATION_S:
        raise ResultsError(f"{path}:{kept[-1][1]}: metadata.request_start_ns: {(kept[-1][0] - base) / 1e9:.3g} s "
                           f"after the first send, more than {MAX_DURATION_S:g} s; the file is damaged")  # fmt: skip
    return records_frame([_row(path, i, line, record, error, base) for i, (_, line, record, error) in enumerate(kept)])


def _row(path: Path, i: int, line: int, record: Record, saved_error: Any, base: int) -> dict[str, Any]:
    metadata, metrics = record.metadata, record.metrics
    sent = (metadata.request_start_ns - base) / 1e9
    issued = metadata.credit_issued_ns
    ttft = metrics.time_to_first_token.value if metrics.time_to_first_token else None
    latency = metrics.request_latency.value if metrics.request_latency else None
    if ttft is not None and latency is not None and latency < ttft:
        raise ResultsError(f"{path}:{line}: metrics.request_latency: {latency:g} ms ends before its first token "
                           f"(time_to_first_token {ttft:g} ms); the file is damaged")  # fmt: skip
    if issued is not None and abs(issued - metadata.request_start_ns) / 1e9 > MAX_DURATION_S:
        raise ResultsError(f"{path}:{line}: metadata.credit_issued_ns: more than {MAX_DURATION_S:g} s from its send; "
                           "the file is damaged")  # fmt: skip
    error = _error_text(saved_error)
    failed = error is not None or latency is None
    first = math.nan if failed or ttft is None else sent + ttft / 1e3
    gaps = metrics.inter_chunk_latency.value if metrics.inter_chunk_latency else []
    return {
        "step": 0, "offered_rate": math.nan, "request": i,
        "scheduled_s": sent if issued is None else (issued - base) / 1e9, "sent_s": sent,
        "first_token_s": first, "last_token_s": math.nan if latency is None or failed else sent + latency / 1e3,
        "chunk_times_s": None if math.isnan(first) else list(accumulate((gap / 1e3 for gap in gaps), initial=first)),
        "input_tokens": int(metrics.input_sequence_length.value) if metrics.input_sequence_length else 0,
        "output_tokens": int(metrics.output_sequence_length.value) if metrics.output_sequence_length else 0,
        "error": (error or "no request latency recorded") if failed else None,
    }  # fmt: skip


def _metric(path: Path, line: int, metrics: dict[str, Any], tag: str, unit: str) -> None:
    """A record's metric `tag` is absent, or a number in `unit` (its range is the model's: aiperf_schema.Record)."""
    entry = metrics.get(tag)
    if entry is None:
        return
    value = entry.get("value") if isinstance(entry, dict) else entry
    if not (isinstance(entry, dict) and entry.get("unit") == unit and number(value) is not None):
        unit_read = shown(entry.get("unit")) if isinstance(entry, dict) else "none"
        raise ResultsError(f"{path}:{line}: {tag} is not a number in {unit}: {shown(value)} (unit {unit_read}); "
                           "the file is damaged")  # fmt: skip


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _error_text(error: Any) -> str | None:
    """AIPerf's ErrorDetails (code, type, message) as one line; None for no error."""
    if error is None:
        return None
    if not isinstance(error, dict):
        return _words(error) or "error"
    head = " ".join(_words(part) for part in (error.get("type"), error.get("code")) if part is not None)
    return " ".join(f"{head or 'error'}: {_words(error.get('message')) or 'no message'}".split())


def _words(value: Any) -> str:
    """Text as one line; a number as written; a list or an object (never walked: it may nest deep) by its kind."""
    return " ".join(value.split()) if isinstance(value, str) else "" if value is None else shown(value)


def _window_s(path: Path, aggregate: Aggregate) -> float | None:
    """The profiling phase's span, `start_time` to `end_time` in the aggregate: from the phase's start (before its
    first request) to the end of its last request, what AIPerf's throughputs divide by (observation_duration); None
    when the aggregate holds neither. ResultsError when they are not times or span no plausible window."""
    if aggregate.start_time is None or aggregate.end_time is None:
        return None
    try:
        span = datetime.fromisoformat(aggregate.end_time) - datetime.fromisoformat(aggregate.start_time)
        seconds = span.total_seconds()
    except (TypeError, ValueError, OverflowError):
        raise ResultsError(f"{document_where(path)(('start_time',))}: start_time {shown(aggregate.start_time)} to "
                           f"end_time {shown(aggregate.end_time)}: not two ISO 8601 times") from None  # fmt: skip
    if not MIN_WINDOW_S <= seconds <= MAX_DURATION_S:
        raise ResultsError(f"{document_where(path)(('end_time',))}: start_time to end_time spans {seconds:.3g} s; "
                           f"expected {MIN_WINDOW_S:g} to {MAX_DURATION_S:g} s")  # fmt: skip
    return seconds


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
