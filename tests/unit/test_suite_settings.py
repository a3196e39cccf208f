"""The suite's own settings: warnings are errors, except pytest's lost race to remove a temporary folder."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest
from _pytest.pathlib import rm_rf


def test_a_folder_refilled_while_pytest_removes_it_is_left_without_failing_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As when two sessions clean the shared root at once: the other writes a lock file after this one listed."""
    garbage = tmp_path / "garbage-1"
    garbage.mkdir()
    (garbage / "old").write_text("x")
    real_rmdir = os.rmdir

    def refilled_first(path: str, *args: object, **kwargs: object) -> None:
        (garbage / ".lock").touch()
        real_rmdir(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "rmdir", refilled_first)
    rm_rf(garbage)
    assert [p.name for p in garbage.iterdir()] == [".lock"]


def test_any_other_warning_is_an_error() -> None:
    with pytest.raises(pytest.PytestWarning, match="not the clean-up"):
        warnings.warn(pytest.PytestWarning("not the clean-up's race"), stacklevel=1)
