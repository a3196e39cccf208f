"""Sweep files: common run parameters, `variants` and a `grid`, expanded into validated variants before any load.

    contexts: [8K, 32K]               # any RunParams field, and `server:`: common to every variant
    resources: {GPU: 8}               # what a Ray task asks for (--ray); a variant may say otherwise
    variants:                         # each a label and the fields it changes
      - {label: engine-a, base_url: http://10.0.0.1:8000}
    grid:                             # every combination is a variant, labelled `key=value,key=value`
      max_num_seqs: [64, 128]         # not a RunParams field: fills `{max_num_seqs}` placeholders

    interleave: 4                     # optional: every variant measured in 4 rounds, alternating (A B, B A, A B, B A)

With both `variants` and `grid`, every variant is combined with every grid point (label `engine-a,key=value`).
With `interleave: R` (`true`: 4; R even, so that each side goes first as often as the other) each variant becomes
R variants `<label>-round<r>`, run in alternating order (round 1 in the sweep's order, round 2 reversed, ...), each
launching its server anew when it has a `server:` block; the batch then compares each variant with the first by
their paired rounds (toolkit.batch.interleave).
A grid key that is a RunParams field sets it; every grid key also fills its `{key}` placeholders in any string of
the variant (base_url, server.command, server.env, title, ...). A `{name}` that no grid key fills is an error.
Grid keys other than RunParams fields must be used by some placeholder (a typo is refused, not ignored).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from toolkit.base.api_keys import redact
from toolkit.base.errors import SweepError
from toolkit.base.yaml_files import allowed_names, read_yaml_mapping
from toolkit.method.paired import rounds_problem
from toolkit.params import (
    MAX_LABEL,
    ParamsError,
    RunParams,
    ServerSpec,
    make_params,
    make_server_spec,
)

RUN_KEYS: tuple[str, ...] = (*RunParams.model_fields, "server")
LABEL_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.,=+-]*$"
RESERVED_LABELS = frozenset({"compare"})  # <out>/compare/ holds the comparison
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_UNSAFE_LABEL = re.compile(r"[^A-Za-z0-9_.+-]")

Resources = dict[str, Annotated[float, Field(ge=0, allow_inf_nan=False)]]
_ANY_RUN_FIELD: dict[str, Any] = {name: (Any, None) for name in RUN_KEYS}
_FORBID = ConfigDict(extra="forbid")
_SweepFile = create_model("_SweepFile", __config__=_FORBID, variants=(list[Any] | None, None),
                          grid=(dict[str, list[Any]] | None, None), resources=(dict[str, Any] | None, None),
                          interleave=(bool | int | None, None), **_ANY_RUN_FIELD)  # fmt: skip
DEFAULT_INTERLEAVE_ROUNDS = 4
_VariantEntry = create_model("_VariantEntry", __config__=_FORBID, label=(str, Field(pattern=LABEL_PATTERN)),
                             resources=(dict[str, Any] | None, None), **_ANY_RUN_FIELD)  # fmt: skip


class Variant(BaseModel):
    """One run of a batch: its label (also its folder), parameters, server block and Ray resources."""

    model_config = ConfigDict(frozen=True)

    label: str
    params: RunParams
    server: ServerSpec | None = None
    resources: Resources = Field(default_factory=dict)
    grid: dict[str, Any] = Field(default_factory=dict)  # the grid point this variant stands for
    configuration: str | None = None  # interleaved: the label of the variant this is one round of
    round: int | None = None  # interleaved: which round

    @property
    def launched(self) -> bool:
        """Whether the toolkit launches this variant's server (a `server:` block)."""
        return self.server is not None


def load_sweep(path: str | Path) -> list[Variant]:
    """Read and expand a sweep file; every variant validated, or a SweepError before anything runs."""
    return expand(read_yaml_mapping(path, "sweep", SweepError))


def expand(data: dict[str, Any]) -> list[Variant]:
    """The variants of a parsed sweep file, in order: each listed variant (or the common part) × each grid point."""
    top = _validated(_SweepFile, data, "sweep: ")
    common = {k: v for k, v in data.items() if k in RUN_KEYS}
    entries = [_entry(i, raw) for i, raw in enumerate(top.variants or [], 1)]
    if top.variants == []:
        raise SweepError("sweep: variants: empty; allowed: a list of {label: ..., field: value}")
    grid = _grid(top.grid, [common, *entries]) if top.grid is not None else {}
    if not entries and not grid:
        raise SweepError("sweep: no variants; give `variants` (a list of {label: ..., field: value}) or a `grid`")
    points = [dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values())]
    bases = entries or [{}]
    variants = [_variant(common, base, point, top.resources or {}) for base in bases for point in points]
    seen: dict[str, int] = {}
    for number, variant in enumerate(variants, 1):
        if variant.label in seen:
            raise SweepError(
                f"sweep: duplicate label {variant.label!r} (variants {seen[variant.label]} and {number});"
                " each variant needs its own label"
            )
        seen[variant.label] = number
    if top.interleave is None or top.interleave is False:
        return variants
    return interleaved(variants, _rounds(top.interleave))


def _rounds(value: bool | int) -> int:
    if value is True:
        return DEFAULT_INTERLEAVE_ROUNDS
    if (problem := rounds_problem(value)) is not None:
        raise SweepError(f"sweep: interleave: {value!r}; allowed: true (4 rounds) or {problem}")
    return value


def interleaved(variants: list[Variant], rounds: int) -> list[Variant]:
    """Each variant once per round, labelled `<label>-round<r>`, in the order they are measured: round 1 in the
    sweep's order, round 2 reversed, and so on, so that no variant is always first (A B, B A, A B, B A for two)."""
    if len(variants) < 2:
        raise SweepError("sweep: interleave: needs at least two variants to compare")
    out = []
    for round_ in range(1, rounds + 1):
        for variant in variants if round_ % 2 else variants[::-1]:
            label = f"{variant.label}-round{round_}"
            if len(label) > MAX_LABEL:
                raise SweepError(f"sweep: variant {variant.label}: label: too long for its rounds' folders ({label})")
            out.append(variant.model_copy(update={"label": label, "configuration": variant.label, "round": round_}))
    return out


def _validated(model: type[BaseModel], data: dict[str, Any], prefix: str) -> Any:
    try:
        return model(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = prefix + ".".join(str(x) for x in err["loc"])
        if err["type"] == "extra_forbidden":
            raise SweepError(
                f"{where}: unknown field; {allowed_names(str(err['loc'][-1]), model.model_fields)}"
            ) from None
        if err["type"] == "missing":
            raise SweepError(f"{where}: required") from None
        raise SweepError(f"{where}: {err['msg']} (got {redact(repr(err.get('input')))})") from None


def _entry(number: int, raw: Any) -> dict[str, Any]:
    """A listed variant's fields, checked (label, known fields); its label is kept under `label`."""
    if not isinstance(raw, dict):
        raise SweepError(f"sweep: variant {number}: must be a mapping of label: ..., field: value")
    name = f" ({raw['label']})" if isinstance(raw.get("label"), str) else ""
    _validated(_VariantEntry, raw, f"sweep: variant {number}{name}: ")
    if raw["label"] in RESERVED_LABELS:
        raise SweepError(f"sweep: variant {number}: label: {raw['label']!r} is reserved; choose another")
    return dict(raw)


def _grid(grid: dict[str, list[Any]], parts: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Grid keys checked: non-empty lists, each a RunParams field or a `{key}` placeholder used somewhere."""
    if not grid:
        raise SweepError("sweep: grid: empty; allowed: a mapping of key: [values], e.g. {max_num_seqs: [64, 128]}")
    used = set().union(*(_placeholders(part) for part in parts))
    for key, values in grid.items():
        if not values:
            raise SweepError(f"sweep: grid.{key}: empty; allowed: a non-empty list of values")
        if key in ("server", "label", "resources"):
            raise SweepError(f"sweep: grid.{key}: cannot be a grid key; use {{key}} placeholders inside it instead")
        if key not in RunParams.model_fields and key not in used:
            fields = ", ".join(RunParams.model_fields)
            raise SweepError(
                f"sweep: grid.{key}: unknown field; not a run parameter, and no {{{key}}} placeholder "
                f"uses it; allowed: {fields} or a placeholder name"
            )
    return grid


def _placeholders(value: Any) -> set[str]:
    if isinstance(value, str):
        return set(_PLACEHOLDER.findall(value))
    if isinstance(value, dict):
        return set().union(set(), *(_placeholders(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(set(), *(_placeholders(v) for v in value))
    return set()


def _variant(common: dict[str, Any], entry: dict[str, Any], point: dict[str, Any], resources: Resources) -> Variant:
    """Merge common ← variant ← grid point, fill placeholders, validate (RunParams, server block)."""
    named = [entry["label"]] if "label" in entry else []
    label = ",".join(named + [f"{k}={_label_text(v)}" for k, v in point.items()])
    if len(label) > MAX_LABEL:
        raise SweepError(
            f"sweep: variant {label[:60]}...: label: longer than {MAX_LABEL} characters (a folder "
            "name); give the variants shorter labels or grid keys"
        )
    fields = {**common, **{k: v for k, v in entry.items() if k in RUN_KEYS}}
    if isinstance(common.get("server"), dict) and isinstance(entry.get("server"), dict):
        fields["server"] = {**common["server"], **entry["server"]}  # a variant changes keys of the common block
    fields.update({k: v for k, v in point.items() if k in RunParams.model_fields})
    prefix = f"sweep: variant {label}: "
    filled = {k: _fill(v, point, f"{prefix}{k}") for k, v in fields.items()}
    server = filled.pop("server", None)
    values = {k: v for k, v in filled.items() if v is not None}  # null means: the default
    values.setdefault("run_label", _run_label(label))
    try:
        params = make_params(values)
        spec = None if server is None else make_server_spec(server)
    except ParamsError as exc:
        raise SweepError(f"{prefix}{exc}") from None
    chosen = _fill(entry["resources"] if entry.get("resources") is not None else resources, point, f"{prefix}resources")
    try:
        return Variant(label=label, params=params, server=spec, resources=chosen, grid=point)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise SweepError(f"{prefix}{where}: {err['msg']} (got {redact(repr(err.get('input')))})") from None


def _fill(value: Any, point: dict[str, Any], where: str) -> Any:
    """`{key}` placeholders replaced by the grid point's values; a string that is one placeholder of a list or
    mapping value takes the value itself (e.g. `contexts: "{ctx}"` with `ctx: [[1K, 2K], [4K]]`)."""
    if isinstance(value, dict):
        return {k: _fill(v, point, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, point, where) for v in value]
    if not isinstance(value, str):
        return value
    for name in _PLACEHOLDER.findall(value):
        if name not in point:
            keys = ", ".join(point) or "none"
            raise SweepError(f"{where}: {{{name}}} has no grid value; grid keys: {keys}")
    if (whole := _PLACEHOLDER.fullmatch(value)) is not None and isinstance(point[whole.group(1)], list | dict):
        return point[whole.group(1)]
    return _PLACEHOLDER.sub(lambda m: _text(point[m.group(1)]), value)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(_text(v) for v in value)
    return str(value)


def _label_text(value: Any) -> str:
    """A grid value as part of a label (and folder name): lists joined by `+`, other characters `_`."""
    text = "+".join(_text(v) for v in value) if isinstance(value, list) else _text(value)
    return _UNSAFE_LABEL.sub("_", text)


def _run_label(label: str) -> str:
    """A variant's run_label when the sweep sets none: its label with `=` and `,` made safe."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", label)
    return safe if safe[0].isalnum() else f"v{safe}"[:MAX_LABEL]
