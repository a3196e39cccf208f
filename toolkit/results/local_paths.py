"""Local paths as a published report shows them: relative inside the repository, ``~`` for the home directory.

A launch command records where things lie on the machine that ran it (``/home/<user>/…/.venv-vllm/bin/python``);
a report shared with others shows ``.venv-vllm/bin/python`` instead. Paths elsewhere are kept as they are.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_ABOVE_PACKAGE = Path(__file__).resolve().parents[2]
# The repository when the toolkit runs from its checkout; None when installed from a wheel (site-packages' parent).
REPO_ROOT: Path | None = _ABOVE_PACKAGE if (_ABOVE_PACKAGE / "pyproject.toml").is_file() else None
_BEFORE = r"(?<![^\s'\"=:])"  # a path starts the text or follows a space, a quote, `NAME=` or a `:` list separator
_END = r"/?(?=[\s'\":]|$)"  # the root itself ends there (a trailing slash allowed)


def _spellings(path: Path) -> list[str]:
    """The path as given and resolved (a symlinked home or checkout), longest first, never the root ``/``."""
    names = {os.path.normpath(str(path)), os.path.realpath(path)}
    return sorted((n for n in names if n != os.sep), key=len, reverse=True)


def _shown_under(text: str, root: Path, inside: str, itself: str) -> str:
    """``root/x`` as ``inside + x`` and ``root`` alone as ``itself``."""
    for name in _spellings(root):
        text = re.sub(_BEFORE + re.escape(name) + "/(?=[^/\\s'\":])", lambda _: inside, text)
        text = re.sub(_BEFORE + re.escape(name) + _END, lambda _: itself, text)
    return text


def public_paths(text: str, *, repo: Path | None = REPO_ROOT, home: Path | None = None) -> str:
    """``text`` (a command line) with paths inside ``repo`` made relative to it and ``home`` shown as ``~``.

    ``/repo/.venv-vllm/bin/python`` becomes ``.venv-vllm/bin/python``, ``/repo`` itself ``.``, ``/home/me/models/x``
    ``~/models/x``; ``home`` defaults to this user's home directory. Without a checkout (``repo`` None) only the
    home directory is shortened.
    """
    home = Path.home() if home is None else home
    inside = text if repo is None else _shown_under(text, repo, "", ".")
    return _shown_under(inside, home, "~/", "~")
