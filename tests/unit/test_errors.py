"""One error tree: every exception class of the toolkit is a `ToolkitError`; the command line prints each as one
line (exit 2 for bad input, 1 for the environment, the key redacted) and lets a bug keep its traceback."""

from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import toolkit
from toolkit import cli
from toolkit.base import errors
from toolkit.base.api_keys import api_key_from_env
from toolkit.base.errors import ServerAPIError, ServerError, ToolkitError
from toolkit.cli import folders

KEY_ENV = "ERRORS_TEST_API_KEY"
KEY = "sk-errors-NEEDLE-9137"


def toolkit_modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(toolkit.__path__, "toolkit.") if not m.name.endswith("__main__")]


def exception_classes() -> dict[str, type[BaseException]]:
    """Every exception class defined in a toolkit module, by `module.name`."""
    found = {}
    for name in toolkit_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == name:
                found[f"{name}.{attr}"] = value
    return found


def all_subclasses(cls: type[ToolkitError]) -> list[type[ToolkitError]]:
    return [sub for direct in cls.__subclasses__() for sub in (direct, *all_subclasses(direct))]


def test_every_exception_class_of_the_toolkit_is_a_toolkit_error() -> None:
    classes = exception_classes()
    assert "toolkit.base.errors.ServerError" in classes and "toolkit.loadgen.stream_events._Malformed" in classes
    assert [name for name, cls in classes.items() if not issubclass(cls, ToolkitError)] == []


def test_the_tree_is_defined_once_in_errors_and_drawn_in_its_docstring() -> None:
    public = [name for name in exception_classes() if not name.rpartition(".")[2].startswith("_")]
    assert [name for name in public if not name.startswith("toolkit.base.errors.")] == []
    for name in errors.__all__:
        assert f" {name} " in errors.__doc__ or f" {name}\n" in errors.__doc__, name


def make(cls: type[ToolkitError], message: str) -> ToolkitError:
    if issubclass(cls, ServerError):
        return cls(message, log_tail="a log line\nanother", log_path=Path("/tmp/server.log"))
    if issubclass(cls, ServerAPIError):
        return cls(message, 503)
    return cls(message)


def run_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> int:
    def command(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(folders, "_compare", command)  # the parser binds the function when main builds it
    return cli.main(["compare", "a", "b", "--out", "c"])


@pytest.mark.parametrize("cls", [ToolkitError, *all_subclasses(ToolkitError)], ids=lambda c: c.__name__)
def test_every_toolkit_error_is_one_line_with_its_exit_status_and_no_key(
    cls: type[ToolkitError], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    api_key_from_env(KEY_ENV)  # the key is known to this process: redacted wherever it shows
    status = run_raising(monkeypatch, make(cls, f"what: wrong with {KEY}\nsecond line"))
    out, err = capsys.readouterr()
    assert status == cls.exit_code and status == (1 if cls.exit_code == 1 else 2)
    assert len(err.splitlines()) == 1 and err.startswith("error: what: wrong with "), err
    assert "NEEDLE" not in out + err
    assert "Traceback" not in err


def test_environment_errors_exit_1_bad_input_exits_2() -> None:
    assert {c.__name__ for c in all_subclasses(ToolkitError) if c.exit_code == 1} == {
        "CellTimeout", "ConnectError", "NotebookError", "ServerAPIError", "ServerError", "HealthTimeout", "PortTaken",
    }  # fmt: skip
    assert ToolkitError.exit_code == 2


def test_an_os_error_is_one_line_naming_the_file_exit_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    status = run_raising(monkeypatch, PermissionError(13, "Permission denied", "/srv/runs/a"))
    assert status == 1
    assert capsys.readouterr().err == "error: /srv/runs/a: Permission denied\n"


@pytest.mark.parametrize("bug", [ValueError("invalid literal for int()"), TypeError("unsupported operand"),
                                 KeyError("ttft_ms")], ids=lambda e: type(e).__name__)  # fmt: skip
def test_a_bug_keeps_its_traceback_and_fails(
    bug: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)
    api_key_from_env(KEY_ENV)
    bug.args = (f"{bug.args[0]} {KEY}",)
    status = run_raising(monkeypatch, bug)
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith("Traceback (most recent call last):"), err
    assert f"{type(bug).__name__}: " in err.splitlines()[-1] and "NEEDLE" not in err
