"""A parameter that names a file, made absolute against a base folder: the one rule for every such field.

The notebooks and kernels that read these files run in another folder than the command that checked them, so a
path is handed on absolute: joined to `base` where relative, then resolved (symlinks followed, `..` removed), as
`Path.resolve()` makes a path relative to the current directory. No file is opened.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["absolute_file", "absolute_format"]


def absolute_file(path: str, base: Path) -> str:
    """`path` joined to `base` (where relative) and resolved."""
    return str((base / path).resolve())


def absolute_format(spec: str, base: Path) -> str:
    """A response format, ``json_schema:PATH`` with PATH absolute (`absolute_file`); one without a file
    (``json_object``, or a kind that its check refuses) as given, stripped."""
    kind, _sep, where = spec.strip().partition(":")
    return f"{kind}:{absolute_file(where.strip(), base)}" if where.strip() else spec.strip()
