"""This process as a driver of a Ray cluster, for as long as a block runs (Ray is optional: `.[ray]`).

Both Ray fan-outs (`toolkit batch --ray`, a rate sweep's `ray_address`) connect through here. The driver is
always disconnected when the block ends: a driver left connected to a cluster that then stops is ended by Ray's
core worker (exit status 1, nothing printed) about a minute later, wherever it is: a notebook kernel, a test run.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
from collections.abc import Iterator
from typing import Any

from toolkit.base.errors import ParamsError

INSTALL = "Ray is not installed; install it with `.venv/bin/pip install -e '.[ray]'` (ray>=2.9)"


@contextlib.contextmanager
def ray_driver(address: str, name: str) -> Iterator[Any]:
    """The `ray` module, connected to the cluster at `address`; `name` is the parameter that gave the address.

    A cluster on a loopback address is reached on loopback only (this driver binds 127.0.0.1 too). A driver this
    process already is (a notebook that connected itself) is used as it is, and left connected.
    """
    host = address.rsplit(":", 1)[0].removeprefix("ray://")
    loopback = is_loopback(host)
    if loopback:  # Ray otherwise swaps 127.0.0.1 for this host's network address
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read as Ray is imported
    try:
        import ray
    except ImportError:
        raise ParamsError(f"{name}: {INSTALL}") from None
    if ray.is_initialized():
        yield ray
        return
    extra: dict[str, Any] = {"_node_ip_address": "127.0.0.1"} if loopback else {}
    try:
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, **extra)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise ParamsError(f"{name}: cannot connect to the Ray cluster at {address}: {first_line(exc)}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


def is_loopback(host: str) -> bool:
    """`localhost` or a loopback IP address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]
