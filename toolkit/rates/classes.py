"""Traffic classes of a rate sweep: each its weight in the mix, request shape, service level and priority.

A step's arrivals are drawn for the whole mix at its rate; each arrival then picks its class by weight, from a
generator seeded by the sweep's seed and the step (the same seed, the same classes). Read from a `classes:` list
(in a params file, or a YAML file of its own: a list, or a mapping with a `classes:` key).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolkit.base.errors import DatasetError, ParamsError
from toolkit.base.text import printable
from toolkit.base.yaml_files import yaml_problem
from toolkit.method.goodput import ServiceLevel
from toolkit.params import _one_line
from toolkit.rates.dataset import DatasetItem, load_dataset
from toolkit.rates.prompt_sources import SOURCE_FIELDS
from toolkit.rates.rate_values import MAX_TOKENS, Lengths, checked_lengths
from toolkit.rates.request_kinds import KIND_FIELDS, ImageCount, ImageSize, ResponseFormatSpec, ToolsFile

__all__ = [
    "TrafficClass",
    "check_class_models",
    "class_rng",
    "draw_classes",
    "load_class_datasets",
    "parse_classes",
    "read_classes_file",
]

MAX_CLASSES = 100
_CLASS_STREAM = 4  # the step's generator for its classes: (seed, step, 4), beside lengths (1), Ray (2), thinks (3)
_PRIORITY = 2**31  # vLLM takes any int; this bound keeps it a 32-bit one


class TrafficClass(BaseModel):
    """One class of requests: its share of the arrivals (`weight`), shape, service level and vLLM `priority`
    (sent in every request body when given; honoured by a server run with `--scheduling-policy priority`), and
    optionally its own request kinds (a response format, tools, images) and prompt source (a dataset, shared
    prefixes) in place of the sweep's."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", max_length=64)
    weight: float = Field(gt=0)
    input_tokens: int | Lengths | None = None  # None: its prompts are a dataset's (its own or the sweep's)
    output_tokens: int | Lengths
    slo_ttft_ms: float | None = Field(None, gt=0)
    slo_tpot_ms: float | None = Field(None, gt=0)
    slo_e2e_ms: float | None = Field(None, gt=0)
    priority: int | None = Field(None, ge=-_PRIORITY, lt=_PRIORITY, strict=True)
    model: str | None = Field(None, min_length=1, max_length=256)  # served name (a LoRA adapter's); None: the sweep's
    endpoint: Literal["chat", "completions"] | None = None  # where its requests go; None: the sweep's
    # its requests' kinds (toolkit.rates.request_kinds), as the sweep's fields of these names; None: the sweep's
    response_format: ResponseFormatSpec | None = None
    tools: ToolsFile | None = None
    tool_choice: str | None = None
    images: ImageCount | None = None
    image_size: ImageSize | None = None
    # where its prompts come from (toolkit.rates.prompt_sources), as the sweep's fields of these names and bounds; a
    # shared-prefix workload only (a conversation is the sweep's); None: the sweep's
    dataset: str | None = None
    workload: Literal["shared-prefix"] | None = None
    prefixes: int | None = Field(None, ge=1, le=100_000)
    prefix_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)
    prefix_choice: Literal["uniform", "zipf"] | None = None

    @field_validator("weight", mode="before")
    @classmethod
    def _weight(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("is true or false; allowed: a number above 0")
        return value

    @field_validator("input_tokens", "output_tokens", mode="before")
    @classmethod
    def _lengths(cls, value: Any) -> int | Lengths | None:
        return None if value is None else checked_lengths(value)

    def has_slo(self) -> bool:
        return any(v is not None for v in (self.slo_ttft_ms, self.slo_tpot_ms, self.slo_e2e_ms))

    def service_level(self, target: float) -> ServiceLevel:
        return ServiceLevel(self.slo_ttft_ms, self.slo_tpot_ms, self.slo_e2e_ms, target)

    def public(self) -> dict[str, Any]:
        """The class as sweep.json holds it: its request kinds and prompt source only where it gives its own (a
        sweep from before them reads back the same, and resumes)."""
        optional = (*KIND_FIELDS, *SOURCE_FIELDS)
        return {k: v for k, v in self.model_dump(mode="python").items() if k not in optional or v is not None}


def read_classes_file(path: str | Path, where: str = "classes") -> Any:
    """A YAML file's classes: the list it holds, or its mapping's `classes:` list; ParamsError in one line."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ParamsError(f"{where}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"{where}: {path} is not valid YAML: {yaml_problem(exc)}") from None
    if isinstance(data, dict) and set(data) == {"classes"}:
        return data["classes"]
    if not isinstance(data, list):
        raise ParamsError(f"{where}: {path} must hold a list of classes, or a mapping with only a `classes:` list")
    return data


def parse_classes(value: Any, where: str = "classes") -> list[TrafficClass]:
    """The classes of `value` (a list of mappings, or a YAML file's path holding one); ParamsError with one line
    naming the class and its field (``classes.rag.weight: ...``): a bad field, a duplicate name, weights whose sum
    is not a finite number."""
    items = read_classes_file(value, where) if isinstance(value, str | Path) else value
    if isinstance(items, TrafficClass):
        items = [items]
    if not isinstance(items, list | tuple) or not items:
        raise ParamsError(f"{where}: must be a list of classes, each with name, weight, input_tokens, output_tokens "
                          "and its service level (slo_ttft_ms, slo_tpot_ms, slo_e2e_ms)")  # fmt: skip
    if len(items) > MAX_CLASSES:
        raise ParamsError(f"{where}: {len(items)} classes; allowed: at most {MAX_CLASSES}")
    classes: list[TrafficClass] = []
    for index, item in enumerate(items):
        if isinstance(item, TrafficClass):
            classes.append(item)
            continue
        named = item.get("name") if isinstance(item, dict) else None
        label = f"{where}.{named if isinstance(named, str) and named else index}"
        if not isinstance(item, dict):
            raise ParamsError(f"{label}: must be a mapping of name, weight, input_tokens, output_tokens, slo_*_ms")
        try:
            classes.append(TrafficClass(**item))
        except ValidationError as exc:
            raise ParamsError(_one_line(exc, TrafficClass, f"{label}.")) from None
    names = [c.name for c in classes]
    if duplicate := next((n for n in names if names.count(n) > 1), None):
        raise ParamsError(f"{where}.{duplicate}: a second class of that name; each class needs its own name")
    total = sum(c.weight for c in classes)  # inf past the largest float (fsum raises)
    if not (math.isfinite(total) and total > 0):
        raise ParamsError(f"{where}: the weights sum to {total:g}; allowed: weights above 0 with a finite sum")
    return classes


def check_class_models(classes: list[TrafficClass], served: list[str], base_url: str) -> None:
    """ParamsError in one line for the first class whose `model` the server does not serve (its /v1/models), before
    anything is sent."""
    for c in classes:
        if c.model is not None and c.model not in served:
            raise ParamsError(f"classes.{c.name}.model: {printable(c.model)!r} is not served by {base_url}; served: "
                              f"{', '.join(printable(name) for name in served)}")  # fmt: skip


def load_class_datasets(classes: list[TrafficClass]) -> dict[str, list[DatasetItem]]:
    """Each class's own dataset's requests, by class name (a file two classes name read once); DatasetError in one
    line naming the class (``classes.chat.dataset: cannot read ...``) when one is unreadable, malformed or empty."""
    read: dict[str, list[DatasetItem]] = {}
    found: dict[str, list[DatasetItem]] = {}
    for c in classes:
        if c.dataset is None:
            continue
        if c.dataset not in read:
            try:
                read[c.dataset] = load_dataset(c.dataset)
            except DatasetError as exc:
                raise DatasetError(f"classes.{c.name}.{exc}") from None
        found[c.name] = read[c.dataset]
    return found


def class_rng(seed: int, step: int) -> np.random.Generator:
    """The generator of a step's classes: the sweep's seed and the step's index decide them."""
    return np.random.default_rng((seed, step, _CLASS_STREAM))


def draw_classes(classes: list[TrafficClass], n: int, rng: np.random.Generator) -> list[int]:
    """Each of `n` arrivals' class (an index into `classes`), drawn by weight."""
    weights = np.array([c.weight for c in classes], dtype=float)
    return [int(i) for i in rng.choice(len(classes), size=n, p=weights / weights.sum())]
