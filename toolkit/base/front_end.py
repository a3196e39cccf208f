"""Who sees a notebook's output: a person in an interactive Jupyter kernel, or a document.

A kernel that `toolkit.jupyter.execute` starts gets TOOLKIT_PROGRESS=text, since its output becomes a report;
a terminal has no kernel. Both get text, never widgets.
"""

from __future__ import annotations

import os
import sys

__all__ = ["interactive_kernel"]


def interactive_kernel() -> bool:
    """Whether this is an interactive Jupyter kernel (widgets are seen and moved), not a document's or a terminal."""
    if os.environ.get("TOOLKIT_PROGRESS") == "text":
        return False
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"
