"""Test helpers about processes the toolkit launched."""

from __future__ import annotations

import time

from toolkit.servers.managed import has_live_member


def assert_group_gone(pgid: int, timeout_s: float = 5.0, what: str = "the server") -> None:
    """Fail unless every process of group `pgid` has ended within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while has_live_member(pgid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not has_live_member(pgid), f"processes of {what}'s group {pgid} are still running"
