"""`python -m toolkit` and the `vllm-speedtest` console script (pyproject.toml's `[project.scripts]`)."""

import sys

# nbformat's jsonschema builds rfc3987-syntax's lark grammar when it is imported, about 1 s of every
# command here (python-jsonschema/jsonschema#1428). Notebooks never use the IRI formats it checks: skip it.
if "rfc3987_syntax" not in sys.modules:
    sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]  # None: `import` raises ImportError

from toolkit.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
