"""The toolkit's YAML files (params, sweeps, classes) read with one-line errors: where a file is not YAML, and
which name was likely meant where a field is unknown."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong in a YAML file and where (line and column from 1), in one line."""
    if isinstance(exc, yaml.MarkedYAMLError) and (mark := exc.problem_mark) is not None:
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem or exc.context}"
    return str(exc).splitlines()[0]


def allowed_names(name: str, allowed: Iterable[str]) -> str:
    """The names a field may have, and the one closest to a misspelt `name` ("did you mean ...?") where one is."""
    names = list(allowed)
    close = difflib.get_close_matches(name, names, n=1)
    return f"allowed: {', '.join(names)}" + (f"; did you mean {close[0]}?" if close else "")


def read_yaml_mapping(path: str | Path, what: str, error: type[ValueError]) -> dict[str, Any]:
    """A YAML file holding a mapping (empty: {}); `error` with one line naming `what` otherwise."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except OSError as exc:
        raise error(f"{what}: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise error(f"{what}: {path} is not valid YAML: {yaml_problem(exc)}") from None
    if not isinstance(data, dict):
        raise error(f"{what}: {path} must hold a mapping of field: value")
    return data
