"""The Ray driver is always disconnected when its block ends (a driver left connected to a cluster that stops is
ended by Ray about a minute later, exit status 1, nothing printed), and says a failed connection in one line."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from toolkit.base.errors import ParamsError
from toolkit.base.ray_driver import is_loopback, ray_driver


class FakeRay(types.ModuleType):
    def __init__(self, *, initialized: bool = False, fail: Exception | None = None) -> None:
        super().__init__("ray")
        self.initialized, self.fail = initialized, fail
        self.inits: list[dict[str, Any]] = []
        self.shutdowns = 0

    def is_initialized(self) -> bool:
        return self.initialized

    def init(self, **kwargs: Any) -> None:
        if self.fail is not None:
            raise self.fail
        self.inits.append(kwargs)
        self.initialized = True

    def shutdown(self) -> None:
        self.shutdowns += 1
        self.initialized = False


def use(monkeypatch: pytest.MonkeyPatch, fake: FakeRay) -> FakeRay:
    monkeypatch.setitem(sys.modules, "ray", fake)
    return fake


def test_the_driver_is_disconnected_when_the_block_ends_and_when_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = use(monkeypatch, FakeRay())
    with ray_driver("127.0.0.1:6379", "ray_address") as got:
        assert got is ray and ray.initialized
    assert ray.shutdowns == 1 and not ray.initialized
    assert ray.inits[0]["address"] == "127.0.0.1:6379" and ray.inits[0]["_node_ip_address"] == "127.0.0.1"
    with pytest.raises(KeyboardInterrupt), ray_driver("10.0.0.5:6379", "--ray"):
        raise KeyboardInterrupt
    assert ray.shutdowns == 2 and "_node_ip_address" not in ray.inits[1]  # not loopback: Ray picks the address


def test_a_driver_the_process_already_was_is_left_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = use(monkeypatch, FakeRay(initialized=True))
    with ray_driver("127.0.0.1:6379", "ray_address"):
        pass
    assert ray.inits == [] and ray.shutdowns == 0


def test_a_connection_that_fails_is_one_line_naming_the_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    use(monkeypatch, FakeRay(fail=ConnectionError("could not reach GCS\n  details")))
    with pytest.raises(ParamsError) as caught, ray_driver("127.0.0.1:1", "--ray"):
        pass
    assert caught.value.line == "--ray: cannot connect to the Ray cluster at 127.0.0.1:1: could not reach GCS"


def test_ray_missing_names_the_parameter_and_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with (
        pytest.raises(ParamsError, match=r"^ray_address: Ray is not installed; install it with"),
        ray_driver("127.0.0.1:1", "ray_address"),
    ):
        pass


@pytest.mark.parametrize(("host", "loop"), [("localhost", True), ("127.0.0.1", True), ("::1", True),
                                            ("10.1.2.3", False), ("ray-head", False)])  # fmt: skip
def test_loopback_hosts(host: str, loop: bool) -> None:
    assert is_loopback(host) is loop
