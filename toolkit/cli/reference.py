"""The CLI reference page, docs/cli-reference.md, generated from the argparse parser so that it cannot drift.

`python -m toolkit.cli.reference` writes the page; `--check` exits 1 when the page on disk differs from the parser
(`make docs` runs it, and tests/unit/test_cli_reference.py compares the page with the parser too).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

PAGE = Path("docs/cli-reference.md")
REGENERATE = ".venv/bin/python -m toolkit.cli.reference"

_HEADER = """\
# CLI reference

<!-- Generated from the parser in toolkit/cli/entry.py by `{regenerate}`: do not edit by hand. -->

Every subcommand of `{prog}` (the same command as `python -m toolkit`) with every option, as the parser defines
them. [Commands](cli.md) says what each command is for, in a table. Every command also takes `-h`, `--help`:
its usage and options in the terminal. This page is generated from the parser, and a test fails when the two
differ.
"""


def subcommands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Each subcommand, depth first in the parser's order: its name path, its one-line help, its parser."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) in seen:  # an alias of a subcommand already listed
                continue
            seen.add(id(sub))
            yield (*path, name), helps.get(name, ""), sub
            yield from subcommands(sub, (*path, name))


def documented(action: argparse.Action) -> bool:
    """Whether an action belongs on the page: not `--help`, not a hidden option, not a subcommand list."""
    return not (
        isinstance(action, argparse._HelpAction | argparse._SubParsersAction) or action.help == argparse.SUPPRESS
    )


def _metavar(action: argparse.Action) -> str:
    if isinstance(action.metavar, str):
        return action.metavar
    if action.choices is not None:
        return "{" + ",".join(str(choice) for choice in action.choices) + "}"
    return action.dest if not action.option_strings else action.dest.upper()


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _spelled(action: argparse.Action) -> str:
    """How the synopsis writes an argument: `--out OUT`, `RUN_DIR…`, `--resume`."""
    metavar = _metavar(action)
    if not action.option_strings:
        return f"{metavar}…" if action.nargs in ("+", "*", argparse.REMAINDER) else metavar
    name = max(action.option_strings, key=len)
    return f"{name} {metavar}" if _takes_value(action) else name


def _synopsis(prog: str, path: tuple[str, ...], parser: argparse.ArgumentParser) -> str:
    """The command with its positionals and required options; `[options]` stands for the rest."""
    grouped = {id(a): group for group in parser._mutually_exclusive_groups for a in group._group_actions}
    words = [prog, *path]
    optional, command = False, []
    done: set[int] = set()
    for action in parser._actions:
        if not documented(action):
            if isinstance(action, argparse._SubParsersAction):
                command = ["COMMAND"]
            continue
        group = grouped.get(id(action))
        if group is not None:
            if id(group) in done:
                continue
            done.add(id(group))
            choices = " | ".join(_spelled(a) for a in group._group_actions if documented(a))
            words.append(f"({choices})" if group.required else f"[{choices}]")
        elif not action.option_strings:
            words.append(_spelled(action) if action.nargs not in ("?", "*") else f"[{_spelled(action)}]")
        elif action.required:
            words.append(_spelled(action))
        else:
            optional = True
    return " ".join(words + (["[options]"] if optional else []) + command)


def _inline(text: str) -> str:
    """Help text as table-safe Markdown: code spans kept, HTML and Markdown's special characters escaped."""
    parts = re.split(r"(`[^`]*`)", text)
    escaped = []
    for i, part in enumerate(parts):
        if i % 2:  # a code span
            escaped.append(part.replace("|", r"\|"))
            continue
        part = part.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        escaped.append(re.sub(r"([\\|*_\[\]])", r"\\\1", part))
    return "".join(escaped)


def _help(action: argparse.Action, prog: str) -> str:
    """The option's help with argparse's `%(default)s`-style fields filled in."""
    if not action.help:
        return ""
    fields = {name: value for name, value in vars(action).items() if value is not argparse.SUPPRESS}
    fields["prog"] = prog
    if isinstance(fields.get("choices"), list | tuple):
        fields["choices"] = ", ".join(str(choice) for choice in fields["choices"])
    return action.help % fields


def _value(action: argparse.Action) -> str:
    if not _takes_value(action):
        return "flag"
    parts = [f"`{_metavar(action)}`"] if action.option_strings else []  # a positional's name is its metavar
    if action.choices is not None:
        parts = ["one of " + ", ".join(f"`{choice}`" for choice in action.choices)]
    elif action.type is not None:
        parts.append(f"({getattr(action.type, '__name__', str(action.type))})")
    if action.nargs in ("+", "*"):
        parts.append("one or more" if action.nargs == "+" else "any number")
    return " ".join(parts)


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is argparse.SUPPRESS or (isinstance(default, bool) and not _takes_value(action)):
        return ""
    return f"`{default}`"


def _row(action: argparse.Action, prog: str, exclusive: dict[int, str]) -> str:
    names = ", ".join(f"`{name}`" for name in action.option_strings) or f"`{_metavar(action)}`"
    described = _inline(_help(action, prog))
    notes = []
    if action.required and action.option_strings:  # positionals: the synopsis shows which are required
        notes.append("required")
    if id(action) in exclusive:
        notes.append(exclusive[id(action)])
    description = "; ".join(filter(None, [described, *(f"*{note}*" for note in notes)]))
    return f"| {names} | {_value(action)} | {_default(action)} | {description} |"


def _section(prog: str, path: tuple[str, ...], summary: str, parser: argparse.ArgumentParser) -> str:
    exclusive = {}
    for group in parser._mutually_exclusive_groups:
        members = [a for a in group._group_actions if documented(a)]
        for action in members:
            others = ", ".join(f"`{max(a.option_strings, key=len)}`" for a in members if a is not action)
            exclusive[id(action)] = f"{'required: it or ' if group.required else 'not with '}{others}"
    lines = [f"## {' '.join(path)}", ""]
    if summary:
        lines += [_inline(summary[0].upper() + summary[1:]) + ".", ""]
    if parser.description:
        lines += [_inline(parser.description), ""]
    lines += ["```text", _synopsis(prog, path, parser), "```", ""]
    rows = [_row(action, prog, exclusive) for action in parser._actions if documented(action)]
    if rows:
        lines += ["| argument | value | default | description |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines)


def render(parser: argparse.ArgumentParser, prog: str = "vllm-speedtest") -> str:
    """The reference page for `parser`: a section per subcommand (nested ones too), each with a table of options.

    `prog` is the command's name on the page (the parser's own `prog` follows how Python was started)."""
    commands = list(subcommands(parser))
    index = " · ".join(f"[{' '.join(path)}](#{'-'.join(path)})" for path, _, _ in commands)
    sections = [_section(prog, path, summary, sub) for path, summary, sub in commands]
    top = [_row(action, prog, {}) for action in parser._actions if documented(action)]
    body = [_HEADER.format(prog=prog, regenerate=REGENERATE), f"**Commands.** {index}\n"]
    if top:
        table = "| argument | value | default | description |\n|---|---|---|---|\n" + "\n".join(top)
        body.append(f"Options before the command:\n\n{table}\n")
    return "\n".join(body + sections).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page (`--check`: exit 1, naming the command to run, when the page on disk is not the parser's)."""
    from toolkit.cli.entry import CONSOLE_SCRIPT, build_parser

    options = argparse.ArgumentParser(prog="python -m toolkit.cli.reference", description=__doc__)
    options.add_argument("--page", type=Path, default=PAGE, help=f"the page to write (default {PAGE})")
    options.add_argument("--check", action="store_true", help="only compare the page with the parser")
    args = options.parse_args(argv)
    text = render(build_parser(), CONSOLE_SCRIPT)
    if args.check:
        current = args.page.read_text(encoding="utf-8") if args.page.exists() else ""
        if current != text:
            print(f"error: {args.page} differs from the parser: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    args.page.write_text(text, encoding="utf-8")
    print(f"wrote {args.page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
