"""The command line, `vllm-speedtest` or `python -m toolkit`: `entry` (the parser and `main`), `measure` (the
commands that measure), `folders` (the commands on run folders and other tools' results)."""

from toolkit.cli.entry import CONSOLE_SCRIPT, build_parser, main

__all__ = ["CONSOLE_SCRIPT", "build_parser", "main"]
