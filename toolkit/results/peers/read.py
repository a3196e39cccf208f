"""A peer's result file, whichever tool wrote it: each format module says whether the file is its own."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from toolkit.base.errors import ResultsError
from toolkit.results.json_text import parse_json
from toolkit.results.peers import aiperf, guidellm, vllm_bench
from toolkit.results.peers.step import PeerStep

FORMATS = (
    vllm_bench,
    guidellm,
    aiperf,
)  # each: FORMAT (what it reads, for the error line) and read(path, document) -> PeerStep | None


def expected() -> str:
    return "; or ".join(module.FORMAT for module in FORMATS)


def load_document(path: Path) -> Any:
    """The file as JSON, or as JSON lines (a list of the lines' values); ResultsError naming the file and line (a
    value nested too deep for Python's parser too)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ResultsError(f"{path}: not a text file; expected {expected()}") from None
    try:
        return parse_json(text)
    except json.JSONDecodeError as whole:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise ResultsError(f"{path}:{whole.lineno}: not JSON ({whole.msg}); expected {expected()}") from None
    values = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            values.append(parse_json(line))
        except json.JSONDecodeError as exc:
            raise ResultsError(f"{path}:{number}: not a JSON line ({exc.msg}); expected {expected()}") from None
    return values


def read_peer_result(path: str | Path) -> PeerStep:
    """The result file at `path`; ResultsError in one line naming the file and what was expected."""
    path = Path(path)
    document = load_document(path)
    for module in FORMATS:
        if (step := module.read(path, document)) is not None:
            return step
    if isinstance(document, dict):  # its first keys, each on one line and short
        held = ", ".join(" ".join(key.split())[:40] for key in sorted(document)[:6])
    else:
        held = f"a {type(document).__name__}"
    raise ResultsError(f"{path}: not a result file this toolkit reads (it holds {held}); expected {expected()}")
