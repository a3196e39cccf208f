"""`toolkit.matrix.heap.frozen_heap`: the heap is frozen while any nested block runs, unfrozen after the last."""

from __future__ import annotations

import gc

import pytest

from toolkit.__main__ import main as toolkit_main
from toolkit.matrix.heap import frozen_heap


def test_frozen_while_inside_nested_blocks_and_unfrozen_after() -> None:
    assert gc.get_freeze_count() == 0
    with frozen_heap():
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with frozen_heap():
            assert gc.get_freeze_count() == frozen  # not collected and frozen again
        assert gc.get_freeze_count() == frozen
    assert gc.get_freeze_count() == 0


def test_unfrozen_after_an_error() -> None:
    with pytest.raises(RuntimeError), frozen_heap():
        raise RuntimeError
    assert gc.get_freeze_count() == 0


def test_only_the_young_generations_are_collected_on_entry() -> None:
    full_passes = gc.get_stats()[2]["collections"]
    with frozen_heap():
        pass
    assert gc.get_stats()[2]["collections"] == full_passes  # a full pass walks the whole heap: 58-69 ms of a kernel's


def test_a_command_freezes_its_heap_as_it_ends(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m toolkit`'s main: the interpreter's teardown then skips the objects the command made."""
    try:
        assert toolkit_main(["check", "/nonexistent-run-folder"]) == 2
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
    assert "not a folder" in capsys.readouterr().out
