"""`free_port`: a port below the kernel's ephemeral range, which no process asking for any port can be given."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from toolkit.servers.embedded import server
from toolkit.servers.embedded.server import LOWEST_PORT, ephemeral_range, free_port


def test_the_range_is_read_and_an_unreadable_one_is_none(tmp_path: Path) -> None:
    (tmp_path / "range").write_text("32768\t60999\n")
    assert ephemeral_range(tmp_path / "range") == (32768, 60999)
    (tmp_path / "range").write_text("32768\n")
    assert ephemeral_range(tmp_path / "range") is None
    assert ephemeral_range(tmp_path / "missing") is None


def test_a_port_below_the_ephemeral_range_that_can_be_bound() -> None:
    known = ephemeral_range()
    if known is None:
        pytest.skip("no /proc/sys/net/ipv4/ip_local_port_range here")
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST_PORT <= port < known[0] for port in ports), ports
    assert len(ports) > 1  # chosen at random, so two servers started at once do not race for one
    port = ports.pop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_without_a_known_range_the_kernel_chooses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(server, "ephemeral_range", lambda: None)
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
