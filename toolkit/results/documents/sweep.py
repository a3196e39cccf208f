"""rates/sweep.json: a rate sweep's parameters as run (toolkit.rates.params.RateParams.public, no secret), the
server's model, and the search's result once it ran; an imported sweep's tool, files and rates."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Self

from pydantic import Field, JsonValue

from toolkit.base.errors import RateSweepError, ResultsError
from toolkit.results.documents.base import Document, Number

SWEEP_FILE = "sweep.json"


class SweepDocument(Document):
    """A rate sweep's sweep.json. The fields its readers use are named; every other parameter is kept as written."""

    error: ClassVar[type[ResultsError]] = RateSweepError

    run_id: str | None = Field(default=None, description="The sweep's id; a resumed sweep keeps it.")
    run_label: str | None = Field(default=None, description="The run's label.")
    results_dir: str | None = Field(default=None, description="The folder the sweep was written to.")
    source: str | None = Field(default=None, description="An imported sweep's tool; None: measured by the toolkit.")
    imported_from: list[str] | None = Field(default=None, description="An imported sweep's file names.")
    model: str | None = Field(default=None, description="The served model the sweep ran against.")
    models: dict[str, Number] | None = Field(default=None, description="A model mix's weights by served name.")
    endpoint: str | None = Field(default=None, description="completions, chat or embeddings.")
    rates: list[Number | str] | None = Field(default=None, description='The listed rates (req/s; "inf": at once).')
    replay_source: str | None = Field(default=None, description="A replayed file's description.")
    steady_trim: Number | None = Field(default=None, description="The share of a step's start and end left out.")
    slo_ttft_ms: Number | None = Field(default=None, description="The service level's TTFT limit.")
    slo_tpot_ms: Number | None = Field(default=None, description="The service level's TPOT limit.")
    slo_e2e_ms: Number | None = Field(default=None, description="The service level's end-to-end limit.")
    goodput_target: Number | None = Field(default=None, description="The share of requests that must meet it.")
    classes: list[dict[str, JsonValue]] | None = Field(
        default=None, description="A class sweep's classes, each with its name, priority and own limits."
    )
    search: bool | dict[str, JsonValue] | None = Field(
        default=None, description="Whether to search (the parameter), then the search's result (highest_rate, …)."
    )
    search_precision: Number | None = Field(default=None, description="The search's relative precision.")
    images: int | None = Field(default=None, description="Images per chat request; None: a sweep before images.")
    image_size: str | None = Field(default=None, description="Their size, WxH pixels; None: the default.")

    @classmethod
    def read(cls, path: str | Path) -> Self:
        """sweep.json at `path`; RateSweepError in one line naming it when it is missing, damaged or newer."""
        if not Path(path).is_file():
            raise RateSweepError(f"{path}: missing; not a rate sweep folder")
        return super().read(path)

    @property
    def search_result(self) -> dict[str, JsonValue] | None:
        """The search's result (``{"highest_rate", "bracket", "undecided", …}``) once it ran, else None."""
        return self.search if isinstance(self.search, dict) else None
