"""One `toolkit run` makes each check once per process, as scripts/count_checks.py counts them.

The command reads its params and the key, checks the `rate_sweep:` block, asks the server for its facts and makes
the plan, checks the folder's run and reads run.json once, and hands what it found down. Each notebook kernel
checks again only what a notebook run alone needs, each at most once, and parses run.json at most once: a kernel
that continues the folder's run, rewrites it and shows it reads the file once and is handed what it last read or
wrote after that (toolkit.results.run_document).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.count_checks import COLUMNS, KEY, count_run, run_params
from tests.faultserver import FaultServer

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]


def test_one_run_makes_each_check_once_per_process(tmp_path: Path) -> None:
    with FaultServer(api_key=KEY) as server:
        processes = count_run(run_params(server.base_url), tmp_path / "out")
    counts = {p["process"]: p["counts"] for p in processes}
    assert list(counts) == ["toolkit run", "prefill", "decode_matrix", "rate_sweep", "report"], counts
    assert counts.pop("toolkit run") == dict.fromkeys(COLUMNS, 1)
    for kernel, made in counts.items():
        assert {check: n for check, n in made.items() if n > 1} == {}, (kernel, made)
    assert (tmp_path / "out" / "report.md").is_file()
