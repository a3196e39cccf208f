"""server.json: the server the toolkit launched for a run (the command, key `<redacted>`), its engine, and how it
ended; written by the launching process (toolkit.servers.launch), read by the kernels that measure and by reports."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, JsonValue

from toolkit.results.documents.base import Document

LAUNCH_FILE = "server.json"


class ServerRecord(Document):
    """A run's server.json: written before the launch, completed after it, and when the server exits or stops."""

    launched_by: str | None = Field(default=None, description='"toolkit".')
    command: str | None = Field(default=None, description="The command line as it ran, the key `<redacted>`.")
    base_url: str | None = Field(default=None, description="Where the server answers.")
    pid: int | None = Field(default=None, description="Its process id; None until it started.")
    log_file: str | None = Field(default=None, description="Its log.")
    started_at: str | None = Field(default=None, description="When it started (ISO 8601, UTC).")
    startup_s: int | float | None = Field(default=None, description="Seconds from launch to its first /health.")
    engine: dict[str, JsonValue] | None = Field(
        default=None, description="vLLM's version, commit and build in the server's environment (or its error)."
    )
    exit_code: int | None = Field(default=None, description="Its exit status when it died before it was stopped.")
    log_tail: str | None = Field(default=None, description="Its log's last lines when it died, keys redacted.")
    stopped_at: str | None = Field(default=None, description="When the toolkit stopped it (ISO 8601, UTC).")


def read_server_record(results_dir: str | Path) -> ServerRecord | None:
    """server.json of a run whose server the toolkit launched, else None (no such file). A damaged one, or one of a
    newer toolkit, is `ResultsError` in one line, as every reader of a run's documents says."""
    try:
        return ServerRecord.read(Path(results_dir) / LAUNCH_FILE)
    except FileNotFoundError:
        return None
