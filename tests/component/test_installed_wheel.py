"""The toolkit as a user installs it: the wheel built, installed into a fresh virtual environment outside the checkout,
and its console script run from a folder of its own: `matrix`, `run` and `compare` against the fault server, and
`notebooks`, which copies the notebooks the wheel carries.

The fresh environment gets the toolkit's dependencies from this interpreter's site-packages as a plain path (a
`.pth` line) and their Jupyter data files (`share/jupyter`) as a link: the folder's own `.pth` files, among them
the editable install's link to the checkout, are not processed, so the toolkit the commands and their kernels
import is the wheel's, and nothing of the checkout but the dependencies' folder is on `sys.path`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from tests.faultserver import FaultServer

REPO = Path(__file__).resolve().parents[2]
SCRIPT = "vllm-speedtest"

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built from a copy of the sources (a build writes `build/` and `*.egg-info` beside them)."""
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("toolkit", "notebooks"):
        shutil.copytree(REPO / name, source / name, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*pip, str(source), "-w", str(wheels)], check=True, capture_output=True, timeout=120)
    (wheel,) = wheels.glob("vllm_speedtest-*.whl")
    return wheel


def fresh_environment(tmp_path: Path, wheel: Path) -> Path:
    """A virtual environment with the wheel installed; its `bin/` folder."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(subprocess.check_output([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                        text=True).strip())  # fmt: skip
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    (venv / "share").mkdir()  # the dependencies' data files where pip puts them (nbconvert's templates, kernels)
    (venv / "share" / "jupyter").symlink_to(Path(sysconfig.get_paths()["data"]) / "share" / "jupyter")
    install = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps", "--no-index"]
    # Without PYTHONPATH: a checkout on it (its vllm_speedtest.egg-info) reads as the toolkit already installed.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([*install, str(wheel)], check=True, capture_output=True, timeout=120, env=env)
    return venv / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    """A user's shell with the environment active: no PYTHONPATH, the environment's `bin/` first."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    home = bin_dir.parents[1] / "home"
    return env | {"PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", "MPLBACKEND": "Agg", "HOME": str(home)}


def test_the_wheel_installs_and_runs_outside_the_checkout(tmp_path: Path) -> None:
    bin_dir = fresh_environment(tmp_path, build_wheel(tmp_path))
    home = tmp_path / "home"  # the user's home folder: outside the checkout
    home.mkdir()
    env = user_env(bin_dir)

    def command(*args: str | Path, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(bin_dir / SCRIPT), *map(str, args)], cwd=home, env=env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    where = subprocess.run([str(bin_dir / "python"), "-c", "import sys, toolkit; print(toolkit.__file__); "
                            "print(*sys.meta_path, sep='\\n'); print(*sys.path, sep='\\n')"],
                           cwd=home, env=env, capture_output=True, text=True)  # fmt: skip
    assert where.returncode == 0, where.stderr
    imported_from, *path = where.stdout.splitlines()
    assert imported_from.startswith(str(tmp_path / "venv")), imported_from
    assert not [p for p in path if "editable" in p.lower()], path  # no finder leading to the checkout
    assert [p for p in path if p.startswith(str(REPO))] == [sysconfig.get_paths()["purelib"]], path  # deps only

    with FaultServer() as srv:
        matrix = command("matrix", "--base-url", srv.base_url, "--contexts", "64", "--concurrency", "1",
                         "--duration", "0.5", "--max-output", "4", "--control-window", "0", "--out", "a")  # fmt: skip
        assert matrix.returncode == 0, matrix.stderr[-3000:]
        params = home / "params.yaml"
        params.write_text(yaml.safe_dump({"base_url": srv.base_url, "contexts": [64], "concurrency": [1],
                                          "duration_s": 0.5, "max_output": 4, "control_window_s": 0}))  # fmt: skip
        run = command("run", params, "--out", "b")
        assert run.returncode == 0, run.stderr[-3000:]
    statuses = [json.loads(line)["status"] for line in (home / "b" / "results.jsonl").read_text().splitlines()]
    assert statuses == ["Valid", "Valid"], statuses
    written = {p.name for p in (home / "b").iterdir()}
    assert {"report.md", "report.html", "prefill.ipynb", "decode_matrix.ipynb"} <= written, written
    # the run's own record: measured by the wheel's toolkit, outside any git checkout
    assert json.loads((home / "b" / "run.json").read_text())["environment"]["git_revision"] is None

    compared = command("compare", "a", "b", "--out", "ab")
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "64" in (home / "ab" / "compare.md").read_text()

    copied = command("notebooks", "nbs")
    assert copied.returncode == 0, copied.stderr
    shipped = sorted(p.name for p in (REPO / "notebooks").glob("*.ipynb"))
    assert sorted(p.name for p in (home / "nbs").iterdir()) == shipped
    assert (home / "nbs" / "report.ipynb").read_bytes() == (REPO / "notebooks" / "report.ipynb").read_bytes()
    assert "open them with: jupyter lab nbs" in copied.stdout

    missing = command("serve")  # the embedded vLLM is a checkout feature: said in one line
    assert missing.returncode != 0 and "feature of the repository's checkout" in missing.stderr, missing.stderr
