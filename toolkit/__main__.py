"""`python -m toolkit` and the `vllm-speedtest` console script (pyproject.toml's `[project.scripts]`)."""

import sys

from toolkit.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
