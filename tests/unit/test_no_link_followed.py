"""Files are written only inside the folder named (issue 40): `notebooks DIR` never writes through a link, a
dangling one included, and `--force` replaces the link itself; `import-report` refuses a results.csv that is a
link instead of overwriting its target; `notebooks FILE` is one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError
from toolkit.cli import main
from toolkit.jupyter.shipped import copy_notebooks, shipped_notebooks

REPORT = Path(__file__).resolve().parents[1] / "fixtures" / "reference-reports" / "lfm2.5-350m-h200nvl-vllm-0.26.txt"


@pytest.mark.parametrize("dangling", [True, False])
def test_notebooks_never_write_through_a_link_and_force_replaces_the_link(tmp_path: Path, dangling: bool) -> None:
    outside, folder = tmp_path / "outside.ipynb", tmp_path / "nbs"
    if not dangling:
        outside.write_text("mine")
    folder.mkdir()
    name = shipped_notebooks()[0].name
    (folder / name).symlink_to(outside)
    with pytest.raises(ParamsError, match=rf"{name} already there and different \(or a link\); --force"):
        copy_notebooks(folder)
    assert not (folder / name).exists() if dangling else (folder / name).is_symlink()
    assert not outside.exists() if dangling else outside.read_text() == "mine"
    copy_notebooks(folder, overwrite=True)
    assert not (folder / name).is_symlink() and (folder / name).read_bytes() == shipped_notebooks()[0].read_bytes()
    assert not outside.exists() if dangling else outside.read_text() == "mine"


def test_import_report_refuses_a_results_csv_that_is_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target, out = tmp_path / "precious.csv", tmp_path / "out"
    target.write_text("keep me")
    out.mkdir()
    (out / "results.csv").symlink_to(target)
    assert main(["import-report", str(REPORT), "--out", str(out)]) == 2
    assert (
        capsys.readouterr().err.strip()
        == f"error: out: {out / 'results.csv'} is a link; remove it or choose another folder"
    )
    assert target.read_text() == "keep me"


def test_notebooks_into_a_file_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    assert main(["notebooks", str(file)]) == 2
    assert capsys.readouterr().err == (
        f"error: {file}: not a folder; name a folder (made when missing) to copy the notebooks into\n"
    )
    assert file.read_text() == "mine"
