"""Does the machine pause while vLLM runs, and does the process layout cause it? Layouts side by side, one run.

An independent probe process (in this script's session) sleeps 10 ms in a loop and records every wake-up more
than 100 ms late, while a small matrix runs (contexts 1K, 2K × 1, 2, 4 streams, 5 s windows, no retries):
  split        the embedded vLLM started in a session of its own (`setsid`), client and probe in this one, the
               client's autogroup protection off (TOOLKIT_AUTOGROUP_NICE=0)
  split-protected  the same with the protection on (the client raises its autogroup's weight)
  same         vLLM, client and probe all in this session (what `python -m toolkit serve` from a shell gives)
  toolkit-run  `python -m toolkit run` against the same-session server: the papermill kernels measure
  papermill    vLLM in a session of its own, plain `papermill notebooks/decode_matrix.ipynb` (its kernel gets a
               session of its own too, as in JupyterLab), protection off; the probe is in a third session
  papermill-protected  the same with the protection on
  idle         no load at all (optional, `--layouts idle,...`)
Linux gives every session its own scheduler autogroup; two busy autogroups can starve each other for seconds.

    .venv/bin/python benchmarks/machine_pauses.py [--layouts split,same,toolkit-run,papermill,papermill-protected]

Last line: `machine_pauses: <layout>=<late wake-ups>/<frozen s>/<disturbed windows> ... <layout>_vs_same=<ratio>`,
the ratio being the median over 1K × 1, 2, 4 of the layout's total tok/s over the same-session layout's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROBE = """
import sys, time
last = time.monotonic()
while True:
    time.sleep(0.01)
    now = time.monotonic()
    if now - last > 0.11:
        print(f"{now - last - 0.01:.3f}", flush=True)
    last = now
"""
MATRIX = {"contexts": ["1K", "2K"], "concurrency": [1, 2, 4], "duration_s": 5, "max_output": 1024,
          "disturbed_retries": 0, "readiness_timeout_s": 30}  # fmt: skip


@dataclass
class Outcome:
    layout: str
    lates: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    disturbed: int = 0
    windows: int = 0
    tok_s_1k: dict[int, float] = field(default_factory=dict)

    def line(self) -> str:
        rates = " / ".join(f"{self.tok_s_1k[n]:.0f}" for n in sorted(self.tok_s_1k)) or "-"
        return (f"{self.layout:12} late wake-ups > 100 ms: {len(self.lates):3}  frozen {sum(self.lates):5.1f} s  "
                f"longest {max(self.lates, default=0):4.1f} s  disturbed {self.disturbed}/{self.windows}  "
                f"wall {self.wall_s:5.1f} s  1K total tok/s at 1/2/4: {rates}")  # fmt: skip


class Probe:
    """The probe process: started in this session; stops when its stdin closes."""

    def __enter__(self) -> Probe:
        self.proc = subprocess.Popen([sys.executable, "-c", PROBE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)  # fmt: skip
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate()
        self.lates = [float(x) for x in out.split()]


class Server:
    """`python -m toolkit serve` in this session (own process group) or in a new session."""

    def __init__(self, new_session: bool) -> None:
        from toolkit.servers.embedded.server import free_port

        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        session = {"start_new_session": True} if new_session else {"process_group": 0}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "toolkit", "serve", "--port", str(self.port), "--max-model-len", "4096"],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **session,
        )  # fmt: skip

    def __enter__(self) -> Server:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.base_url + "/health", timeout=2, trust_env=False).status_code == 200:
                    time.sleep(2)
                    return self
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError("the embedded vLLM did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.send_signal(signal.SIGTERM)  # `toolkit serve` stops vLLM and its engine processes
        self.proc.wait(timeout=60)


def summarize(outcome: Outcome, results_dir: Path) -> None:
    from toolkit.results.store import ResultStore, latest_by_key

    for m in latest_by_key(ResultStore(results_dir).load()).values():
        if m.phase != "decode" or m.status == "Over capacity":
            continue
        outcome.windows += 1
        outcome.disturbed += bool(m.disturbed)
        if m.context_tokens == 1024 and m.total_tok_s:
            outcome.tok_s_1k[m.concurrency] = m.total_tok_s


def protection(on: bool) -> dict[str, str]:
    """The environment with the client's autogroup protection on (the default) or off."""
    env = {k: v for k, v in os.environ.items() if k != "TOOLKIT_AUTOGROUP_NICE"}
    return env if on else {**env, "TOOLKIT_AUTOGROUP_NICE": "0"}


def in_process(layout: str, server: Server, protected: bool = True) -> Outcome:
    """The matrix from this process: client in this session."""
    from toolkit.matrix.runner import run_matrix
    from toolkit.params import make_params

    outcome, out = Outcome(layout), Path(tempfile.mkdtemp())
    start = time.monotonic()
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(protection(protected))
    with Probe() as probe:
        try:
            run_matrix(make_params({"base_url": server.base_url, **MATRIX}), out, progress=False)
        finally:
            os.environ.clear()
            os.environ.update(saved)
    outcome.wall_s, outcome.lates = time.monotonic() - start, probe.lates
    summarize(outcome, out)
    return outcome


def toolkit_run(server: Server) -> Outcome:
    """`python -m toolkit run` (papermill kernels) against the server; the reports are written too."""
    import yaml

    outcome, tmp = Outcome("toolkit-run"), Path(tempfile.mkdtemp())
    (tmp / "params.yaml").write_text(yaml.safe_dump({"run_label": "pauses", **MATRIX}))
    start = time.monotonic()
    with Probe() as probe:
        subprocess.run([sys.executable, "-m", "toolkit", "run", str(tmp / "params.yaml"), "--base-url",
                        server.base_url, "--out", str(tmp / "out")], cwd=REPO, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    outcome.wall_s, outcome.lates = time.monotonic() - start, probe.lates
    summarize(outcome, tmp / "out")
    return outcome


def plain_papermill(layout: str, server: Server, protected: bool) -> Outcome:
    """`papermill notebooks/decode_matrix.ipynb` as a user runs it: its kernel in a session of its own."""
    import yaml

    outcome, tmp = Outcome(layout), Path(tempfile.mkdtemp())
    parameters = {"BASE_URL": server.base_url, "RESULTS_DIR": str(tmp / "out"),
                  **{name.upper(): value for name, value in MATRIX.items()}}  # fmt: skip
    start = time.monotonic()
    with Probe() as probe:
        subprocess.run([sys.executable, "-m", "papermill", "notebooks/decode_matrix.ipynb", str(tmp / "out.ipynb"),
                        "-y", yaml.safe_dump(parameters)], cwd=REPO, check=True, env=protection(protected),
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    outcome.wall_s, outcome.lates = time.monotonic() - start, probe.lates
    summarize(outcome, tmp / "out")
    return outcome


def ratios_to_same(outcomes: list[Outcome]) -> str:
    """Each layout's median ratio of 1K total tok/s to the same-session layout's, over the shared concurrencies."""
    same = next((o for o in outcomes if o.layout == "same"), None)
    if same is None:
        return ""
    parts = []
    for o in outcomes:
        shared = [n for n in o.tok_s_1k if n in same.tok_s_1k]
        if o is not same and shared:
            parts.append(
                f"{o.layout}_vs_same={statistics.median(o.tok_s_1k[n] / same.tok_s_1k[n] for n in shared):.2f}"
            )
    return " ".join(parts)


def idle(seconds: float = 45.0) -> Outcome:
    outcome = Outcome("idle", wall_s=seconds)
    with Probe() as probe:
        time.sleep(seconds)
    outcome.lates = probe.lates
    return outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layouts", default="same,papermill,papermill-protected,split,split-protected,toolkit-run")
    parser.add_argument("--json", help="write every layout's numbers here")
    args = parser.parse_args()
    layouts = args.layouts.split(",")
    autogroup = Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
    print(f"kernel.sched_autogroup_enabled={autogroup}, this session {os.getsid(0)}", flush=True)
    outcomes: list[Outcome] = []
    for layout in layouts:
        if layout == "idle":
            outcomes.append(idle())
        elif layout in ("split", "split-protected"):
            with Server(new_session=True) as server:
                outcomes.append(in_process(layout, server, protected=layout == "split-protected"))
        elif layout in ("papermill", "papermill-protected"):
            with Server(new_session=True) as server:
                outcomes.append(plain_papermill(layout, server, protected=layout == "papermill-protected"))
        elif layout in ("same", "toolkit-run"):
            with Server(new_session=False) as server:
                outcomes.append(in_process("same", server) if layout == "same" else toolkit_run(server))
        else:
            parser.error(f"--layouts: unknown layout {layout!r}")
        print(outcomes[-1].line(), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps([o.__dict__ for o in outcomes], indent=1))
    pauses = " ".join(f"{o.layout}={len(o.lates)}/{sum(o.lates):.1f}/{o.disturbed}" for o in outcomes)
    print(f"machine_pauses: {pauses} {ratios_to_same(outcomes)}".rstrip())


if __name__ == "__main__":
    main()
