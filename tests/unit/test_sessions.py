"""Autogroup protection: when a local server runs in another session, the client raises its own weight or warns."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError
from toolkit.servers import autogroups as sessions
from toolkit.servers.autogroups import (
    client_nice_setting,
    needs_protection,
    parse_autogroup_nice,
    protected_from_autogroups,
    split_session_warning,
)

URL = "http://127.0.0.1:8000"


def test_same_session_needs_nothing() -> None:
    assert not needs_protection(autogroup_enabled=True, server_sessions={42}, client_session=42)


def test_autogroups_off_need_nothing() -> None:
    assert not needs_protection(autogroup_enabled=False, server_sessions={7}, client_session=42)


def test_unseen_server_needs_nothing() -> None:
    assert not needs_protection(autogroup_enabled=True, server_sessions=set(), client_session=42)


def test_other_session_needs_protection() -> None:
    assert needs_protection(autogroup_enabled=True, server_sessions={7, 42}, client_session=42)


def test_warning_names_the_sessions_and_a_command_that_works_for_this_process() -> None:
    message = split_session_warning(server_sessions={7, 42}, client_session=42, pid=4242, target_nice=-15)
    assert "another session (7)" in message and "(42)" in message
    assert "echo -15 > /proc/4242/autogroup" in message and "CAP_SYS_NICE" in message
    assert 'SERVER = "embedded"' in message


def test_parse_autogroup_nice() -> None:
    assert parse_autogroup_nice("/autogroup-25 nice 0\n") == 0
    assert parse_autogroup_nice("/autogroup-3 nice -15") == -15


@pytest.fixture
def layout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A server in session 7, autogroups on, and this process's autogroup file replaced by a plain file."""
    own = tmp_path / "autogroup"
    own.write_text("/autogroup-9 nice 0\n")
    monkeypatch.setattr(sessions, "OWN_AUTOGROUP", own)
    monkeypatch.setattr(sessions, "autogroup_enabled", lambda: True)
    monkeypatch.setattr(sessions, "listening_sessions", lambda url: {7})
    monkeypatch.delenv("TOOLKIT_AUTOGROUP_NICE", raising=False)
    return own


def test_weight_raised_while_measuring_and_restored(layout: Path) -> None:
    said: list[str] = []
    with protected_from_autogroups(URL, said.append):
        assert parse_autogroup_nice(layout.read_text()) == -15
    assert parse_autogroup_nice(layout.read_text()) == 0
    assert len(said) == 1 and "nice 0 -> -15" in said[0]


@pytest.mark.parametrize("value", ["-15 sk-secret-value-1234", "nice", "-21", "1e3"])
def test_a_bad_autogroup_nice_is_one_line_without_its_value(
    layout: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("TOOLKIT_AUTOGROUP_NICE", value)
    with pytest.raises(ParamsError) as refused:
        client_nice_setting()
    assert str(refused.value) == "TOOLKIT_AUTOGROUP_NICE: not a whole number from -20 to 19 (its value is not shown)"


def test_restored_after_an_error_inside(layout: Path) -> None:
    with pytest.raises(RuntimeError), protected_from_autogroups(URL, lambda line: None):
        raise RuntimeError("measurement failed")
    assert parse_autogroup_nice(layout.read_text()) == 0


def test_without_privilege_the_warning_is_said(layout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(nice: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sessions, "_write_own_nice", refused)
    said: list[str] = []
    with protected_from_autogroups(URL, said.append):
        pass
    assert len(said) == 1 and said[0].startswith("warning:") and f"/proc/{os.getpid()}/autogroup" in said[0]


def test_off_by_setting_and_for_remote_servers(layout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    said: list[str] = []
    with protected_from_autogroups("http://10.1.2.3:8000", said.append):
        assert parse_autogroup_nice(layout.read_text()) == 0
    monkeypatch.setenv("TOOLKIT_AUTOGROUP_NICE", "0")
    with protected_from_autogroups(URL, said.append):
        assert parse_autogroup_nice(layout.read_text()) == 0
    assert said == []


def test_same_session_server_is_left_alone(layout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "listening_sessions", lambda url: {os.getsid(0)})
    said: list[str] = []
    with protected_from_autogroups(URL, said.append):
        assert parse_autogroup_nice(layout.read_text()) == 0
    assert said == []


def test_in_the_root_autogroup_nothing_is_raised_or_said(layout: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process whose session predates autogroups reads an empty file and may not set the root group's nice."""
    layout.write_text("")

    def refused(nice: int) -> None:
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(sessions, "_write_own_nice", refused)
    said: list[str] = []
    with protected_from_autogroups(URL, said.append):
        assert layout.read_text() == ""
    assert said == []
