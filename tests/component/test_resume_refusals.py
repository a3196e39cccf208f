"""`--resume` on a folder whose lines are whole JSON but not records of their schema (issue 40): the run is refused
in one line naming the file, the line and the field, before any request is sent (tests/faultserver.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from tests.tiny_params import tiny_params
from toolkit.base.errors import RateSweepError, ResultsError
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.rates.files import STEPS_FILE, rates_dir
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.results.store import RESULTS_FILE

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(token_interval_s=0.005)


@pytest.mark.parametrize(
    ("line", "said"),
    [({"step": 0}, "offered_rate: missing"), ({"step": 0, "offered_rate": 10.0}, "searched: missing")],
    ids=["only a step", "no searched"],
)
def test_a_rate_sweep_resumed_on_a_wrong_steps_line_is_refused_before_any_load(
    server: FaultServer, tmp_path: Path, line: dict[str, object], said: str
) -> None:
    values = {"base_url": server.base_url, "rates": [10, 20], "requests_per_step": 4, "input_tokens": 30,
              "output_tokens": 4, "results_dir": str(tmp_path / "run")}  # fmt: skip
    params = make_rate_params(values)
    out = run_rates(params, say=lambda _: None)
    steps = rates_dir(out) / STEPS_FILE
    first, *_ = steps.read_text().splitlines()
    steps.write_text(first + "\n" + json.dumps(line) + "\n")
    sent = server.state.requests_total
    with pytest.raises(RateSweepError) as raised:
        run_rates(params, say=lambda _: None, resume=True)
    assert raised.value.line == f"{steps}:2: {said}"
    assert server.state.requests_total == sent


def test_a_matrix_resumed_on_a_wrong_record_is_refused_before_any_load(server: FaultServer, tmp_path: Path) -> None:
    p = make_params(tiny_params(base_url=server.base_url))
    run_matrix(p, tmp_path, progress=False)
    results = tmp_path / RESULTS_FILE
    lines = results.read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), "concurrency": [2]})
    results.write_text("\n".join(lines) + "\n")
    sent = server.state.requests_total
    with pytest.raises(ResultsError) as raised:
        run_matrix(p, tmp_path, resume=True, progress=False)
    assert raised.value.line == f"{results}:{len(lines)}: concurrency: [2] should be a whole number"
    assert server.state.requests_total == sent
