"""One `toolkit run` makes each check once per process, as scripts/count_checks.py counts them.

The command reads its params and the key, checks the `rate_sweep:` block, asks the server for its facts and makes
the plan, checks the folder's run and reads run.json once, and hands what it found down. Each notebook kernel
checks again only what a notebook run alone needs, each at most once, and parses run.json at most once: a kernel
that continues the folder's run, rewrites it and shows it reads the file once and is handed what it last read or
wrote after that (toolkit.results.run_document). Resumed in its rate sweep, the same run makes the same counts,
but for run.json, which the command reads before its kernels and again after them, and finishes only the sweep.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import nbformat
import pytest

from scripts.count_checks import COLUMNS, KEY, RUN_JSON, count_run, run_params
from tests.faultserver import FaultServer
from toolkit.rates.files import STEPS_FILE, rates_dir, read_steps

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]


def assert_each_check_once(processes: list[dict[str, Any]], *, resumed: bool = False) -> None:
    """The command made each check once, and no kernel made any twice. A resumed run's command reads run.json
    twice: the run to continue, before the kernels, and for the report what they wrote to it."""
    counts = {p["process"]: p["counts"] for p in processes}
    assert list(counts) == ["toolkit run", "prefill", "decode_matrix", "rate_sweep", "report"], counts
    assert counts.pop("toolkit run") == dict.fromkeys(COLUMNS, 1) | ({RUN_JSON: 2} if resumed else {})
    for kernel, made in counts.items():
        assert {check: n for check, n in made.items() if n > 1} == {}, (kernel, made)


def test_one_run_makes_each_check_once_per_process_and_resume_finishes_its_rate_sweep(tmp_path: Path) -> None:
    """One run counted; then, stopped in its rate sweep (its last step's line and records gone, as a stop in that
    step leaves them), `--resume` measures only that step, in the same sweep, and reports the whole of it.

    The resume's assertions were test_rates_sweep.py's test_toolkit_run_resume_finishes_the_runs_rate_sweep, whose
    own first run this one shares (issue 41: a run with a sweep costs four kernels)."""
    out = tmp_path / "out"
    with FaultServer(api_key=KEY) as server:
        params = run_params(server.base_url) | {"rate_sweep": {"rates": [5, 10], "requests_per_step": 4,
                                                               "input_tokens": 30, "output_tokens": 4}}  # fmt: skip
        assert_each_check_once(count_run(params, out))
        assert (out / "report.md").is_file()
        steps = rates_dir(out) / STEPS_FILE
        kept = steps.read_text().splitlines()[0] + "\n"
        steps.write_text(kept)
        (rates_dir(out) / "step-001.parquet").unlink()
        (out / "report.md").unlink()
        sent = server.state.requests_total
        assert_each_check_once(count_run(params, out, resume=True), resumed=True)
        assert server.state.requests_total - sent < 10  # step 1's four requests, and no matrix cell measured again
    assert steps.read_text().startswith(kept) and [r["offered_rate"] for r in read_steps(out)] == [5.0, 10.0]
    executed = nbformat.read(out / "rate_sweep.ipynb", as_version=4)
    assert f"resuming the sweep in {out.resolve()}; finished steps kept: 1" in json.dumps(
        [c.get("outputs") for c in executed.cells]
    )
    assert "| 1 | 10.00 |" in (out / "report.md").read_text()  # step 1 at 10 req/s, measured on resume
