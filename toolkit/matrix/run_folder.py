"""A continued run must measure the server it began with: `open_run` refuses to continue a run with other
parameters or against another server (model, max_model_len, KV budget, launch command) before anything is
written. The folder's one-writer lock is toolkit.base.folder_lock's."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from toolkit.base.api_keys import redact
from toolkit.base.errors import RunRefused
from toolkit.base.text import printable
from toolkit.matrix.discovery import ServerInfo
from toolkit.params import RunParams, ServerSpec
from toolkit.results.documents.run_blocks import ServerBlock
from toolkit.results.local_paths import public_paths
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RUN_FILE
from toolkit.servers.launch import shown_command


def open_run(
    out_dir: Path,
    params: RunParams,
    *,
    resume: bool,
    attach: bool = False,
    server: ServerInfo | None = None,
    command: str | None = None,
) -> RunDocument | None:
    """The existing run.json when continuing, None for a fresh run; refuse mismatches in one line.

    `server` (the one found now) and `command` (the launch command run.json would record) are compared with
    what the run recorded, when given; a KV budget only when both are known.
    """
    if not (out_dir / RUN_FILE).exists():
        return None
    existing = RunDocument.load(out_dir)
    if not (resume or attach):
        raise RunRefused(f"out: {out_dir} already holds a run; pass --resume to continue it or choose another folder")
    theirs = existing.fingerprint.as_dict() if existing.fingerprint is not None else {}
    if theirs != (ours := params.fingerprint()):
        diff = ", ".join(f"{k}: {theirs.get(k)!r} -> {ours.get(k)!r}" for k in {**theirs, **ours}
                         if theirs.get(k) != ours.get(k))  # fmt: skip
        raise RunRefused(f"resume: parameters differ from the run in {out_dir} ({diff}); use a new --out")
    check_same_server(existing, out_dir, server, command)
    return existing


def check_same_server(
    recorded: RunDocument, out_dir: Path, server: ServerInfo | None, command: str | None = None
) -> None:
    """Refuse, in one line, to continue the run recorded in `out_dir` against a server (its facts, its launch
    command) other than the one it measured."""
    if diff := server_differences(recorded, server, command):
        where = f"the server at {server.base_url}" if server is not None else "this launch"
        raise RunRefused(
            f"resume: {where} is not the one the run in {out_dir} measured ({diff}); "
            "continue it against that server or use a new --out"
        )


def check_resume(
    out_dir: Path, params: RunParams, spec: ServerSpec | None, api_key: str | None, server: ServerInfo | None = None
) -> RunDocument | None:
    """Refuse, in one line, a --resume that would not continue the run in `out_dir`; the run recorded there (None:
    no run there, nothing to do).

    Before a launch (`server` None) the parameters and the launch command are compared; with a server, its facts.
    """
    launch = {"launched_by_toolkit": True, "command": shown_command(spec.command, spec.env, api_key)} if spec else {}
    return open_run(out_dir, params, resume=True, server=server, command=launch_command(params, launch, api_key))


def launch_command(params: RunParams, launch: dict[str, Any], api_key: str | None) -> str:
    """run.json's launch command: a launched server's as it ran (toolkit.servers.launch put <redacted> where the
    key was), else the params' `launch_command` with the key redacted."""
    if launch.get("launched_by_toolkit"):
        return str(launch.get("command") or "")
    return public_paths(redact(params.launch_command or "", api_key))


_PORT = re.compile(r"(--port[= ])\d+")


def _without_port(command: str) -> str:
    """The command without its port: where a server listens is not what it is (a notebook's embedded vLLM gets a
    free port each time it starts)."""
    return _PORT.sub(r"\1<port>", command)


def server_differences(recorded: RunDocument, server: ServerInfo | None, command: str | None) -> str:
    """What differs between the server a run recorded and the one found now ("" when nothing does)."""
    theirs = recorded.server or ServerBlock()
    pairs: list[tuple[str, Any, Any]] = []
    if server is not None:
        pairs += [
            ("model", theirs.model, printable(server.model)),  # as run.json holds it
            ("max_model_len", theirs.max_model_len, server.max_model_len),
        ]
        if None not in (theirs.kv_budget_tokens, server.kv_budget_tokens):
            pairs.append(("KV budget tokens", theirs.kv_budget_tokens, server.kv_budget_tokens))
    if command is not None and _without_port(recorded.launch_command or "") != _without_port(command):
        pairs.append(("launch command", recorded.launch_command or "", command))
    return ", ".join(f"{name}: {old!r} -> {new!r}" for name, old, new in pairs if old != new)
