"""A rate step sent from 2 client processes on a local Ray head (127.0.0.1) against the fault server: the records of
both merge into one step, whose achieved rate is the two streams' together."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from tests.integration.test_batch_ray import Cluster, ray_cluster  # noqa: F401 (the fixture: a Ray head on loopback)
from toolkit.rates.files import read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed")


def test_two_ray_clients_send_one_step_together(ray_cluster: Cluster, tmp_path: Path) -> None:  # noqa: F811
    with FaultServer(token_interval_s=0.005) as server:
        params = make_rate_params({
            "base_url": server.base_url, "rates": [40], "arrival": "constant", "requests_per_step": 80,
            "input_tokens": 30, "output_tokens": 5, "ray_address": ray_cluster.address, "clients": 2,
            "results_dir": str(tmp_path / "run"),
        })  # fmt: skip
        out = run_rates(params, say=lambda line: None)
        seen = {e["path"] for e in server.completion_requests()}
    import ray

    # Disconnected: a driver left connected is ended by Ray (exit 1, nothing said) a minute after its cluster stops.
    assert not ray.is_initialized()
    (row,) = read_steps(out)
    records = read_records(out)
    assert row["completed"] == 80 and row["failed"] == 0 and list(records["request"]) == list(range(80))
    assert row["achieved_rate"] == pytest.approx(40, rel=0.05)  # the two clients' ~20/s each, summed
    lags = records["sent_s"] - records["scheduled_s"]
    assert lags.min() >= 0 and lags.median() < 0.02  # both held the common schedule
    assert row["server_generation_tokens"] == row["client_generation_tokens"] == 400
    assert seen == {"/v1/chat/completions"}
