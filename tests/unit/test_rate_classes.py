"""Traffic classes of a rate sweep: parsed, bad input one line, drawn by weight, judged class by class, searched."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest

from toolkit.cli.entry import build_parser
from toolkit.jupyter.rate_notebook import check_rate_sweep, rate_arguments, run_sweep_parameters
from toolkit.method.class_figures import class_figures, mix_total, share_interval
from toolkit.method.goodput import CLASS_COLUMN, RECORD_COLUMNS, ServiceLevel, complete_records, summarize_step
from toolkit.params import ParamsError, make_params
from toolkit.rates.classes import TrafficClass, class_rng, draw_classes, parse_classes
from toolkit.rates.cli import params_from_args, summary_table
from toolkit.rates.files import step_line
from toolkit.rates.lengths import check_lengths
from toolkit.rates.params import Lengths, RateParams, load_rate_params, make_rate_params
from toolkit.rates.search import binding_class, next_probe, rate_verdicts, search_result
from toolkit.reports.rate_tables import binding_text, search_line
from toolkit.results.step_row import StepRow, validated_step
from toolkit.servers.embedded.server import ServerConfig, launch_command

CHAT = {"name": "chat", "weight": 3, "input_tokens": 64, "output_tokens": 16, "slo_ttft_ms": 200, "priority": 0}
RAG = {"name": "rag", "weight": 1, "input_tokens": "uniform:1000:2000", "output_tokens": 64, "slo_ttft_ms": 2000,
       "slo_tpot_ms": 100, "priority": 5}  # fmt: skip


def test_classes_parse_from_a_list_a_file_and_the_command_line(tmp_path: Path) -> None:
    params = make_rate_params({"classes": [CHAT, RAG], "search": True})
    assert [c.name for c in params.classes or []] == ["chat", "rag"]
    rag = (params.classes or [])[1]
    assert rag.input_tokens == Lengths(dist="uniform", min=1000, max=2000) and rag.priority == 5
    assert rag.service_level(0.9) == ServiceLevel(2000, 100, None, 0.9)
    assert params.public()["classes"][0] == {**CHAT, "weight": 3.0, "slo_tpot_ms": None, "slo_e2e_ms": None,
                                             "model": None, "endpoint": None}  # fmt: skip
    listed, mapped = tmp_path / "listed.yaml", tmp_path / "mapped.yaml"
    listed.write_text(json.dumps([CHAT, RAG]))  # JSON is YAML
    mapped.write_text(json.dumps({"classes": [CHAT, RAG]}))
    assert make_rate_params({"classes": str(listed)}).classes == params.classes
    args = build_parser().parse_args(["rates", "--base-url", "http://h:1", "--classes", str(mapped)])
    assert params_from_args(args).classes == params.classes
    run_file = tmp_path / "run.yaml"
    run_file.write_text(json.dumps({"base_url": "http://h:1", "rate_sweep": {"rates": [1], "classes": [CHAT, RAG]}}))
    assert load_rate_params(run_file).classes == params.classes


@pytest.mark.parametrize(("classes", "extra", "message"), [
    ([{**CHAT, "weight": "heavy"}], {}, "classes.chat.weight: Input should be a valid number"),
    ([{**CHAT, "weight": 0}], {}, "classes.chat.weight: Input should be greater than 0"),
    ([{**CHAT, "weight": -1}], {}, "classes.chat.weight: Input should be greater than 0"),
    ([{**CHAT, "weight": True}], {}, "classes.chat.weight: is true or false"),
    ([{**CHAT, "weight": 1e308}, {**RAG, "weight": 1e308}], {}, "classes: the weights sum to inf"),
    ([CHAT, {**RAG, "name": "chat"}], {}, "classes.chat: a second class of that name"),
    ([{**CHAT, "colour": "red"}], {}, "classes.chat.colour: unknown parameter; allowed: name, weight"),
    ([{k: v for k, v in CHAT.items() if k != "name"}], {}, "classes.0.name: required"),
    ([{**CHAT, "name": "a b"}], {}, "classes.a b.name: String should match pattern"),
    ([{**CHAT, "input_tokens": "normal:1"}], {}, "classes.chat.input_tokens: 'normal:1' is not a token count"),
    ([{**CHAT, "priority": 1.5}], {}, "classes.chat.priority: Input should be a valid integer"),
    ([{**CHAT, "slo_ttft_ms": 0}], {}, "classes.chat.slo_ttft_ms: Input should be greater than 0"),
    ([], {}, "classes: must be a list of classes"),
    ("missing.yaml", {}, "rate_sweep.classes: cannot read missing.yaml: No such file or directory"),
    ([7], {}, "classes.0: must be a mapping"),
    ([{k: v for k, v in CHAT.items() if not k.startswith("slo")}, RAG], {"search": True},
     "rate_sweep: classes.chat: no service level; the search needs slo_ttft_ms, slo_tpot_ms or slo_e2e_ms in every"),
    ([CHAT], {"dataset": "d.jsonl"}, "rate_sweep: classes.chat.input_tokens: not with a dataset"),
    ([CHAT], {"replay": "r.json"}, "rate_sweep: replay: not with classes"),
    ([CHAT], {"trace": "t.jsonl", "trace_format": "mooncake"}, "rate_sweep: trace: not with classes"),
    ([CHAT], {"workload": "conversation", "turns": 2}, "rate_sweep: workload: not with classes"),
    ([CHAT], {"endpoint": "embeddings"}, "rate_sweep: classes: not with endpoint embeddings"),
    ([{**CHAT, "endpoint": "embeddings"}], {}, "classes.chat.endpoint: Input should be 'chat' or 'completions'"),
    ([CHAT], {"input_tokens": 64}, "rate_sweep: input_tokens: with classes, each class has its own"),
    ([CHAT], {"slo_e2e_ms": 900}, "rate_sweep: slo_e2e_ms: with classes, each class has its own"),
])  # fmt: skip
def test_bad_classes_are_one_line_naming_them(classes: object, extra: dict, message: str) -> None:
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"classes": classes, **extra}, "rate_sweep.")
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_a_class_sent_to_completions_takes_no_tools(tmp_path: Path) -> None:
    """A class may send to the completions endpoint where the sweep's is chat, but not with the sweep's tools."""
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]))
    plain = {**CHAT, "endpoint": "completions"}
    assert [c.endpoint for c in make_rate_params({"classes": [plain, RAG]}).classes or []] == ["completions", None]
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"classes": [plain, RAG], "tools": str(tools)}, "rate_sweep.")
    assert str(caught.value) == ("rate_sweep: classes.chat: endpoint completions takes no tools (chat only); give it "
                                 "endpoint chat, or no tools")  # fmt: skip


def test_a_classes_file_holds_a_list_or_a_mapping_of_only_classes(tmp_path: Path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text("classes: []\nrates: [1]\n")
    with pytest.raises(ParamsError, match=r"^classes: .* must hold a list of classes, or a mapping with only"):
        parse_classes(str(other))
    other.write_text("classes: [\n")
    with pytest.raises(ParamsError, match=r"^classes: .* is not valid YAML"):
        parse_classes(str(other))


def test_each_classs_requests_fit_the_servers_context() -> None:
    params = make_rate_params({"classes": [CHAT, RAG]})
    check_lengths(params, 4096)
    with pytest.raises(ParamsError, match=r"^classes.rag: input_tokens \+ output_tokens: up to 2,064 tokens, over"):
        check_lengths(params, 2048)


def test_the_draw_repeats_with_its_seed_and_its_shares_hold_the_weights() -> None:
    classes = parse_classes([CHAT, RAG, {**CHAT, "name": "batch", "weight": 0.5}])
    first = draw_classes(classes, 2000, class_rng(7, 3))
    assert first == draw_classes(classes, 2000, class_rng(7, 3))  # the same seed and step: the same classes
    assert first != draw_classes(classes, 2000, class_rng(8, 3)) != draw_classes(classes, 2000, class_rng(7, 4))
    for index, weight in enumerate((3, 1, 0.5)):
        low, high = share_interval(first.count(index), len(first))
        assert low <= weight / 4.5 <= high
        assert high - low < 0.05  # 2,000 draws pin a share to within a few points


def record(i: int, cls: str, *, ttft: float, gap: float = 0.01, tokens: int = 11) -> dict:
    sent = 0.05 * i
    chunks = [sent + ttft + k * gap for k in range(tokens)]
    return {"step": 0, "offered_rate": 20.0, "request": i, "scheduled_s": sent, "sent_s": sent,
            "first_token_s": chunks[0], "last_token_s": chunks[-1], "chunk_times_s": chunks, "input_tokens": 64,
            "output_tokens": tokens, "error": None, CLASS_COLUMN: cls}  # fmt: skip


def two_classes() -> pd.DataFrame:
    """200 requests, every fourth a slow "rag" one (TTFT 900 ms): "chat" (TTFT 50 ms) meets 200 ms, rag misses."""
    jitter = np.random.default_rng(0).uniform(0, 0.001, 200)  # latencies that vary, as measured ones do
    rows = [record(i, "rag", ttft=0.9 + jitter[i]) if i % 4 == 0 else record(i, "chat", ttft=0.05 + jitter[i])
            for i in range(200)]  # fmt: skip
    return complete_records(pd.DataFrame(rows))


def test_each_class_is_judged_against_its_own_level() -> None:
    records = two_classes()
    assert list(records.columns) == [*RECORD_COLUMNS, CLASS_COLUMN]  # kept beside the record columns
    levels = {"chat": ServiceLevel(ttft_ms=200, target=0.9), "rag": ServiceLevel(ttft_ms=500, tpot_ms=50, target=0.9)}
    figures = class_figures(records, levels, {"chat": 3, "rag": 1})
    chat, rag = figures["chat"], figures["rag"]
    assert (chat["requests"], rag["requests"]) == (150, 50) and chat["share"] == 0.75 and rag["weight_share"] == 0.25
    assert rag["share_low"] < 0.25 < rag["share_high"]
    assert chat["slo_fraction"] == 1.0 and chat["slo_verdict"] == "meets" and chat["slo_fraction_low"] > 0.9
    assert rag["slo_fraction"] == 0.0 and rag["slo_verdict"] == "fails" and rag["goodput"] == 0.0
    assert rag["limit_fractions"] == {"ttft": 0.0, "tpot": 1.0} and chat["limit_fractions"] == {"ttft": 1.0}
    assert rag["ttft_sched_p50_ms"] == pytest.approx(900, abs=1)
    assert chat["ttft_sched_p90_ms"] == pytest.approx(50, abs=1)
    assert not any(key.startswith("lag_") for key in chat)
    whole = summarize_step(records, ServiceLevel(), 0.1)
    assert chat["steady_requests"] + rag["steady_requests"] == whole.steady_requests  # the step's steady part
    assert chat["goodput"] + rag["goodput"] == pytest.approx(chat["request_throughput"], rel=0.05)
    # the step's own figures: each request against its own class's level, the verdict only when every class's
    total = mix_total(figures)
    assert total["goodput"] == chat["goodput"] + rag["goodput"] and total["slo_verdict"] == "fails"
    steady = chat["steady_requests"] + rag["steady_requests"]
    assert total["slo_fraction"] == chat["steady_requests"] / steady and total["slo_met"] is False
    assert total["slo_fraction_low"] is None and total["slo_fraction_high"] is None  # each class has its own
    assert mix_total({"chat": chat})["slo_verdict"] == "meets" and mix_total({"chat": chat})["slo_met"] is True


def test_a_class_without_requests_has_figures_and_stays_undecided() -> None:
    figures = class_figures(two_classes(), {"none": ServiceLevel(ttft_ms=1)}, {"none": 1})
    assert figures["none"]["requests"] == 0 and figures["none"]["share"] == 0.0
    assert figures["none"]["slo_verdict"] == "undecided" and figures["none"]["limit_fractions"] == {"ttft": None}


def test_a_step_row_with_classes_is_strict_json_and_reads_back() -> None:
    records = two_classes()
    levels = {"chat": ServiceLevel(ttft_ms=200), "rag": ServiceLevel(ttft_ms=500)}
    row = {"step": 0, "offered_rate": 20.0, "classes": class_figures(records.head(3), levels, {"chat": 1, "rag": 1})}
    line = json.loads(step_line(row))  # a class of too few requests: its missing percentiles null, not NaN
    assert line["classes"]["chat"]["ttft_p99_ms"] is None and line["classes"]["rag"]["requests"] == 1
    validated_step(line, lambda loc: "steps.jsonl:1", StepRow)
    line["classes"]["rag"]["slo_fraction"] = 2
    with pytest.raises(ValueError, match=r"classes\.rag\.slo_fraction"):
        validated_step(line, lambda loc: f"steps.jsonl:1: {'.'.join(map(str, loc))}", StepRow)


def step(rate: float, **fractions: float) -> dict:
    """A class sweep's step: 400 steady requests per class, each class's fraction meeting its level (its TTFT
    limit kept by that many, its TPOT limit by all)."""
    classes = {name: {"requests": 400, "steady_requests": 400, "slo_fraction": f,
                      "limit_fractions": {"ttft": f, "tpot": 1.0}} for name, f in fractions.items()}  # fmt: skip
    return {"offered_rate": rate, "requests": 800, "slo_fraction": 1.0, "request_throughput": 0.0, "classes": classes}


def test_a_rate_meets_only_when_every_class_meets_its_own_level() -> None:
    verdicts = rate_verdicts([step(1, chat=1.0, rag=1.0), step(2, chat=1.0, rag=0.992), step(4, chat=1.0, rag=0.5)],
                             0.99)  # fmt: skip
    assert verdicts == {1: ("meets", 1), 2: ("undecided", 1), 4: ("fails", 1)}


def test_the_search_names_the_binding_class_and_its_limit() -> None:
    steps = [step(1, chat=1.0, rag=1.0), step(1, chat=1.0, rag=1.0), step(4, chat=1.0, rag=0.5),
             step(8, chat=0.3, rag=0.2)]  # fmt: skip
    assert next_probe(steps, 0.1, 0.9) == 2.5  # the bracket [1, 4] bisected as without classes
    result = search_result(steps, 0.9)
    assert result["bracket"] == [1, 4] and result["too_few"] == []  # 400 a class, 800 in the steps
    fewer = [{**s, "classes": {**s["classes"], "rag": {**s["classes"]["rag"], "steady_requests": 20}}} for s in steps]
    assert search_result(fewer, 0.9)["too_few"] == [4, 8]  # rag's 40 at 1 show 0.9; 20 do not
    assert result["binding"] == {"class": "rag", "rate": 4.0, "slo_fraction": 0.5, "limit": "ttft"}
    assert binding_text(result, 0.9) == "rag (TTFT p90)"
    assert "searched: meets at 1.00 req/s, fails at 4.00 req/s" in search_line(pd.DataFrame(), result, None, 0.9)
    assert search_line(pd.DataFrame(), result, None, 0.9).endswith(" Binding class: rag (TTFT p90).")
    tie = [*steps[:2], step(4, chat=0.4, rag=0.5)]  # both fail first at 4: the lower fraction binds
    assert binding_class(tie, 0.9)["class"] == "chat"  # type: ignore[index]
    assert binding_class(steps[:2], 0.9) is None  # nothing failed
    assert "binding" not in search_result([{k: v for k, v in s.items() if k != "classes"} for s in steps], 0.9)


def test_the_summary_table_adds_a_line_per_class_and_step() -> None:
    records = two_classes()
    levels = {"chat": ServiceLevel(ttft_ms=200, target=0.9), "rag": ServiceLevel(ttft_ms=500, target=0.9)}
    row = {**summarize_step(records, ServiceLevel()).row(), "step": 0, "server_waiting_max": 0, "lag_flagged": False,
           "classes": class_figures(records, levels, {"chat": 3, "rag": 1})}  # fmt: skip
    lines = summary_table([row]).splitlines()
    goodput = f"{row['classes']['chat']['goodput']:.2f}"
    assert lines[-3].split() == ["0", "chat", "75%", "150/150", "51.0", "10.0", goodput, "100%", "[0.97,", "1.00]",
                                 "meets"]  # fmt: skip
    assert lines[-2].split()[:3] == ["0", "rag", "25%"] and lines[-2].split()[-1] == "fails"


def test_traffic_classes_are_frozen_and_take_lengths_as_the_sweep_does() -> None:
    cls = TrafficClass(**{**CHAT, "output_tokens": {"dist": "normal", "mean": 16, "std": 4, "min": 1, "max": 64}})
    assert isinstance(cls.output_tokens, Lengths) and cls.has_slo()
    with pytest.raises(ValueError):
        cls.weight = 2  # type: ignore[misc]


def test_the_embedded_server_takes_the_priority_scheduling_policy() -> None:
    """`toolkit serve --scheduling-policy priority` (ServerConfig.scheduling_policy): vLLM then serves each request's
    `priority`, which a class sends; fcfs, vLLM's default, adds no flag."""
    command = launch_command(ServerConfig(scheduling_policy="priority"), 8000, Path("/m"))
    assert command[command.index("--scheduling-policy") + 1] == "priority"
    assert "--scheduling-policy" not in launch_command(ServerConfig(), 8000, Path("/m"))
    with pytest.raises(ParamsError, match=r"^scheduling_policy: 'lifo'; allowed: fcfs, priority$"):
        ServerConfig(scheduling_policy="lifo").check()


def test_a_runs_rate_sweep_block_takes_classes_through_to_the_notebooks_sweep(tmp_path: Path) -> None:
    """`toolkit run` with `rate_sweep: {classes: ...}`: the block is checked at the door, the notebook gets CLASSES
    and no lengths of its own (its defaults, 128 and 64, would be refused beside classes), and the notebook's
    parameters, defaults included, make the sweep (a kernel that failed there once measured the matrix first)."""
    classes = [CHAT, RAG]
    run = make_params({"rate_sweep": {"rates": [1], "requests_per_step": 10, "classes": classes}})
    assert check_rate_sweep(run) is not None
    passed = run_sweep_parameters(run, tmp_path, checked=True)
    assert passed["CLASSES"] == classes and passed["INPUT_TOKENS"] is None and passed["OUTPUT_TOKENS"] is None
    cell = nbformat.read(Path(__file__).parents[2] / "notebooks" / "rate_sweep.ipynb", as_version=4)
    (parameters,) = [c for c in cell.cells if "parameters" in c.metadata.get("tags", [])]
    namespace: dict[str, object] = {}
    exec(parameters.source, namespace)  # the notebook's defaults, then what papermill passes
    assert namespace["INPUT_TOKENS"] == 128 and namespace["CLASSES"] is None
    params = make_rate_params(rate_arguments({**namespace, **passed}, RateParams))
    assert [c.name for c in params.classes or []] == ["chat", "rag"] and params.input_tokens == 128  # unused
