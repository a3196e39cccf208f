"""Every toolkit command the README and the documentation site show is one the command line accepts: its
subcommand exists and every `--option` it names is one of that subcommand's; a whole command in a code block
parses (argparse, nothing run; `...` stands for options left out, and a synopsis with `[optional]` parts is held to
its options alone). A guide whose option was renamed or removed fails here, not in a reader's terminal (issue 44).
docs/cli-reference.md is generated from the parser and checked by tests/unit/test_cli_reference.py."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from toolkit.cli.entry import build_parser

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "cli-reference.md")]
PROGRAMS = ("vllm-speedtest", ".venv/bin/vllm-speedtest", "python -m toolkit", ".venv/bin/python -m toolkit")
_START = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(" + "|".join(re.escape(p) for p in PROGRAMS) + r")\s+(?=[a-z])")
_FENCE = re.compile(r"^\s*```")
_INLINE = re.compile(r"`([^`\n]+)`")
_SHELL_ENDS = {"|", "||", "&&", ";", "&"}
_OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_ELIDED = {"...", "…"}

pytestmark = pytest.mark.unit


def shown_commands(markdown: str) -> list[tuple[int, str, bool]]:
    """(line number, command, whole) for each toolkit command in a fenced code block (continuations joined; whole)
    or an inline code span of prose (a mention, not necessarily whole)."""
    found: list[tuple[int, str, bool]] = []
    fenced, pending, start = False, "", 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        if _FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            found += [(number, span, False) for span in _INLINE.findall(line) if _START.match(span)]
            continue
        text = line.strip().removeprefix("$ ")
        if pending:
            text = pending + " " + text
        else:
            start = number
        if text.endswith("\\"):
            pending = text[:-1].strip()
            continue
        pending = ""
        if _START.match(text):
            found.append((start, text, True))
    return found


def arguments(command: str) -> list[str]:
    """The words after the program: shell comments, redirections and anything after a pipe or `&&` left out."""
    words = shlex.split(_START.sub(lambda m: "PROGRAM ", command, count=1), comments=True)
    words = words[words.index("PROGRAM") + 1 :]
    for i, word in enumerate(words):
        if word in _SHELL_ENDS or word.startswith((">", "2>", "<")):
            words = words[:i]
            break
    return [word for word in words if word not in _ELIDED]


def problems(parser: argparse.ArgumentParser, command: str, whole: bool) -> str | None:
    """What the command line would refuse in a shown command, else None."""
    synopsis = "[" in command  # `serve [--port P] [--lora]`: its options are checked, not parsed
    words = _START.sub("", command, count=1).split() if synopsis else arguments(command)
    name = words[0] if words else ""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    if name not in subparsers.choices:
        return f"no subcommand {name!r}"
    known = subparsers.choices[name]._option_string_actions
    if unknown := [o for o in _OPTION.findall(command) if o not in known]:
        return f"{name} has no {', '.join(unknown)}"
    if whole and not synopsis and not _ELIDED & set(command.split()):
        try:
            parser.parse_args(words)
        except SystemExit:
            return "refused by the parser"
    return None


def test_shown_commands_are_found_and_split_as_a_shell_would() -> None:
    page = ("Run `vllm-speedtest check OUT` first.\n\n```bash\nVLLM_API_KEY=x vllm-speedtest run p.yaml \\\n"
            "    --out o   # a comment\n.venv/bin/python -m toolkit gate a b --max-regression 3% | tee g.txt\n"
            "make demo\n```\nNot `vllm-speedtest` alone, nor `toolkit keeps`.\n")  # fmt: skip
    found = shown_commands(page)
    assert [(n, whole) for n, _, whole in found] == [(1, False), (4, True), (6, True)]
    assert [arguments(c) for _, c, _ in found] == [["check", "OUT"], ["run", "p.yaml", "--out", "o"],
                                                   ["gate", "a", "b", "--max-regression", "3%"]]  # fmt: skip
    assert arguments("vllm-speedtest matrix ... --resume") == ["matrix", "--resume"]


@pytest.mark.parametrize(
    ("command", "whole", "said"),
    [
        ("vllm-speedtest gate a b --max-regression 3%", True, None),
        ("vllm-speedtest gate", False, None),  # a mention
        ("vllm-speedtest gate", True, "refused by the parser"),  # a whole command lacks its folders
        ("vllm-speedtest gaet a b", True, "no subcommand 'gaet'"),
        ("vllm-speedtest gate a b --max-regresion 3%", True, "gate has no --max-regresion"),
        ("vllm-speedtest serve [--port P] [--lora]", False, None),
        ("vllm-speedtest serve [--port P] [--lora-rank R]", False, "serve has no --lora-rank"),
        ("vllm-speedtest serve --model tiny-audio", True, "refused by the parser"),  # not one of its choices
    ],
)
def test_a_stale_command_is_named(command: str, whole: bool, said: str | None) -> None:
    with contextlib.redirect_stderr(io.StringIO()):
        assert problems(build_parser(), command, whole) == said


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_a_page_shows_parses(page: Path) -> None:
    parser, refused = build_parser(), []
    with contextlib.redirect_stderr(io.StringIO()):
        for number, command, whole in shown_commands(page.read_text(encoding="utf-8")):
            if said := problems(parser, command, whole):
                refused.append(f"{page.relative_to(ROOT)}:{number}: {said}: {command}")
    assert refused == []


def test_the_pages_show_every_common_task() -> None:
    """The common tasks (README.md's, one command each) are each shown whole, and so parsed above."""
    pages = [page.read_text(encoding="utf-8") for page in PAGES]
    shown = {arguments(c)[0] for text in pages for _, c, whole in shown_commands(text) if whole}
    tasks = {"serve", "run", "matrix", "compare", "interleave", "batch", "rates", "import-results", "capacity",
             "gate", "check"}  # fmt: skip
    assert tasks - shown == set()
