"""Every error the toolkit raises on purpose, as one tree under `ToolkitError`.

`python -m toolkit` prints a `ToolkitError` as one line on stderr (its `line`, every known key redacted) and
exits with its `exit_code`: 2 for bad input (fix the command, the parameters or the file named), 1 for the
environment (a server that failed, a connection that broke). Any other exception is a bug and keeps its traceback.
The classes that are also `ValueError` (or `RuntimeError`) stay so: pydantic validators and callers catch them so.

    ToolkitError                       exit 2 unless noted
    ├── ParamsError (ValueError)       a parameter, command-line argument or params file: names it, says what is allowed
    │   ├── SweepError                 a sweep file: names the variant and the field
    │   └── DatasetError               a rate sweep's dataset file: ``dataset: FILE:LINE: what is wrong``
    ├── SecretError (ValueError)       an API key that cannot be used: names the variable, never its value
    ├── DiscoveryError (ValueError)    a parameter the server contradicts (model, max_model_len, base_url unreachable)
    ├── PromptError (ValueError)       the server's tokenizer would not let a prompt of the planned length be built
    ├── RunRefused (ValueError)        a folder that holds another run, is in use, or was measured otherwise
    ├── ResultsError (ValueError)      results on disk that cannot be read back (not a run folder, a damaged record,
    │                                  a field of another type or out of range: ``FILE:LINE: FIELD: ...``)
    │   ├── ReportFormatError          a text that is not a speed test matrix report (``source:line: ...``)
    │   ├── RateSweepError             a rate sweep's file missing or malformed (names the file, and line)
    │   └── StoreError                 a results folder that cannot be written (full disk, no permission)
    ├── ReplyError (ValueError)        a streamed reply that breaks its protocol; the stream's error, never raised out
    │   └── SSEError                   bytes that cannot be an event stream
    ├── CellFailure (RuntimeError)     a request of a cell failed outside its measurement: the cell is an Error
    ├── CellTimeout (TimeoutError)     exit 1: a notebook cell ran past its bound (names the notebook and the cell)
    ├── NotebookError (RuntimeError)   exit 1: a notebook cell raised, or nbconvert could not convert the executed
    │                                  notebook (names it, the cell and the exception; the notebook stays on disk)
    ├── ConnectError                   exit 1: a connection could not be opened (refused, unreachable, timed out)
    ├── ServerAPIError (RuntimeError)  exit 1: the server could not be reached or answered an error status
    └── ServerError (RuntimeError)     exit 1: a launched server did not start or stopped running (`reason`, log tail)
        ├── HealthTimeout              it ran but did not answer /health in time
        └── PortTaken                  another process listens on, or answers at, its address
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

__all__ = [
    "CellFailure",
    "CellTimeout",
    "ConnectError",
    "DatasetError",
    "DiscoveryError",
    "HealthTimeout",
    "NotebookError",
    "ParamsError",
    "PortTaken",
    "PromptError",
    "RateSweepError",
    "ReplyError",
    "ReportFormatError",
    "ResultsError",
    "RunRefused",
    "SSEError",
    "SecretError",
    "ServerAPIError",
    "ServerError",
    "StoreError",
    "SweepError",
    "ToolkitError",
]


class ToolkitError(Exception):
    """An error the toolkit raises on purpose: its message is one line that says what to change."""

    exit_code: ClassVar[int] = 2

    @property
    def line(self) -> str:
        """The one line the command line prints."""
        return " ".join(str(self).splitlines())


class ParamsError(ToolkitError, ValueError):
    """Bad input: one line naming the parameter and what is allowed."""


class SweepError(ParamsError):
    """A sweep file that cannot run: one line naming the variant (if any) and the field."""


class DatasetError(ParamsError):
    """A dataset file that cannot be used: one line, `dataset: FILE:LINE: what is wrong`."""


class SecretError(ToolkitError, ValueError):
    """A key or secret that cannot be used; the message names the variable, never its value."""


class DiscoveryError(ToolkitError, ValueError):
    """A parameter does not match the server (one line, naming the parameter)."""


class PromptError(ToolkitError, ValueError):
    """The server's tokenizer would not let a prompt of the planned length be built."""


class RunRefused(ToolkitError, ValueError):
    """An existing results folder does not match this run (parameters, server), or another run writes there."""


class ResultsError(ToolkitError, ValueError):
    """Results on disk that cannot be read back: one line naming the file (and line) and what is wrong."""


class ReportFormatError(ResultsError):
    """The text is not a speed test matrix report; the message starts with ``source:line:``."""


class RateSweepError(ResultsError):
    """A rate sweep's file is missing or malformed: one line naming it."""


class StoreError(ResultsError):
    """The results folder cannot be written (full disk, no permission): one line naming the path; what was
    written before stays whole."""


class ReplyError(ToolkitError, ValueError):
    """A server's streamed reply breaks its protocol; recorded as that stream's error."""


class SSEError(ReplyError):
    """The bytes cannot be an event stream (an event longer than the decoder's limit without its terminator)."""


class CellFailure(ToolkitError, RuntimeError):
    """A request of a cell failed outside its measurement (the cache warm-up): the cell is an Error."""


class CellTimeout(ToolkitError, TimeoutError):
    """A notebook cell ran past its bound (toolkit.jupyter.watchdog): its kernel was stopped, what it had finished
    is kept."""

    exit_code = 1


class NotebookError(ToolkitError, RuntimeError):
    """A notebook the toolkit executed failed: a cell raised (papermill), or the executed notebook could not be
    converted (nbconvert). One line naming the notebook, the cell and the exception's type and first line; the
    executed notebook, its traceback in it, is kept on disk (toolkit.jupyter.execute, toolkit.jupyter.convert)."""

    exit_code = 1


class ConnectError(ToolkitError):
    """A connection to the server could not be opened (refused, unreachable, timed out)."""

    exit_code = 1


class ServerAPIError(ToolkitError, RuntimeError):
    """The server could not be reached (`status` None) or answered `status`; the message names what and why."""

    exit_code = 1

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerError(ToolkitError, RuntimeError):
    """A launched server could not be started or stopped running; `reason` is one line, the log tail follows."""

    exit_code = 1

    def __init__(self, reason: str, log_tail: str = "", log_path: Path | None = None) -> None:
        super().__init__(f"{reason}:\n{log_tail}" if log_tail else reason)
        self.reason, self.log_tail, self.log_path = reason, log_tail, log_path

    @property
    def line(self) -> str:
        """The reason alone: the log tail stays in the log, which the reason names."""
        return " ".join(self.reason.splitlines())


class HealthTimeout(ServerError):
    """The server ran but did not answer `/health` in time."""


class PortTaken(ServerError):
    """Another process listens on, or answers at, the address the launched server was to serve."""
