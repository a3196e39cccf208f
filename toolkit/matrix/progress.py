"""The runner's progress bar: tqdm's notebook widget where a widget front end is attached, text on stderr elsewhere."""

from __future__ import annotations

import sys
from typing import Any

from tqdm import tqdm

from toolkit.base.front_end import widget_front_end


def progress_front_end() -> str:
    """ "notebook" (tqdm's widget) where a widget front end is attached (toolkit.base.front_end); "text" on stderr
    elsewhere: terminals, plain papermill and nbclient, and the toolkit's own kernels, whose output is a report."""
    return "notebook" if widget_front_end() else "text"


def progress_bar(**kwargs: Any) -> tqdm:
    if progress_front_end() == "notebook":
        from tqdm.notebook import tqdm as notebook_tqdm

        return notebook_tqdm(**kwargs)
    return tqdm(file=sys.stderr, **kwargs)
