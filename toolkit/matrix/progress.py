"""The runner's progress bar: tqdm's notebook widget in an interactive Jupyter kernel, text on stderr elsewhere."""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

from toolkit.base.front_end import interactive_kernel


def progress_front_end() -> str:
    """ "notebook" (tqdm's widget) in an interactive Jupyter kernel; "text" on stderr elsewhere, papermill's
    kernels under the toolkit included, since their output becomes the report (toolkit.base.front_end)."""
    return "notebook" if interactive_kernel() else "text"


def progress_bar(**kwargs: Any) -> tqdm:
    if progress_front_end() == "notebook":
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm(**kwargs)
    return tqdm(file=sys.stderr, **kwargs)
