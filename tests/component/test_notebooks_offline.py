"""Every notebook runs top to bottom under papermill on imported reference reports (no vLLM), and a one-line
parameter change (the plotted metric) changes what its cells compute.

A probe cell appended to a copy of the notebook reads back, from the kernel's output history, every
DataFrame and Figure the visible cells returned: the pivot's values, the heatmaps' cell values, the lines.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pytest

from toolkit import cli
from toolkit.jupyter.convert import html_report
from toolkit.jupyter.execute import NOTEBOOKS, execute_path

FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "reference-reports"
REFERENCES = {"lfm": "lfm2.5-350m-h200nvl-vllm-0.26.txt", "kimi": "kimi-k2.7-code-h200sxm-x8-vllm-0.29.txt"}
PROBE = """
import json as _json
from matplotlib.collections import QuadMesh as _QuadMesh
from matplotlib.figure import Figure as _Figure

def _axes(ax):
    meshes = [c for c in ax.collections if isinstance(c, _QuadMesh)]
    return {"title": ax.get_title(), "ylabel": ax.get_ylabel(),
            "mesh": meshes[0].get_array().filled(float("nan")).tolist() if meshes else None,
            "lines": [{"label": l.get_label(), "marker": l.get_marker(), "xy": l.get_xydata().tolist()}
                      for l in ax.get_lines()]}

def _result(value):
    if isinstance(value, _Figure):
        return {"figure": [_axes(ax) for ax in value.axes]}
    if isinstance(value, pd.DataFrame):
        return {"frame": _json.loads(value.to_json(orient="split"))}
    return None

print(_json.dumps({n: _result(v) for n, v in Out.items() if _result(v) is not None}))
"""

pytestmark = [pytest.mark.process, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("imported")
    for name, file in REFERENCES.items():
        assert cli.main(["import-report", str(FIXTURES / file), "--out", str(root / name)]) == 0
    return {name: root / name for name in REFERENCES}


def execute(name: str, tmp_path: Path, parameters: dict[str, Any]) -> tuple[nbformat.NotebookNode, dict[str, Any]]:
    """Run notebooks/<name>.ipynb (plus the probe cell) under papermill; the executed notebook and, per cell id,
    what the probe read back."""
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell("import pandas as pd\n" + PROBE))
    source, output = tmp_path / f"{name}-source.ipynb", tmp_path / f"{name}.ipynb"
    nbformat.write(notebook, source)
    execute_path(source, output, parameters)
    executed = nbformat.read(output, as_version=4)
    outputs = [o for cell in executed.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    probe = json.loads(executed.cells[-1].outputs[-1].text)
    by_count = {cell.execution_count: cell.id for cell in executed.cells if cell.cell_type == "code"}
    return executed, {by_count[int(count)]: result for count, result in probe.items()}


def pngs(executed: nbformat.NotebookNode, cell_id: str | None = None) -> int:
    cells = [c for c in executed.cells if c.cell_type == "code" and cell_id in (None, c.id)]
    return sum("image/png" in o.get("data", {}) for c in cells for o in c.outputs)


def decode_values(folder: Path, metric: str) -> dict[tuple[str, int], float | None]:
    """(context, simultaneous requests) -> the metric, read from the imported results.csv."""
    frame = pd.read_csv(folder / "results.csv")
    decode = frame[frame["phase"] == "decode"]
    return {(r["context"], int(r["concurrency"])): None if pd.isna(r[metric]) else float(r[metric])
            for r in decode.to_dict("records")}  # fmt: skip


def clean(rows: list[list[Any]]) -> list[list[float | None]]:
    return [[None if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in row] for row in rows]


@pytest.mark.parametrize("notebook", ["decode_matrix", "report"])
def test_changing_the_metric_changes_the_pivot_heatmap_and_scaling_plot(imported: dict[str, Path], notebook: str,
                                                                         tmp_path: Path) -> None:  # fmt: skip
    parameters = {"RESULTS_DIR": str(imported["lfm"]), "METRIC": "ttft_ms", "HEATMAPS": ["ttft_ms"]}
    if notebook == "decode_matrix":
        parameters["MEASURE"] = False  # show the imported run instead of measuring a server
    executed, probe = execute(notebook, tmp_path, parameters)
    ttft, total = decode_values(imported["lfm"], "ttft_ms"), decode_values(imported["lfm"], "total_tok_s")
    contexts, levels = ["8K", "16K", "32K", "64K", "120K"], [1, 2, 4, 8, 16, 32, 64, 128]
    expected = [[ttft[(c, n)] for n in levels] for c in contexts]
    assert expected != [[total[(c, n)] for n in levels] for c in contexts]

    pivot = probe["pivot"]["frame"]  # the visible pandas cell: METRIC by context × simultaneous requests
    assert pivot["index"] == contexts and pivot["columns"] == levels
    assert clean(pivot["data"]) == expected

    (heatmap, _colorbar) = probe["heatmaps"]["figure"]
    assert heatmap["title"] == "TTFT (ms)" and clean(heatmap["mesh"]) == expected

    (scaling,) = probe["scaling"]["figure"]
    assert scaling["ylabel"] == "TTFT (ms)"
    lines = {line["label"]: line["xy"] for line in scaling["lines"]}
    assert lines["8K"] == [[n, ttft[("8K", n)]] for n in levels]
    assert pngs(executed, "heatmaps") == pngs(executed, "scaling") == 1


def test_prefill_and_decode_notebooks_show_a_run_without_measuring(imported: dict[str, Path], tmp_path: Path) -> None:
    parameters = {"RESULTS_DIR": str(imported["lfm"]), "MEASURE": False}
    prefill, probe = execute("prefill", tmp_path, parameters)
    assert pngs(prefill) == 1 and probe["prefill-numbers"]["frame"]["data"][0][:2] == ["8K", "Valid"]
    decode, probe = execute("decode_matrix", tmp_path, {**parameters, "SHOW_CONTEXTS": ["8K", "120K"]})
    assert pngs(decode) == 2
    total = decode_values(imported["lfm"], "total_tok_s")
    assert probe["pivot"]["frame"]["index"] == ["8K", "120K"]
    heatmaps = [ax for ax in probe["heatmaps"]["figure"] if ax["title"]]  # not the colour bars
    assert [ax["title"] for ax in heatmaps] == ["Total tok/s", "Per request tok/s", "TTFT (ms)"]
    assert clean(heatmaps[0]["mesh"])[1][:2] == [total[("120K", 1)], total[("120K", 2)]]
    outputs = [o for c in decode.cells for o in c.get("outputs", [])]
    tables = [o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("status-queued" in t and "1,113.1 · Requests queued · 417 ms TTFT" in t for t in tables)


def test_report_with_a_service_level(imported: dict[str, Path], tmp_path: Path) -> None:
    parameters = {"RESULTS_DIR": str(imported["lfm"]), "SLO_TTFT_MS": 200, "SLO_PER_REQUEST_TOK_S": 20}
    executed, probe = execute("report", tmp_path, parameters)
    assert pngs(executed) == 3  # prefill, heatmaps, scaling: each once
    heatmaps = [ax for ax in probe["heatmaps"]["figure"] if ax["title"]]  # not the colour bars
    (stars,) = [line["xy"] for line in heatmaps[0]["lines"] if line["marker"] == "*"]
    assert [0.14 + 5, 0.24] in stars and [0.14 + 6, 0.24] not in stars  # 8K × 32 meets both, 8K × 64 not
    (table,) = [o.data["text/html"] for c in executed.cells if c.id == "service-level" for o in c.outputs]
    assert "TTFT ≤ 200 ms and ≥ 20 tok/s per request" in table
    page = html_report(nbformat.read(tmp_path / "report.ipynb", as_version=4))
    assert "TTFT ≤ 200 ms and ≥ 20 tok/s per request" in page and "Speed test matrix" in page
    assert "service_level." not in page and "like this one" not in page  # no code, no notebook-only cells
    for heading in ("Prefill", "Sustained decode", "All measurements", "Extras"):
        assert f">{heading}<" in page


def test_compare_two_imported_references_with_a_service_level(imported: dict[str, Path], tmp_path: Path) -> None:
    parameters = {"RUN_DIRS": [str(imported["lfm"]), str(imported["kimi"])], "LABELS": ["LFM", "Kimi"],
                  "SLO_TTFT_MS": 200, "SLO_PER_REQUEST_TOK_S": 20}  # fmt: skip
    executed, _ = execute("compare", tmp_path, parameters)
    assert pngs(executed, "ratios") == 1 and pngs(executed, "service-level-heatmaps") == 2  # one per run
    (table,) = [o.data["text/html"] for c in executed.cells if c.id == "service-level" for o in c.outputs]
    assert ">Kimi<" in table and ">LFM<" in table
    page = html_report(nbformat.read(tmp_path / "compare.ipynb", as_version=4))
    assert "Kimi vs LFM" in page and "Service level TTFT ≤ 200 ms" in page and "runs.load_runs" not in page
