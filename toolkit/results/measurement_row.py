"""A line of results.jsonl validated against the result schema (toolkit.base.schema.Measurement) before it becomes
a record: each field of its type (a phase and a status of their lists, whole numbers whole, text text) and each
number finite, not negative and within its limit (toolkit.results.limits); unknown fields (a newer toolkit's) pass.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from types import NoneType, UnionType
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

from pydantic import Field, create_model

from toolkit.base.errors import ResultsError
from toolkit.base.schema import SCHEMA_VERSION, Measurement
from toolkit.method.speculation import POSITIONS_PATTERN
from toolkit.method.spread import MIN_RECORDED_DOF
from toolkit.results.limits import (
    MAX_CONCURRENCY,
    MAX_FIGURE,
    MAX_STEPS,
    MAX_TOKENS,
    MAX_TOTAL_TOKENS,
    Figure,
    FileModel,
    Fraction,
    Ms,
    Seconds,
    SignedMs,
    TokensPerS,
)
from toolkit.results.validation import Loc, shown, validated

# fields with a range of their own; any other whole number is a count of tokens or events (MAX_TOTAL_TOKENS)
OWN_RANGE: dict[str, Any] = {
    "context_tokens": Annotated[int, Field(ge=1, le=MAX_TOKENS)],
    "concurrency": Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)],
    "round": Annotated[int, Field(ge=0, le=MAX_STEPS)],  # 0: a drift control before the first round
    "schema_version": Annotated[int, Field(ge=1, le=SCHEMA_VERSION)],
    "waiting_fraction": Fraction,
    "kv_usage_peak": Fraction,
    "spec_acceptance_rate": Fraction,
    "schema_valid_share": Fraction,
    "tool_called_share": Fraction,
    "tool_args_valid_share": Fraction,
    "spec_acceptance_by_position": Annotated[str, Field(pattern=POSITIONS_PATTERN)],
    "window_dof": Annotated[float, Field(ge=MIN_RECORDED_DOF, le=MAX_FIGURE)],  # a t quantile's dof
    "wire_ttft_p50_ms": SignedMs,  # a server timing that breaks the cross-check (toolkit.method.breakdown)
    "wire_ttft_mean_ms": SignedMs,
}
_COUNT = Annotated[int, Field(ge=0, le=MAX_TOTAL_TOKENS)]


def _ranged(name: str, kind: Any) -> Any:
    """`kind` (a field's type) with the range its name says: tokens per second, milliseconds, seconds, a count."""
    if name in OWN_RANGE:
        return OWN_RANGE[name]
    if kind is int:
        return _COUNT
    if kind is float:
        return TokensPerS if "tok_s" in name else Ms if "_ms" in name else Seconds if name.endswith("_s") else Figure
    return kind  # bool, str, a Literal


def _model() -> type[FileModel]:
    hints = get_type_hints(Measurement)
    specs: dict[str, Any] = {}
    for field in fields(Measurement):
        hint = hints[field.name]
        members = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
        kinds = [kind for kind in members if kind is not NoneType]
        kind = _ranged(field.name, kinds[0] if len(kinds) == 1 else hint)
        annotation = kind | None if NoneType in members else kind
        specs[field.name] = (annotation, ... if field.default is MISSING else field.default)
    return create_model("MeasurementRow", __base__=FileModel, **specs)


MeasurementRow = _model()


def validated_measurement(value: Any, where: Callable[[Loc], str]) -> Measurement:
    """`value` (a line's JSON) as a Measurement; ResultsError ``WHERE: FIELD: VALUE should be ...`` if it is not
    one (and ``WHERE: schema_version N is newer ...`` for a newer toolkit's line)."""
    if isinstance(value, dict) and isinstance(version := value.get("schema_version"), int) and version > SCHEMA_VERSION:
        raise ResultsError(f"{where(('schema_version',))}: schema_version {shown(version)} is newer than this "
                           f"toolkit's {SCHEMA_VERSION}")  # fmt: skip
    validated(MeasurementRow, value, where)
    return Measurement.from_dict(value)
