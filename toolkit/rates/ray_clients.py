"""One step sent by several client processes on a Ray cluster, for rates one process cannot hold.

The step's schedule is dealt to `clients` senders (`toolkit.loadgen.arrivals.split`: a Poisson schedule becomes
independent Poisson streams whose union is the schedule). Each sender is a Ray actor, started and answering
before the first step; it runs `send_open_loop` on its own `StreamClient` (the API key from the worker's own
environment: it is never shipped) from a start time agreed on the wall clock, and returns its records; the driver
puts them back in the step's order, so the step is judged as one. Ray is optional (`pip install -e '.[ray]'`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterator, Sequence
from typing import Any

from toolkit.base.api_keys import api_key_from_env
from toolkit.base.ray_driver import ray_driver
from toolkit.loadgen.arrivals import split
from toolkit.loadgen.client import StreamClient
from toolkit.loadgen.open_loop import PlannedRequest, send_open_loop

LEAD_S = 2.0  # the senders' common start is this far ahead of the driver's call (1 s was too little under load)


def client_task(
    base_url: str,
    api_key_env: str,
    read_timeout_s: float,
    max_in_flight: int | None,
    requests: list[PlannedRequest],
    due: list[float],
    start_wall: float,
) -> list[dict[str, Any]]:
    """One sender's share of the step (runs in a Ray worker); times from the common start."""
    from toolkit.matrix.runner import run_sync

    async def send() -> list[dict[str, Any]]:
        async with StreamClient(base_url, api_key=api_key_from_env(api_key_env), read_timeout_s=read_timeout_s) as c:
            start = time.perf_counter() + (start_wall - time.time())
            return await send_open_loop(c, requests, due, max_in_flight=max_in_flight, start=start)

    return run_sync(send)


class _Sender:
    """A client process on the cluster (a Ray actor), started once per sweep so that a step finds it warm."""

    def ready(self) -> bool:
        """Answers once the sending path is imported: a first step's import (seconds on a loaded machine) would
        otherwise eat the lead to the common start, and its first requests would go out late, at once."""
        import toolkit.matrix.runner  # noqa: F401

        return True

    def send(self, *args: Any) -> list[dict[str, Any]]:
        return client_task(*args)


class RaySenders:
    """`clients` senders on the cluster, started and answering before the first step."""

    def __init__(self, ray: Any, clients: int) -> None:
        self.ray = ray
        self.actors = [ray.remote(num_cpus=0)(_Sender).remote() for _ in range(clients)]
        ray.get([actor.ready.remote() for actor in self.actors])


@contextlib.contextmanager
def ray_senders(address: str, clients: int) -> Iterator[RaySenders]:
    """`clients` senders on the cluster at `address` while the block runs; the driver disconnected after."""
    with ray_driver(address, "ray_address") as ray:
        yield RaySenders(ray, clients)


def send_on_ray(
    senders: RaySenders,
    params: Any,
    requests: Sequence[PlannedRequest],
    due: Sequence[float],
    start_wall: float,
    seed: tuple[int, ...],
) -> list[dict[str, Any]]:
    """The step's records, sent by the senders from `start_wall` (blocking: run it in a thread)."""
    parts = split(due, len(senders.actors), seed=seed)
    cap = None if params.max_in_flight is None else math.ceil(params.max_in_flight / len(senders.actors))
    futures = [
        actor.send.remote(
            params.base_url,
            params.api_key_env,
            params.read_timeout_s,
            cap,
            [requests[i] for i in part],
            [due[i] for i in part],
            start_wall,
        )
        for actor, part in zip(senders.actors, parts, strict=True)
    ]
    records: list[dict[str, Any]] = [{}] * len(due)
    for part, got in zip(parts, senders.ray.get(futures), strict=True):
        for index, record in zip(part, got, strict=True):
            records[index] = {**record, "request": index}
    return records
