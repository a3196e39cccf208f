"""Where a rate sweep's prompts come from: a dataset, shared prefixes, or built cold at their drawn lengths.

A traffic class (toolkit.rates.classes) may name its own `dataset` and shared-prefix settings, as the sweep's
fields of these names; each is the class's own where it gives one (not None), else the sweep's, as its request
kinds are (toolkit.rates.request_kinds). The two sources are alternatives: a class's own `dataset` takes none of
the sweep's shared-prefix settings, and a class's own `workload` not the sweep's dataset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from toolkit.rates.classes import TrafficClass
    from toolkit.rates.params import RateParams

__all__ = ["SOURCE_FIELDS", "PromptSource", "prompt_source"]

SOURCE_FIELDS = ("dataset", "workload", "prefixes", "prefix_tokens", "prefix_choice")


@dataclass(frozen=True)
class PromptSource:
    """What one request's prompt is built from: a dataset's path, or a workload with its shared prefixes."""

    dataset: str | None = None
    workload: str | None = None
    prefixes: int | None = None
    prefix_tokens: int | None = None
    prefix_choice: str | None = None

    @property
    def shared_prefix(self) -> bool:
        return self.workload == "shared-prefix"


def prompt_source(sweep: RateParams, cls: TrafficClass | None = None) -> PromptSource:
    """The prompt source of the sweep's requests, or of class `cls`'s: each field the class's own where it gives one
    (not None), else the sweep's; but none of the sweep's other source beside a class's own dataset or workload."""
    inherited = {k: getattr(sweep, k) for k in SOURCE_FIELDS}
    if cls is None:
        return PromptSource(**inherited)
    if cls.dataset is not None:
        inherited = {"dataset": None}
    elif cls.workload is not None:
        inherited["dataset"] = None
    own = {k: v for k in SOURCE_FIELDS if (v := getattr(cls, k)) is not None}
    return PromptSource(**{**inherited, **own})
