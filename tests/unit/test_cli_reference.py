"""docs/cli-reference.md is the parser's (toolkit/cli/reference.py): the committed page is what the generator makes
of today's parser, and, walked independently of the generator, every subcommand has its section and every option
and positional of it is named there."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from toolkit.cli.entry import CONSOLE_SCRIPT, build_parser
from toolkit.cli.reference import REGENERATE, main, render

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli-reference.md"
STALE = f"docs/cli-reference.md differs from the parser: run {REGENERATE}"

pytestmark = pytest.mark.unit


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    """Every subcommand by its name path ("rates", or "a b" for a nested one), aliases left out."""
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub not in found.values():
                    found[" ".join((*path, name))] = sub
                    found.update(commands(sub, (*path, name)))
    return found


def sections(page: str) -> dict[str, str]:
    """The page's `## name` sections by name."""
    parts = re.split(r"^## (.+)$", page, flags=re.M)
    return {name.strip(): body for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_page_is_the_generators_output_for_todays_parser() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(build_parser(), CONSOLE_SCRIPT), STALE


def test_every_subcommand_and_option_is_on_the_page() -> None:
    page = PAGE.read_text(encoding="utf-8")
    on_page = sections(page)
    parsed = commands(build_parser())
    assert list(on_page) == list(parsed), STALE
    for name, sub in parsed.items():
        body = on_page[name]
        assert f"{CONSOLE_SCRIPT} {name}" in body, f"{name}: no synopsis"
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            shown = action.option_strings or [action.metavar or action.dest]
            for spelling in shown:
                row = re.search(rf"^\| [^|]*`{re.escape(str(spelling))}`", body, re.M)
                if action.help == argparse.SUPPRESS:  # hidden options stay hidden (--outputs: tests only)
                    assert row is None, f"{name}: hidden {spelling} is on the page"
                else:
                    assert row is not None, f"{name}: {spelling} is missing. {STALE}"
    assert "`--help`" in page


def test_a_new_subcommand_is_picked_up_with_its_options() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    gate = sub.add_parser("gate-example", help="an example <command> | with *marks*")
    gate.add_argument("run_dir", metavar="RUN_DIR")
    gate.add_argument("--threshold", type=float, default=0.05, help="at most %(default)s")
    choice = gate.add_mutually_exclusive_group(required=True)
    choice.add_argument("--a", action="store_true")
    choice.add_argument("--b", action="store_true")
    nested = gate.add_subparsers(dest="step").add_parser("inner", help="a nested one")
    nested.add_argument("--deep", choices=["x", "y"])
    page = render(parser, CONSOLE_SCRIPT)
    body = sections(page)["gate-example"]
    assert "An example &lt;command&gt; \\| with \\*marks\\*." in body
    assert f"{CONSOLE_SCRIPT} gate-example RUN_DIR (--a | --b) [options] COMMAND" in body
    assert "| `--threshold` | `THRESHOLD` (float) | `0.05` | at most 0.05 |" in body
    assert "*required: it or `--b`*" in body
    assert "| `--deep` | one of `x`, `y` |  |  |" in sections(page)["gate-example inner"]
    assert "[gate-example inner](#gate-example-inner)" in page


def test_check_fails_on_a_stale_page_and_passes_on_a_fresh_one(tmp_path: Path) -> None:
    page = tmp_path / "cli-reference.md"
    assert main(["--page", str(page), "--check"]) == 1
    assert main(["--page", str(page)]) == 0
    assert main(["--page", str(page), "--check"]) == 0


def test_version_prints_the_program_and_its_version_and_the_page_tables_it(capsys: pytest.CaptureFixture[str]) -> None:
    from toolkit import __version__
    from toolkit.cli import main as toolkit_main

    with pytest.raises(SystemExit) as done:
        toolkit_main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"{CONSOLE_SCRIPT} {__version__}\n"
    lines = render(build_parser(), CONSOLE_SCRIPT).splitlines()
    header = lines.index("| argument | value | default | description |")  # the options before the command
    assert lines[header + 1 : header + 3] == [
        "|---|---|---|---|",
        "| `--version` | flag |  | show program's version number and exit |",
    ]
