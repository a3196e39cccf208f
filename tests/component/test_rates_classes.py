"""A class sweep against the fault server: each request's class in its records and body, each step's figures per
class, the search's binding class."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.faultserver import MODEL, FaultServer
from toolkit.cli import main
from toolkit.method.goodput import CLASS_COLUMN, RECORD_COLUMNS
from toolkit.params import ParamsError
from toolkit.rates.classes import class_rng, draw_classes, parse_classes
from toolkit.rates.files import rates_dir, read_records, read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.reports import rate_views
from toolkit.reports.rate_tables import CLASSES_CAPTION, classes_table, rate_markdown
from toolkit.reports.tables import markdown_table
from toolkit.results.rate_runs import load_rate_sweep

# the fault server streams a token every 5 ms: "chat" (4 tokens) meets its 5 s end-to-end limit; "long" (16 tokens,
# sent to the completions endpoint where the sweep's is chat) cannot meet a TPOT of 1 ms
CLASSES = [
    {"name": "chat", "weight": 1, "input_tokens": 40, "output_tokens": 4, "slo_e2e_ms": 5000, "priority": -1},
    {
        "name": "long",
        "weight": 1,
        "input_tokens": 150,
        "output_tokens": 16,
        "slo_tpot_ms": 1,
        "endpoint": "completions",
    },
]


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(token_interval_s=0.005)


@pytest.fixture(scope="module")
def class_sweep(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[str], list[dict]]]:
    """One class sweep with a search, run once for the module: its folder, its lines, the server's request log."""
    said: list[str] = []
    with FaultServer(token_interval_s=0.005) as fs:
        folder = tmp_path_factory.mktemp("classes") / "run"
        params = make_rate_params({"base_url": fs.base_url, "rates": [80, 160], "requests_per_step": 24,
                                   "classes": CLASSES, "search": True, "goodput_target": 0.9, "steady_trim": 0,
                                   "seed": 3, "results_dir": str(folder)})  # fmt: skip
        yield run_rates(params, say=said.append), said, fs.completion_requests()


def test_each_request_carries_its_class_in_its_record_and_its_body(class_sweep: tuple[Path, list[str], list[dict]]):
    out, _, sent = class_sweep
    records = read_records(out)
    assert list(records.columns) == [*RECORD_COLUMNS, CLASS_COLUMN] and len(records) == 48
    assert set(records[CLASS_COLUMN]) == {"chat", "long"}
    long = records[records[CLASS_COLUMN] == "long"]
    assert (long["input_tokens"] == 150).all() and (long["output_tokens"] == 16).all()
    assert (records.loc[records[CLASS_COLUMN] == "chat", "output_tokens"] == 4).all()
    assert sorted({e["priority"] for e in sent}, key=str) == [-1, None]  # chat's priority; long has none
    assert sum(e["priority"] == -1 for e in sent) == (records[CLASS_COLUMN] == "chat").sum()
    # each class's endpoint: long's requests to /v1/completions (a prompt), chat's to the sweep's chat endpoint
    paths = sorted(e["path"] for e in sent)
    assert paths == sorted(["/v1/completions"] * len(long) + ["/v1/chat/completions"] * (len(records) - len(long)))


def test_each_step_judges_each_class_against_its_own_level(class_sweep: tuple[Path, list[str], list[dict]]) -> None:
    out, said, _ = class_sweep
    records, rows = read_records(out), read_steps(out)
    assert [r["offered_rate"] for r in rows] == [80.0, 160.0]  # long fails at 80: no rate to search above
    for row, (_, step) in zip(rows, records.groupby("step"), strict=True):
        chat, slow = row["classes"]["chat"], row["classes"]["long"]
        assert chat["requests"] + slow["requests"] == row["requests"] == 24
        assert chat["requests"] == (step[CLASS_COLUMN] == "chat").sum() and chat["weight_share"] == 0.5
        assert chat["share_low"] <= chat["share"] <= chat["share_high"]
        assert chat["slo_fraction"] == 1.0 and chat["limit_fractions"] == {"e2e": 1.0}
        assert slow["slo_fraction"] == 0.0 and slow["slo_verdict"] == "fails" and slow["goodput"] == 0.0
        assert slow["tpot_p50_ms"] > 1
        # the whole step: each request against its own class's level, failing with the class that fails
        steady = chat["steady_requests"] + slow["steady_requests"]
        assert row["slo_fraction"] == chat["steady_requests"] / steady and row["slo_verdict"] == "fails"
        assert row["goodput"] == chat["goodput"] and row["slo_fraction_low"] is None
    assert [line.split(":")[0] for line in said if " classes: " in line] == ["step 0 classes", "step 1 classes"]


def test_the_search_names_the_binding_class_in_its_line_its_file_and_the_report(
    class_sweep: tuple[Path, list[str], list[dict]],
) -> None:
    out, said, _ = class_sweep
    search = json.loads((rates_dir(out) / "sweep.json").read_text())["search"]
    assert search["binding"] == {"class": "long", "rate": 80.0, "slo_fraction": 0.0, "limit": "tpot"}
    assert said[-1].startswith("search: highest rate with every class in its SLO: no rate shown to meet it; binding: "
                               "long (TPOT p90); Showing 90 % takes at least 36 steady requests")  # fmt: skip
    assert search["too_few"] == [80.0, 160.0]  # each class held about 12 of them a step
    sweep = load_rate_sweep(out)  # the readers behind the notebooks and reports take a class sweep as it is
    assert CLASS_COLUMN in sweep.records and list(sweep.steps["classes"].map(len)) == [2, 2]
    report = rate_markdown(sweep.steps, sweep.level, sweep.search, 0.1)
    assert "Binding class: long (TPOT p90)." in report
    # the report's and notebooks' table of the classes: a row per step and class, from the steps' own figures
    table = classes_table(sweep.steps)
    assert table is not None and list(table["Class"]) == ["chat", "long", "chat", "long"]
    assert list(table["Verdict"]) == [r["classes"][n]["slo_verdict"] for r in read_steps(out) for n in ("chat", "long")]
    assert list(table["Verdict"])[1::2] == ["fails", "fails"] and table["Share (weight)"].str.endswith("(50.0%)").all()
    assert markdown_table(table) in report and CLASSES_CAPTION in report
    with_levels = rate_markdown(sweep.steps, sweep.level, sweep.search, 0.1, classes=sweep.sweep["classes"])
    assert ("Service level: each class its own (chat: end-to-end ≤ 5000 ms, for 90 % of its requests; long: TPOT "
            "≤ 1 ms, for 90 % of its requests).") in with_levels  # fmt: skip
    html = rate_views.steps(sweep).data  # type: ignore[union-attr]
    assert html.count("<tr>") > 4 and " >long</td>" in html and "steps, class by class" in html
    assert classes_table(sweep.steps.drop(columns="classes")) is None  # another sweep: no such table


def test_the_sweeps_seed_draws_its_classes(server: FaultServer, tmp_path: Path) -> None:
    params = make_rate_params({"base_url": server.base_url, "rates": [100], "requests_per_step": 20,
                               "classes": CLASSES, "seed": 5, "results_dir": str(tmp_path / "run")})  # fmt: skip
    drawn = list(read_records(run_rates(params, say=lambda _: None)).sort_values("request")[CLASS_COLUMN])
    names = [CLASSES[i]["name"] for i in draw_classes(parse_classes(CLASSES), 20, class_rng(5, 0))]
    assert drawn == names and len(set(names)) == 2


def test_a_class_names_its_model_and_one_the_server_does_not_serve_is_refused_before_sending(
    server: FaultServer, tmp_path: Path
) -> None:
    """A class's `model` (e.g. a LoRA adapter on the sweep's base model) goes in each of its request bodies; a model
    missing from /v1/models is one line naming the class, and nothing is sent."""
    values = {"base_url": server.base_url, "rates": [100], "requests_per_step": 10, "seed": 5}
    named = [{**CLASSES[0], "model": MODEL}, CLASSES[1]]
    run_rates(make_rate_params({**values, "classes": named, "results_dir": str(tmp_path / "ok")}), say=lambda _: None)
    sent = server.completion_requests()
    assert len(sent) == 10 and {e["model"] for e in sent} == {MODEL}
    unserved = [{**CLASSES[0], "model": "tiny-lora"}, CLASSES[1]]
    params = make_rate_params({**values, "classes": unserved, "results_dir": str(tmp_path / "refused")})
    with pytest.raises(ParamsError, match=rf"^classes\.chat\.model: 'tiny-lora' is not served by "
                                          rf"{re.escape(server.base_url)}; served: {MODEL}$"):  # fmt: skip
        run_rates(params, say=lambda _: None)
    assert len(server.completion_requests()) == 10


def test_the_gate_judges_a_class_sweep_against_its_copy_class_by_class_and_never_fails(
    class_sweep: tuple[Path, list[str], list[dict]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A measured class sweep gated against its copy: the totals and each class's goodput and highest rate meeting
    its own SLO, named; none fails (measured apart without an allowance: inconclusive, exit 3)."""
    out, _, _ = class_sweep
    again = shutil.copytree(out, tmp_path / "again")
    assert main(["gate", str(out), str(again), "--max-regression", "5%"]) == 3
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(":")[0] for x in lines] == [
        "INCONCLUSIVE goodput", "INCONCLUSIVE goodput[chat]", "INCONCLUSIVE goodput[long]",
        "INCONCLUSIVE highest rate meeting the SLO", "INCONCLUSIVE highest rate meeting the SLO[chat]",
        "INCONCLUSIVE highest rate meeting the SLO[long]",
    ]  # fmt: skip
    # chat met its level in every request: its goodput ratio is 1; long met none (no log ratio at any rate)
    assert lines[1].startswith("INCONCLUSIVE goodput[chat]: 1.000× [") and "over 2 common rates" in lines[1]
    assert lines[2] == ("INCONCLUSIVE goodput[long]: — (no common rate where both sides' goodput is above 0), "
                        "allowed −5 %")  # fmt: skip
    assert lines[5].endswith("candidate: bracket open below: no rate shown to meet long's SLO), allowed −5 %")
