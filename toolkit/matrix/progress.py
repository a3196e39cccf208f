"""The runner's progress bar: tqdm's notebook widget in an interactive Jupyter kernel, text on stderr elsewhere."""

from __future__ import annotations

import os
import sys
from typing import Any

from tqdm import tqdm


def progress_front_end() -> str:
    """ "notebook" (tqdm's widget) in an interactive Jupyter kernel; "text" on stderr elsewhere: papermill's
    kernels get TOOLKIT_PROGRESS=text from toolkit.jupyter.execute, since their output becomes the report."""
    if os.environ.get("TOOLKIT_PROGRESS") == "text":
        return "text"
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return "notebook" if type(shell).__name__ == "ZMQInteractiveShell" else "text"


def progress_bar(**kwargs: Any) -> tqdm:
    if progress_front_end() == "notebook":
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm(**kwargs)
    return tqdm(file=sys.stderr, **kwargs)
