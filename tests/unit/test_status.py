"""Status rules of docs/method/cells.md, "Status of a cell"."""

import pytest

from toolkit.method.status import (
    concurrency_not_held,
    decode_status,
    decode_status_client_only,
    disturbance,
    longest_waiting_s,
)

Sample = tuple[float, int, int]


def steady(n: int, count: int = 60, step: float = 0.5) -> list[Sample]:
    """``count`` samples every ``step`` s with all ``n`` running and nothing waiting."""
    return [(i * step, n, 0) for i in range(count)]


def with_waiting(samples: list[Sample], indices: list[int], waiting: int = 1) -> list[Sample]:
    return [(t, r, waiting if i in indices else w) for i, (t, r, w) in enumerate(samples)]


@pytest.mark.parametrize(
    ("samples", "expected"),
    [
        ([], 0.0),
        ([(0.0, 4, 1)], 0.0),  # one sample spans nothing
        ([(0.0, 4, 1), (0.5, 4, 1)], 0.5),
        ([(0.0, 4, 1), (0.5, 4, 0), (1.0, 4, 1)], 0.0),  # not consecutive
        ([(10.1, 4, 2), (10.6, 4, 1), (11.1, 4, 3), (11.6, 4, 0)], 1.0),
        ([(1.0, 4, 1), (0.5, 4, 1)], 0.5),  # sorted by time first
    ],
)
def test_longest_waiting_s(samples: list[Sample], expected: float) -> None:
    assert longest_waiting_s(samples) == pytest.approx(expected)


def test_valid_cell_and_extras() -> None:
    status, extras = decode_status(concurrency=8, error=None, readiness_queued=False, samples=steady(8, count=4))
    assert status == "Valid"
    assert extras == {"avg_active": 8.0, "max_waiting": 0, "waiting_fraction": 0.0, "status_basis": "server",
                      "concurrency_held": 1.0}  # fmt: skip


def test_one_sample_of_waiting_is_not_queueing() -> None:
    samples = with_waiting(steady(4), [10], waiting=3)
    status, extras = decode_status(concurrency=4, error=None, readiness_queued=False, samples=samples)
    assert status == "Valid"
    assert extras["max_waiting"] == 3
    assert extras["waiting_fraction"] == pytest.approx(1 / 60)


@pytest.mark.parametrize(
    ("indices", "expected"),
    [
        ([10, 11], "Requests queued"),  # 0.5 s held over two consecutive samples
        ([10, 12, 14, 16], "Valid"),  # often, but never held
        ([10, 11, 12, 13], "Requests queued"),
        ([59], "Valid"),
    ],
)
def test_waiting_held(indices: list[int], expected: str) -> None:
    samples = with_waiting(steady(4), indices)
    assert decode_status(concurrency=4, error=None, readiness_queued=False, samples=samples)[0] == expected


def test_waiting_held_with_float_times() -> None:
    samples = [(10.1, 2, 0), (10.6, 2, 1), (11.1, 2, 1), (11.6, 2, 0)]  # 11.1 - 10.6 is 0.4999... in floats
    assert decode_status(concurrency=2, error=None, readiness_queued=False, samples=samples)[0] == ("Requests queued")


@pytest.mark.parametrize(("waiting_at", "expected"), [([], "Valid"), ([3], "Requests queued")])
def test_min_waiting_zero_needs_some_waiting(waiting_at: list[int], expected: str) -> None:
    samples = with_waiting(steady(4), waiting_at)
    status, _ = decode_status(concurrency=4, error=None, readiness_queued=False, samples=samples, min_waiting_s=0.0)
    assert status == expected


@pytest.mark.parametrize("min_waiting_s", [0.5, 1.0])
def test_min_waiting_s_parameter(min_waiting_s: float) -> None:
    samples = with_waiting(steady(4), [10, 11])
    status, _ = decode_status(
        concurrency=4, error=None, readiness_queued=False, samples=samples, min_waiting_s=min_waiting_s
    )
    assert status == ("Requests queued" if min_waiting_s == 0.5 else "Valid")


@pytest.mark.parametrize(
    ("concurrency", "running", "held"),
    [
        (16, [15, 15], 15 / 16),
        (2, [2, 2, 2, 1], 1.75 / 2),
        (1, [0, 1], 0.5),
        (128, [121] * 10, 121 / 128),
    ],
)
def test_average_running_below_n_with_nothing_waiting_is_not_queueing(
    concurrency: int, running: list[int], held: float
) -> None:
    """Time between a stream's requests lowers the running count; only waiting requests mean a queue."""
    samples = [(i * 0.5, r, 0) for i, r in enumerate(running)]
    status, extras = decode_status(concurrency=concurrency, error=None, readiness_queued=False, samples=samples)
    assert status == "Valid"
    assert extras["avg_active"] == pytest.approx(sum(running) / len(running))
    assert extras["concurrency_held"] == pytest.approx(held)


def test_running_1_7_of_2_nothing_waiting_is_valid_and_not_held() -> None:
    samples = [(i * 0.25, 2 if i % 10 < 7 else 1, 0) for i in range(40)]  # 1.7 of 2 on average
    status, extras = decode_status(concurrency=2, error=None, readiness_queued=False, samples=samples)
    assert status == "Valid"
    assert extras["avg_active"] == pytest.approx(1.7)
    assert concurrency_not_held(extras["concurrency_held"])


def test_waiting_1_for_1_s_is_queued() -> None:
    samples = [(i * 0.25, 2, 1 if 8 <= i <= 12 else 0) for i in range(40)]  # waiting 1 from 2.0 s to 3.0 s
    status, extras = decode_status(concurrency=2, error=None, readiness_queued=False, samples=samples)
    assert status == "Requests queued"
    assert extras["max_waiting"] == 1
    assert not concurrency_not_held(extras["concurrency_held"])


@pytest.mark.parametrize(("held", "flagged"), [(None, False), (0.95, False), (0.9, False), (0.89, True)])
def test_concurrency_not_held_below_90_percent(held: float | None, flagged: bool) -> None:
    assert concurrency_not_held(held) is flagged


def test_readiness_ended_on_waiting_is_queued() -> None:
    status, extras = decode_status(concurrency=4, error=None, readiness_queued=True, samples=steady(4))
    assert status == "Requests queued"
    assert extras["avg_active"] == 4.0


def test_error_wins_over_everything() -> None:
    samples = with_waiting(steady(4), [1, 2, 3])
    status, extras = decode_status(concurrency=4, error="HTTP 500", readiness_queued=True, samples=samples)
    assert status == "Error"
    assert extras["max_waiting"] == 1


@pytest.mark.parametrize(
    ("error", "queued", "expected"), [("connection lost", False, "Error"), (None, True, "Requests queued")]
)
def test_no_samples_decided_by_error_or_readiness(error: str | None, queued: bool, expected: str) -> None:
    status, extras = decode_status(concurrency=4, error=error, readiness_queued=queued, samples=[])
    assert status == expected
    assert extras == {
        "avg_active": None,
        "max_waiting": None,
        "waiting_fraction": None,
        "status_basis": "server",
        "concurrency_held": None,
    }


def test_no_samples_and_nothing_else_is_valid_without_evidence() -> None:
    status, extras = decode_status(concurrency=4, error=None, readiness_queued=False, samples=[])
    assert status == "Valid"
    assert extras["avg_active"] is None


@pytest.mark.parametrize(
    ("concurrency", "error", "queued", "active", "expected"),
    [
        (8, None, False, [8, 8, 8, 7], "Valid"),
        (8, None, False, [8, 7, 7, 7], "Valid"),  # fewer decoding, nothing seen queued: flagged, not queued
        (1, None, False, [0, 1], "Valid"),
        (8, "timeout", False, [8, 8], "Error"),
        (8, None, True, [8, 8], "Requests queued"),
        (8, "HTTP 503", False, [], "Error"),
    ],
)
def test_client_only(concurrency: int, error: str | None, queued: bool, active: list[float], expected: str) -> None:
    status, extras = decode_status_client_only(concurrency, error, queued, active)
    assert status == expected
    assert extras["status_basis"] == "client"
    assert extras["client_avg_active"] == (sum(active) / len(active) if active else None)
    assert extras["concurrency_held"] == (sum(active) / len(active) / concurrency if active else None)


def test_client_only_without_samples() -> None:
    assert decode_status_client_only(4, None, False, []) == (
        "Valid",
        {"client_avg_active": None, "status_basis": "client", "concurrency_held": None},
    )


def test_an_undisturbed_window_has_no_reason() -> None:
    assert disturbance(silence_s=0.05, tbt_ms=3.0, loop_lag_max_ms=12.0, max_sample_gap_s=0.3) is None
    assert disturbance(silence_s=0.05, tbt_ms=None, loop_lag_max_ms=None, max_sample_gap_s=None) is None


@pytest.mark.parametrize(
    ("silence_s", "tbt_ms", "lag_ms", "gap_s", "reason"),
    [
        (3.97, 3.0, 2.7, 0.5, "no token for 4.0 s"),  # the CI cell: 4 tokens, then the machine paused
        (1.2, 5.0, None, None, "no token for 1.2 s"),
        (0.1, 3.0, 2483.0, 0.4, "client event loop blocked 2,483 ms"),
        (0.1, 3.0, 5.0, 3.0, "no server sample for 3.0 s"),
    ],
)
def test_disturbance_names_the_pause(silence_s, tbt_ms, lag_ms, gap_s, reason) -> None:
    assert disturbance(silence_s=silence_s, tbt_ms=tbt_ms, loop_lag_max_ms=lag_ms, max_sample_gap_s=gap_s) == reason


def test_a_slow_server_is_not_a_pause() -> None:
    # Kimi 251K x 1 streams at 10.1 tok/s (99 ms between tokens): 0.9 s of silence is under 10 TBT.
    assert disturbance(silence_s=0.9, tbt_ms=99.0, loop_lag_max_ms=3.0, max_sample_gap_s=0.5) is None
    assert disturbance(silence_s=1.5, tbt_ms=200.0, loop_lag_max_ms=3.0, max_sample_gap_s=0.5) is None
    assert disturbance(silence_s=2.5, tbt_ms=200.0, loop_lag_max_ms=3.0, max_sample_gap_s=0.5) == "no token for 2.5 s"
