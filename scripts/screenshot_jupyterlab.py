"""Screenshot a notebook opened in a real JupyterLab (127.0.0.1, token set) with headless Chromium.

    .venv/bin/python scripts/screenshot_jupyterlab.py NOTEBOOK.ipynb [--out shot.png] [--expect TEXT]

Starts `jupyter lab` on a free loopback port with a random token, serving a folder holding only a copy of the
notebook, opens `/lab/tree/<notebook>` in headless Chromium, writes the screenshot, and fails (exit 1) when the
page is blank or the rendered DOM lacks `--expect` (default: the notebook's first markdown heading). The
server is stopped whatever happens.
"""

from __future__ import annotations

import argparse
import html
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import matplotlib.image
import nbformat

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1600", "--virtual-time-budget=20000"]  # fmt: skip


def first_heading(notebook: Path) -> str:
    for cell in nbformat.read(notebook, as_version=4).cells:
        if cell.cell_type == "markdown" and cell.source.startswith("#"):
            return cell.source.splitlines()[0].lstrip("# ").strip()
    return notebook.stem


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redirect_page(path: Path, target: str) -> str:
    """A page at `path`, readable by this user only, that sends the browser on to `target`; its file:// URL."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as page:
        page.write(f'<!DOCTYPE html><meta http-equiv="refresh" content="0; url={html.escape(target)}">')
    return path.as_uri()


def rendered(dom: str, expect: str) -> bool:
    """Whether a dumped page shows the notebook with `expect` in it."""
    return expect in dom and "jp-Notebook" in dom


def shoot(
    chromium: str, flags: list[str], url: str, out: Path, expect: str, timeout_s: float, call_s: float = 30.0
) -> str:
    """Headless Chromium's screenshot of `url` into `out` and its DOM in one run, repeated until the DOM shows the
    notebook or `timeout_s` is up; the last DOM. Chromium's virtual time budget does not hold JupyterLab's real
    requests, so under load a run can end before the notebook renders. Now and then a headless Chromium here never
    ends (CI rehearsals: past 120 s for a notebook that renders in 8 s; `make test`: two runs in three 60 s longer
    than the third), or ends with status 0 and no file (a rehearsal, 2026-12-05): each run is killed after `call_s`
    and tried again with a profile of its own."""
    deadline, dom, attempt = time.monotonic() + timeout_s, "", 0
    while time.monotonic() < deadline:
        attempt += 1
        out.unlink(missing_ok=True)
        profile = [f"{f}-{attempt}" if f.startswith("--user-data-dir=") else f for f in flags]
        try:
            done = subprocess.run([chromium, *profile, f"--screenshot={out}", "--dump-dom", url], capture_output=True,
                                  text=True, timeout=min(call_s, max(deadline - time.monotonic(), 1)))  # fmt: skip
        except subprocess.TimeoutExpired as killed:
            said = killed.stderr.decode(errors="replace") if isinstance(killed.stderr, bytes) else killed.stderr
            print(f"chromium run {attempt} killed after {call_s:.0f} s; its last words: {(said or '')[-600:]}",
                  file=sys.stderr)  # fmt: skip
            continue
        dom = done.stdout
        if out.is_file() and out.stat().st_size and rendered(dom, expect):
            return dom
    if not (out.is_file() and out.stat().st_size):
        raise SystemExit(f"error: chromium wrote no {out} in {timeout_s:.0f} s ({attempt} runs)")
    return dom


def start_session(base: str, token: str, name: str) -> None:
    """The notebook's session and its kernel, started before Chromium opens it: JupyterLab joins it instead of
    starting one while the page loads. Without it, a Chromium run in the engine tier now and then never ended (its
    virtual time waiting, it seems, on that start): 3 of the last 4 `make test`s and 1 of 4 runs of the test alone,
    against 0 of 4 runs of the test alone with it (2026-12-07); it costs about 2 s."""
    body = {"path": name, "name": name, "type": "notebook", "kernel": {"name": "python3"}}
    started = httpx.post(f"{base}/api/sessions", params={"token": token}, json=body, timeout=30, trust_env=False)
    started.raise_for_status()


def screenshot(notebook: Path, out: Path, expect: str, timeout_s: float = 120.0) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: Debian's chromium is needed (apt-get install chromium)")
    root = Path(tempfile.mkdtemp(prefix="lab-"))
    shutil.copy(notebook, root / notebook.name)
    port, token = free_port(), secrets.token_hex(16)
    # The token never reaches a command line (`ps` shows those to every user): JupyterLab reads it from its
    # environment, Chromium from a page only this user can read, which sends it on to JupyterLab.
    lab = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--allow-root"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=root, env={**os.environ, "JUPYTER_TOKEN": token},
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                status = httpx.get(f"{base}/api/status", params={"token": token}, timeout=2, trust_env=False)
                if status.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or lab.poll() is not None:
                raise SystemExit("error: JupyterLab did not start")
            time.sleep(0.5)
        start_session(base, token, notebook.name)
        url = redirect_page(root / ".chromium-start.html", f"{base}/lab/tree/{notebook.name}?token={token}")
        flags = [*CHROMIUM_FLAGS, f"--user-data-dir={root / '.chromium'}"]
        dom = shoot(chromium, flags, url, out, expect, timeout_s)
    finally:
        lab.terminate()
        lab.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)
    pixels = matplotlib.image.imread(out)
    if pixels.std() < 0.05:
        raise SystemExit(f"error: {out} is blank")
    if not rendered(dom, expect):
        raise SystemExit(f"error: the notebook did not render in JupyterLab (no {expect!r} in the page)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, default=Path("jupyterlab.png"))
    parser.add_argument("--expect", help="text the rendered page must show (default: the first heading)")
    args = parser.parse_args()
    screenshot(args.notebook.resolve(), args.out.resolve(), args.expect or first_heading(args.notebook))
    print(f"screenshot: {args.out}")


if __name__ == "__main__":
    main()
