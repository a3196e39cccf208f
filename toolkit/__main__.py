"""`python -m toolkit` and the `vllm-speedtest` console script (pyproject.toml's `[project.scripts]`)."""

import gc
import sys

from toolkit.cli import main as run_command

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The command's exit status; its heap frozen before the interpreter's teardown, whose last collections would
    otherwise walk every object the notebooks' libraries made (benchmarks/setup_costs.py: `exit_ms`)."""
    try:
        return run_command(argv)
    finally:
        gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
