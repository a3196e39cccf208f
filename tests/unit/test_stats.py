"""mean, median and numpy-compatible percentiles."""

import numpy as np
import pytest

from toolkit.method.stats import mean, median, percentile


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], None), ([5.0], 5.0), ([1.0, 2.0, 3.0, 4.0], 2.5), ([0.1] * 10, 0.1)],
)
def test_mean(values: list[float], expected: float | None) -> None:
    assert mean(values) == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], None), ([7.0], 7.0), ([3.0, 1.0, 2.0], 2.0), ([4.0, 1.0, 3.0, 2.0], 2.5), ([1, 1, 100], 1.0)],
)
def test_median(values: list[float], expected: float | None) -> None:
    assert median(values) == expected


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 90, None),
        ([10.0], 99, 10.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 100, 5.0),
        ([1.0, 2.0, 3.0, 4.0, 5.0], 90, 4.6),
        ([1.0, 2.0, 3.0, 4.0], 99, 3.97),
        ([5.0, 1.0, 4.0, 2.0, 3.0], 25, 2.0),
        ([10.0, 20.0], 50, 15.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float | None) -> None:
    result = percentile(values, q)
    assert result == (None if expected is None else pytest.approx(expected))


@pytest.mark.parametrize("q", [0, 10, 33.3, 50, 90, 99, 100])
@pytest.mark.parametrize("values", [[136.0, 258.0, 382.0, 393.0, 511.0, 1_212.0, 8_393.0], [3.0, 1.0, 2.0]])
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


@pytest.mark.parametrize("q", [-1, 100.5])
def test_percentile_rejects_q_out_of_range(q: float) -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], q)
