"""run.json as a typed document: what a run measured against, written atomically, read back by field.

A measured run (`source: toolkit`) records facts: its parameters, the server found, how it was launched, this
machine, and how the prefill was measured; the report's "Run" block is computed from them when shown
(:meth:`RunDocument.shown`). An imported published report (`source: imported`) keeps its blocks as printed.
Files written by earlier versions (a stored "Run" block, fields this model does not name) load unchanged and
save back with every field they had.

A process parses each run.json once: what it last read or wrote is held with the file's identity (inode, mtime,
size), and a later `load` of an unchanged file is a copy of it. Every write replaces the file (a new inode), so
a file another process wrote is read again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, ValidationError

from toolkit.base.errors import ResultsError
from toolkit.base.text import printable_tree
from toolkit.results.documents.run_blocks import (
    CapacityBlock,
    ControlBlock,
    EnvironmentBlock,
    FingerprintBlock,
    LaunchBlock,
    OverheadBlock,
    ParamsBlock,
    ServerBlock,
)
from toolkit.results.store import RUN_FILE, read_json, write_json_atomic

PREFILL_MODES = {
    True: "Measured during decode warm-up",
    False: "Cold request per context, before the decode cells",
}


FileIdentity = tuple[int, int, int]


def _identity(path: Path) -> FileIdentity | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


class RunDocument(BaseModel):
    """A run folder's run.json. Only the fields a file holds are written back (`exclude_unset`); its blocks
    (toolkit.results.documents.run_blocks) with their keys in the order read. A field assigned is validated."""

    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True, validate_assignment=True)

    run_id: str | None = None
    run_label: str | None = None
    title: str | None = None
    summary: str | None = None  # an imported report's matrix summary
    hardware: dict[str, str] | None = None  # the report's display label -> text blocks, free-form by nature
    engine: dict[str, str] | None = None
    run: dict[str, str] | None = None  # stored by imported reports and earlier versions; else computed
    launch_command: str | None = None
    launch: LaunchBlock | None = None  # toolkit.servers.launch.launch_info
    params: ParamsBlock | None = None  # RunParams without launch_command; a rate sweep's run: the sweep's
    fingerprint: FingerprintBlock | None = None  # RunParams.fingerprint
    server: ServerBlock | None = None  # toolkit.matrix.discovery.ServerInfo
    environment: EnvironmentBlock | None = None  # toolkit.matrix.environment.environment_info
    prefill_in_warmup: bool | None = None
    started_at: str | None = None
    source: str = "toolkit"
    overhead: OverheadBlock | None = None  # toolkit.method.overhead.matrix_overhead
    control: ControlBlock | None = None  # toolkit.matrix.control.control_block (CONTROL_KEY)
    capacity: CapacityBlock | None = None  # the params' capacity block (toolkit.params.CapacityParams)
    max_model_len: int | None = None  # an imported report's, from its launch command
    source_file: str | None = None  # the imported report's file name
    schema_version: int | None = None  # stamped on save (results.store); None: a file written before stamping

    @classmethod
    def load(cls, folder: str | Path) -> RunDocument:
        """`folder`/run.json (OSError when missing; ResultsError, one line, when damaged, of a newer layout, or with a
        field of another type); a copy of the document this process last read or wrote there while the file is
        unchanged."""
        path = Path(os.path.abspath(Path(folder) / RUN_FILE))
        identity, held = _identity(path), _HELD.get(path)
        if held is not None and identity is not None and held[0] == identity:
            return held[1].model_copy(deep=True)
        try:
            document = cls.model_validate(read_json(path))
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            raise ResultsError(f"{path}: {field}: {first['msg']}") from None
        if identity is not None:
            _HELD[path] = (identity, document.model_copy(deep=True))
        return document

    def save(self, folder: str | Path) -> None:
        """Write `folder`/run.json atomically (StoreError, one line, when it cannot be written)."""
        path = Path(os.path.abspath(Path(folder) / RUN_FILE))
        written = write_json_atomic(path, self.to_json())
        if (identity := _identity(path)) is not None:
            _HELD[path] = (identity, self.model_validate(written))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy, `update`'s fields validated as an assignment is (a block given as a mapping becomes its model)."""
        copied = super().model_copy(deep=deep)
        for name, value in (update or {}).items():
            setattr(copied, name, value)
        return copied

    def to_json(self) -> dict[str, Any]:
        """The fields this document holds, as JSON values (a server's strings without their control characters)."""
        shown: dict[str, Any] = printable_tree(self.model_dump(mode="json", exclude_unset=True))
        return shown

    @property
    def launched_by_toolkit(self) -> bool:
        return self.launch is not None and self.launch.launched_by_toolkit

    def run_block(self) -> dict[str, str]:
        """The report's "Run" block: stored (imported, earlier versions) or computed from the measured run's facts."""
        if self.run is not None:
            return dict(self.run)
        if self.params is None:
            return {}
        params, server, environment = self.params, self.server or ServerBlock(), self.environment or EnvironmentBlock()
        version = environment.toolkit_version
        where = "launched by the toolkit" if self.launched_by_toolkit else f"found running at {params.base_url}"
        block = {
            "Served model": server.model,
            "Revision": params.revision,
            "Benchmark tool": f"toolkit v{version}" if version else None,
            "Server": where,
            "Server metrics": ", ".join(server.metrics_endpoints or []),  # server_metrics: summed
            "Decode test": "Fixed duration",
            "Prefill mode": PREFILL_MODES[self.prefill_in_warmup is not False],
            "Time per measurement": f"{params.duration_s:g} s" if params.duration_s is not None else None,
            "Max output": f"{params.max_output:,} tokens" if params.max_output is not None else None,
        }
        return {k: str(v) for k, v in block.items() if v not in (None, "")}

    def shown(self) -> dict[str, Any]:
        """run.json as the reports and notebooks read it: its fields (not the file's schema version), with the "Run"
        block when there is one."""
        data = self.to_json()
        data.pop("schema_version", None)
        if block := self.run_block():
            data["run"] = block
        return data


_HELD: dict[Path, tuple[FileIdentity, RunDocument]] = {}  # per run.json: what this process last read or wrote
