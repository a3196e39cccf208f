"""Which hosts are this machine, and who listens on a local base_url's port: a listener the launched server's
group does not own is a stranger, one whose owner cannot be seen included."""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

from toolkit.servers import listeners
from toolkit.servers.listeners import is_this_machine, listening_pids, port_listeners
from toolkit.servers.managed import strangers


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "127.1", "localhost", "LOCALHOST", "::1", "0.0.0.0", "::"])
def test_loopback_unspecified_and_shorthand_hosts_are_this_machine(host: str) -> None:
    assert is_this_machine(host)


def test_an_interface_address_is_this_machine_and_others_are_not() -> None:
    own = next(a.address for entries in psutil.net_if_addrs().values() for a in entries if a.family == 2)
    assert is_this_machine(own)
    assert not is_this_machine("192.0.2.7") and not is_this_machine("example.invalid") and not is_this_machine(None)


def listen(monkeypatch: pytest.MonkeyPatch, *pids: int | None, port: int = 8000) -> None:
    conns = [SimpleNamespace(status=psutil.CONN_LISTEN, laddr=SimpleNamespace(port=port), pid=pid) for pid in pids]
    monkeypatch.setattr(listeners.psutil, "net_connections", lambda kind: conns)


def test_a_listener_whose_owner_cannot_be_seen_is_a_stranger(monkeypatch: pytest.MonkeyPatch) -> None:
    listen(monkeypatch, None)
    assert port_listeners("http://127.0.0.2:8000") == [None] and listening_pids("http://127.0.0.2:8000") == []
    assert strangers("http://127.0.0.2:8000", os.getpgid(0)) == ["a process this user cannot see"]


def test_listeners_in_the_group_are_ours_and_others_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    listen(monkeypatch, os.getpid(), 1)
    assert strangers("http://0.0.0.0:8000", os.getpgid(0)) == ["pid 1"]
    assert strangers("http://127.1:8000", os.getpgid(1)) == [f"pid {os.getpid()}"]
    assert strangers("http://192.0.2.7:8000", os.getpgid(0)) == []  # not this machine: nothing to check here


def test_sockets_that_cannot_be_listed_count_as_an_unseen_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(kind: str) -> Any:
        raise psutil.AccessDenied()

    monkeypatch.setattr(listeners.psutil, "net_connections", denied)
    assert port_listeners("http://localhost:8000") == [None]
