"""A run folder's files as `check` reads them: every file found without following a link out of the folder, text
scanned for key-shaped strings a piece at a time, Parquet scanned a batch of rows at a time, so that a file of any
size is read in bounded memory.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from toolkit.base.api_keys import holds_secret

CHUNK_CHARS = 256 * 1024  # a text file is scanned this much at a time (a longer line in pieces)
OVERLAP_CHARS = 1024  # the end of a piece is scanned again with the next: a key cut between the two is still found
PARQUET_BATCH_ROWS = 65536
MAX_DOCUMENT_BYTES = 64 * 1024 * 1024  # a JSON document (run.json, sweep.json, …) larger than this is not read
INFINITE_COLUMNS = frozenset({"offered_rate"})  # a numeric column that may hold infinity: a rate of all at once


def inside(root: Path, path: Path) -> bool:
    """Whether `path`, its links followed, lies in `root` (a resolved folder)."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a loop of links
        return False


def walk(root: Path) -> tuple[list[Path], list[str]]:
    """The regular files under the folder `root` (links not followed; a link within it leads to a file found
    anyway), and one line per link that leads out of it, or nowhere."""
    real, files, problems = root.resolve(), [], []
    for folder, names, file_names in os.walk(root, followlinks=False):
        for name in sorted([*names, *file_names]):
            path = Path(folder) / name
            if path.is_symlink():
                if not inside(real, path):
                    problems.append(f"{path}: a link to {os.readlink(path)}, outside the folder; not followed")
            elif name in file_names and path.is_file():
                files.append(path)
    return sorted(files), problems


def secret_line(path: Path, *secrets: str | None) -> int | None:
    """The first line of the text file `path` that holds a key-shaped string, else None; read CHUNK_CHARS at a
    time, a piece of a line scanned with the end of the piece before it."""
    number, carry = 1, ""
    for piece, whole in _pieces(path):
        if holds_secret(carry + piece, *secrets):
            return number
        carry = "" if whole else piece[-OVERLAP_CHARS:]
        number += whole
    return None


def _pieces(path: Path) -> Iterator[tuple[str, bool]]:
    """(text, whether it ends its line) of `path`, a line or a piece of CHUNK_CHARS of one at a time."""
    with open(path, encoding="utf-8", errors="replace", newline="\n") as text:
        while piece := text.readline(CHUNK_CHARS):
            yield piece, piece.endswith("\n")


def parquet_problems(path: Path, *secrets: str | None) -> list[str]:
    """One line per column of the Parquet file `path` that holds a key-shaped string (text) or an infinity (numbers;
    NaN is a missing value; INFINITE_COLUMNS excepted), or one if it cannot be read; a batch of rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    problems: dict[str, str] = {}
    rows = 0
    try:
        for batch in pq.ParquetFile(path).iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for name, column in zip(batch.schema.names, batch.columns, strict=True):
                if name not in problems and (problem := _column_problem(name, column, *secrets)):
                    where, what = problem
                    problems[name] = f"{path}: column {name}{'' if where is None else f', row {rows + where}'}: {what}"
            rows += batch.num_rows
    except (pa.ArrowException, OSError, ValueError) as exc:  # a damaged file: pyarrow raises several kinds
        return [f"{path}: not a readable Parquet file ({type(exc).__name__})"]
    return list(problems.values())


def _column_problem(name: str, column: Any, *secrets: str | None) -> tuple[int | None, str] | None:
    """(row or None, what is wrong) of one column of a batch: a key-shaped string, or an infinity; else None."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(column.type):  # a categorical column
        column = column.dictionary_decode()
    values, kind = column, column.type
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        values, kind = pc.list_flatten(column), kind.value_type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        found = next((v for v in pc.unique(values).to_pylist() if v and holds_secret(v, *secrets)), None)
        if found is None:
            return None
        if values is column:
            row = int(pc.index(column, found).as_py())
        else:  # a list column: the first row whose list holds it
            row = next(i for i, items in enumerate(column.to_pylist()) if found in (items or []))
        return row, "holds a key-shaped string (a key, token or password)"
    if pa.types.is_floating(kind) and name not in INFINITE_COLUMNS and pc.any(pc.is_inf(values)).as_py():
        return None, "holds an infinity; expected finite numbers (NaN where a value is missing)"
    return None
