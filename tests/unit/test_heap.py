"""`toolkit.matrix.heap.frozen_heap`: the heap is frozen while any nested block runs, unfrozen after the last."""

from __future__ import annotations

import gc

import pytest

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
