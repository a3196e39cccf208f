"""The notebooks the package ships: found through importlib.resources, copied into a folder for JupyterLab."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

from toolkit.base.errors import ParamsError

# Inside the package: a link to the repository's notebooks/ in a checkout, copies of them in an installed wheel.
NOTEBOOKS = Path(str(resources.files("toolkit") / "notebooks"))


def shipped_notebooks() -> list[Path]:
    """The package's notebooks, by name."""
    return sorted(NOTEBOOKS.glob("*.ipynb"))


def copy_notebooks(folder: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Copy the notebooks into `folder` (made when missing); the copies' paths.

    A notebook already there with other content (perhaps edited) is kept: ParamsError naming them, nothing copied,
    unless `overwrite`; a `folder` that is a file: ParamsError.
    """
    target = Path(folder)
    if target.exists() and not target.is_dir():
        raise ParamsError(f"{target}: not a folder; name a folder (made when missing) to copy the notebooks into")
    sources = shipped_notebooks()
    if not overwrite:
        links = [s.name for s in sources if (target / s.name).is_symlink()]  # a dangling one too: never written through
        differing = [
            s.name for s in sources if (target / s.name).exists() and (target / s.name).read_bytes() != s.read_bytes()
        ]
        if links or differing:
            there = ", ".join(sorted({*links, *differing}))
            raise ParamsError(f"{target}: {there} already there and different (or a link); --force replaces them")
    target.mkdir(parents=True, exist_ok=True)
    for source in sources:
        if (target / source.name).is_symlink():
            (target / source.name).unlink()  # --force replaces the link itself, never what it points to
    return [Path(shutil.copyfile(source, target / source.name)) for source in sources]
