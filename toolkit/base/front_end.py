"""Who sees a notebook's output: a person in a front end that draws and moves widgets, or nobody (a document).

Widgets are built only where someone can move them. A kernel's output reaches a person through JupyterLab,
Notebook 7 or another widget-capable front end; under plain papermill, nbclient or `jupyter nbconvert --execute`
it becomes a document, and a cell that builds a widget there can wait for ever for its execute reply
(jupyter/nbclient#312; measured here: benchmarks/widget_cell_hang.py). Every widget the toolkit shows, the
progress bar and the rate notebook's sliders, asks :func:`widget_front_end` first.

A front end is known to be attached when either
- it opened ipywidgets' control comm (``jupyter.widget.control``): JupyterLab's and Notebook 7's widget manager
  do so when they connect, to fetch the widgets' state; a kernel client that does the same counts too; or
- the kernel belongs to a Jupyter server's notebook session (jupyter_server gives such kernels
  ``JPY_SESSION_NAME``; its front ends ship the widget manager). This second rule exists because the widget
  manager opens the control comm when it connects, before a cell has imported ipywidgets: the kernel closes a
  comm for a target nobody registered yet, and the open is lost.
nbclient (papermill, nbconvert) does neither. A kernel that `toolkit.jupyter.execute` starts gets
TOOLKIT_PROGRESS=text and never widgets, whatever is attached.
"""

from __future__ import annotations

import os
import sys

__all__ = ["CONTROL_COMM_TARGET", "control_comm_opened", "widget_front_end"]

CONTROL_COMM_TARGET = "jupyter.widget.control"


def _zmq_kernel() -> bool:
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def control_comm_opened() -> bool:
    """Whether a front end opened ipywidgets' control comm in this kernel (ipywidgets keeps it once opened)."""
    widgets = sys.modules.get("ipywidgets.widgets.widget")
    return widgets is not None and getattr(widgets.Widget, "_control_comm", None) is not None


def widget_front_end() -> bool:
    """Whether a front end that draws and moves widgets is attached to this kernel (see the module's rules)."""
    if os.environ.get("TOOLKIT_PROGRESS") == "text" or not _zmq_kernel():
        return False
    return control_comm_opened() or bool(os.environ.get("JPY_SESSION_NAME"))
