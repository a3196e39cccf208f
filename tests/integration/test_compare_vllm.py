"""`python -m toolkit compare` over two tiny runs against the real embedded vLLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.component.test_compare_notebook import assert_ratios_shown, run_compare
from tests.conftest import TEST_API_KEY
from toolkit.matrix.runner import run_matrix
from toolkit.params import make_params
from toolkit.servers.embedded.server import EmbeddedServer

pytestmark = pytest.mark.timeout(600)


def test_compare_two_runs_on_real_vllm(vllm_server: EmbeddedServer, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("VLLM_API_KEY", TEST_API_KEY)
    values = {"base_url": vllm_server.base_url, "contexts": ["256"], "concurrency": [1, 2], "duration_s": 2,
              "max_output": 256, "readiness_timeout_s": 60, "control_window_s": 1}  # fmt: skip
    folders = [tmp_path / "first", tmp_path / "second"]
    for folder in folders:
        run_matrix(make_params(values), folder, progress=False)
    md = run_compare(folders, tmp_path / "cmp", labels="first,second")
    assert "## second vs first" in md
    assert_ratios_shown(md, *folders, [(256, 1), (256, 2)])
    assert "| Prefill | 256 | 1 |" in md
    assert TEST_API_KEY not in md and TEST_API_KEY not in (tmp_path / "cmp" / "compare.html").read_text()
