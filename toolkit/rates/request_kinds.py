"""What a rate sweep's request carries beyond plain text: a response format, tools, images (the request kinds).

The fields' checks, shared by the sweep's parameters (toolkit.rates.params) and each traffic class's
(toolkit.rates.classes), and the kinds a request is built with: its class's own where the class gives one, the
sweep's where it gives none.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import AfterValidator, Field

from toolkit.loadgen.images import DEFAULT_SIZE, MAX_IMAGES, parse_image_size
from toolkit.loadgen.structured import read_response_format
from toolkit.loadgen.tools import read_tools, request_tools

if TYPE_CHECKING:
    from toolkit.rates.classes import TrafficClass
    from toolkit.rates.params import RateParams

__all__ = ["KIND_FIELDS", "ImageCount", "ImageSize", "RequestKinds", "ResponseFormatSpec", "ToolsFile", "request_kinds"]


KIND_FIELDS = ("response_format", "tools", "tool_choice", "images", "image_size")


def _checked(read: Any) -> AfterValidator:
    """A field check that reads the value as a request would (ParamsError, a ValueError, in one line), keeping it."""

    def check(value: str) -> str:
        read(value)
        return value

    return AfterValidator(check)


# "json_object" or "json_schema:FILE": the kind, and the schema file readable, JSON and a JSON Schema
ResponseFormatSpec = Annotated[str, _checked(read_response_format)]
# a JSON file: readable, a list of function tools whose parameters are JSON Schemas
ToolsFile = Annotated[str, _checked(read_tools)]
ImageSize = Annotated[str, _checked(parse_image_size)]  # WxH, each side from 1 to MAX_SIDE pixels
ImageCount = Annotated[int, Field(ge=0, le=MAX_IMAGES)]


@dataclass(frozen=True)
class RequestKinds:
    """The kinds one request is built with, as given (file paths, WxH) and with the endpoint it goes to."""

    endpoint: str
    response_format: str | None = None
    tools: str | None = None
    tool_choice: str | None = None
    images: int = 0
    image_size: str | None = None

    def request_format(self) -> dict[str, Any] | None:
        """The `response_format` the request carries (None: none)."""
        return None if self.response_format is None else read_response_format(self.response_format)

    def request_tools(self) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
        """The `tools` and `tool_choice` the request carries (None, None: no tools)."""
        return request_tools(self.tools, self.tool_choice)

    def image_dimensions(self) -> tuple[int, int]:
        """The width and height of every image the request carries."""
        return parse_image_size(self.image_size or DEFAULT_SIZE)


def request_kinds(sweep: RateParams, cls: TrafficClass | None = None) -> RequestKinds:
    """The kinds of the sweep's requests, or of class `cls`'s: each the class's own where it gives one (not None),
    else the sweep's."""
    names = ("endpoint", *KIND_FIELDS)
    own = {} if cls is None else {k: v for k in names if (v := getattr(cls, k)) is not None}
    return RequestKinds(**{**{k: getattr(sweep, k) for k in names}, **own})
