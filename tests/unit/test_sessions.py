"""The split-session warning: when a local server's session differs from the client's under autogroups."""

from __future__ import annotations

from toolkit.sessions import split_session_warning


def test_same_session_gives_no_warning() -> None:
    assert split_session_warning(autogroup_enabled=True, server_sessions={42}, client_session=42) is None


def test_autogroups_off_gives_no_warning() -> None:
    assert split_session_warning(autogroup_enabled=False, server_sessions={7}, client_session=42) is None


def test_unseen_server_gives_no_warning() -> None:
    assert split_session_warning(autogroup_enabled=True, server_sessions=set(), client_session=42) is None


def test_other_session_is_named_with_the_remedy() -> None:
    message = split_session_warning(autogroup_enabled=True, server_sessions={7, 42}, client_session=42)
    assert message is not None
    assert "another session (7)" in message and "(42)" in message
    assert "sched_autogroup_enabled is 1" in message and "without setsid" in message
