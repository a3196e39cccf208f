"""A rate sweep's fields that name files, made absolute for a process that runs in another folder.

`toolkit run` hands its `rate_sweep:` block to the rate notebook, whose kernel runs in notebooks/: a path the user
wrote relative to where they ran the command (checked there) would be read from the wrong folder, after the
matrix had measured. Each path is made absolute as the run's own files are (toolkit.base.file_paths).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from toolkit.base.file_paths import absolute_file as _absolute
from toolkit.base.file_paths import absolute_format as _absolute_format

__all__ = ["FILE_FIELDS", "with_absolute_files"]

FILE_FIELDS = ("dataset", "replay", "trace", "tools")  # a path each; response_format is "json_schema:PATH"


def with_absolute_files(values: Mapping[str, Any], base: Path) -> dict[str, Any]:
    """`values` with every file they name (the sweep's and each class's) made absolute against `base`."""
    out = {**values, **{k: _absolute(values[k], base) for k in FILE_FIELDS if isinstance(values.get(k), str)}}
    if isinstance(values.get("response_format"), str):
        out["response_format"] = _absolute_format(values["response_format"], base)
    if isinstance(values.get("classes"), list):
        out["classes"] = [_class(c, base) if isinstance(c, Mapping) else c for c in values["classes"]]
    return out


def _class(spec: Mapping[str, Any], base: Path) -> dict[str, Any]:
    out = dict(spec)
    for key in ("dataset", "tools"):
        if isinstance(spec.get(key), str):
            out[key] = _absolute(spec[key], base)
    if isinstance(spec.get("response_format"), str):
        out["response_format"] = _absolute_format(spec["response_format"], base)
    return out
