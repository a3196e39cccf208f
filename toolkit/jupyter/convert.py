"""Converting executed notebooks with nbconvert: the self-contained HTML report (no code, images embedded, no
external assets, the `notebook-only` cells left out), and nbconvert's errors translated into the toolkit's error
tree.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from jinja2 import TemplateError
from nbconvert import HTMLExporter
from nbconvert.utils.exceptions import ConversionException
from traitlets.config import Config

from toolkit.base.errors import NotebookError

TEMPLATES = Path(__file__).resolve().parent / "templates"
NOTEBOOK_ONLY = "notebook-only"  # cell tag: explanation and exploration shown in Jupyter, left out of the reports
NBCONVERT_ERRORS = (ConversionException, TemplateError, nbformat.ValidationError)  # what a conversion can raise


def html_report(executed: nbformat.NotebookNode) -> str:
    """A self-contained HTML page of an executed notebook: no code, images embedded, no external assets.

    Cells tagged `notebook-only` (how to read and re-analyse, in Jupyter) are left out. nbconvert's errors are a
    NotebookError naming the executed notebook (where papermill wrote it).
    """
    config = Config()
    config.TagRemovePreprocessor.remove_input_tags = {"remove-input"}
    config.TagRemovePreprocessor.remove_cell_tags = {NOTEBOOK_ONLY}
    config.TagRemovePreprocessor.enabled = True
    exporter = HTMLExporter(
        config=config,
        template_name="offline",
        extra_template_basedirs=[str(TEMPLATES)],
        exclude_input=True,
        exclude_input_prompt=True,
        exclude_output_prompt=True,
        embed_images=True,
    )
    try:
        body, _ = exporter.from_notebook_node(executed)
    except NBCONVERT_ERRORS as exc:
        raise NotebookError(conversion_line(executed, exc)) from exc
    return body


def conversion_line(executed: nbformat.NotebookNode, exc: Exception) -> str:
    """Which executed notebook nbconvert could not convert, and why (NotebookError's line)."""
    where = executed.get("metadata", {}).get("papermill", {}).get("output_path") or "the executed notebook"
    what = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return (
        f"{where}: nbconvert could not convert it to HTML: {type(exc).__name__}{': ' + what if what else ''} "
        "(the executed notebook is kept; open it in Jupyter)"
    )
