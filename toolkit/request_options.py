"""What every decode request of a matrix carries besides its prompt: structured output or tools, the parameters
that RunParams inherits (`MatrixRequestOptions`). Their command-line options: toolkit.rates.cli.add_request_options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from toolkit.base.file_paths import absolute_file, absolute_format
from toolkit.loadgen.structured import read_response_format
from toolkit.loadgen.tools import read_tools, request_tools

__all__ = ["REQUEST_OPTIONS", "MatrixRequestOptions"]

# In the fingerprint when given (a run without them keeps the fingerprint it always had, so an older run resumes).
REQUEST_OPTIONS = ("response_format", "tools", "tool_choice")


class MatrixRequestOptions(BaseModel):
    """Structured output, "json_object" or "json_schema:FILE"; tools (chat only), a JSON file of OpenAI function
    tools, and the tool_choice sent ("auto", "required", "none" or a function's name; default "required"), as a
    rate sweep's requests carry them (toolkit.loadgen.structured, .tools). Each decode cell reports its
    `schema_valid_share`, or its `tool_called_share` and `tool_args_valid_share`.

    Which options go together on which endpoint is RunParams' check (`_request_options`): pydantic runs a base
    model's validators before its subclass's, and that check comes after the embeddings one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    response_format: str | None = None
    tools: str | None = None
    tool_choice: str | None = None

    @field_validator("response_format")
    @classmethod
    def _response_format(cls, value: str | None) -> str | None:
        """Checked (the kind; the schema file readable, JSON, a JSON Schema), its file's path made absolute against
        the current directory: the notebooks that measure run in another folder."""
        if value is None:
            return None
        read_response_format(value)
        return absolute_format(value, Path.cwd())

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: str | None) -> str | None:
        """Checked (readable, JSON, a list of function tools whose parameters are JSON Schemas), its path made
        absolute as the schema file's."""
        if value is None:
            return None
        read_tools(value)
        return absolute_file(value, Path.cwd())

    def request_format(self) -> dict[str, Any] | None:
        """The `response_format` every decode request carries (None: none)."""
        return None if self.response_format is None else read_response_format(self.response_format)

    def request_tools(self) -> tuple[list[dict[str, Any]] | None, str | dict[str, Any] | None]:
        """The `tools` and `tool_choice` every decode request carries (None, None: no tools)."""
        return request_tools(self.tools, self.tool_choice)

    def given_request_options(self) -> dict[str, str]:
        """The request options given (for the fingerprint): none when the run has none."""
        return {k: v for k in REQUEST_OPTIONS if (v := getattr(self, k)) is not None}
