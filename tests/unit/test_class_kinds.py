"""A traffic class's own request kinds (response format, tools, images): read and checked as the sweep's, the
sweep's where it gives none, each rule a one-line error, and each class's valid share in its step's figures."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from toolkit.method.goodput import CLASS_COLUMN, complete_records
from toolkit.params import ParamsError
from toolkit.rates.cli import classes_table as classes_table_lines
from toolkit.rates.params import make_rate_params
from toolkit.rates.request_kinds import RequestKinds
from toolkit.rates.step import carrying, step_classes
from toolkit.reports.class_tables import classes_table

A = {"name": "a", "weight": 1, "input_tokens": 16, "output_tokens": 8, "slo_ttft_ms": 500}
B = {"name": "b", "weight": 1, "input_tokens": 16, "output_tokens": 8, "slo_ttft_ms": 500}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "schema.json").write_text(json.dumps(SCHEMA))
    (tmp_path / "tools.json").write_text(json.dumps(TOOLS))
    return {"schema": f"json_schema:{tmp_path / 'schema.json'}", "tools": str(tmp_path / "tools.json")}


def test_a_classs_kinds_are_its_own_else_the_sweeps(files: dict[str, str]) -> None:
    params = make_rate_params({"images": 2, "image_size": "32x24", "classes": [
        {**A, "response_format": files["schema"], "images": 0},
        {**B, "images": 1, "image_size": "16x16"},
        {**B, "name": "c"},
    ]})  # fmt: skip
    a, b, c = (params.kinds(cls) for cls in params.classes or [])
    assert a == RequestKinds("chat", files["schema"], images=0, image_size="32x24")
    assert a.request_format() == {"type": "json_schema", "json_schema": {"name": "schema", "schema": SCHEMA}}
    assert b == RequestKinds("chat", images=1, image_size="16x16") and b.image_dimensions() == (16, 16)
    assert c == params.kinds() == RequestKinds("chat", images=2, image_size="32x24")
    tooled = make_rate_params({"tools": files["tools"], "classes": [{**A, "tool_choice": "f"}, B]})
    assert [tooled.kinds(cls).request_tools() for cls in tooled.classes or []] == [
        (TOOLS, {"type": "function", "function": {"name": "f"}}), (TOOLS, "required")]  # fmt: skip


def test_sweep_json_holds_a_classs_kinds_only_where_it_gives_them(files: dict[str, str]) -> None:
    params = make_rate_params({"classes": [{**A, "response_format": "json_object"}, B]})
    written = params.public()["classes"]
    assert written[0]["response_format"] == "json_object" and "images" not in written[0]
    assert not {"response_format", "tools", "tool_choice", "images", "image_size"} & set(written[1])
    assert make_rate_params({"classes": written}).classes == params.classes  # reads back the same


@pytest.mark.parametrize(("classes", "sweep", "said"), [
    ([{**A, "tools": "TOOLS", "endpoint": "completions"}], {},
     "rate_sweep: classes.a: endpoint completions takes no tools (chat only); give it endpoint chat, or no tools"),
    ([{**A, "tools": "TOOLS"}], {"endpoint": "completions"}, "rate_sweep: classes.a: endpoint completions takes no "
     "tools"),
    ([{**A, "images": 1, "endpoint": "completions"}], {}, "rate_sweep: classes.a: endpoint completions takes no "
     "images (chat only); give it endpoint chat, or no images"),
    ([{**A, "images": 1}], {"endpoint": "completions"}, "rate_sweep: classes.a: endpoint completions takes no images"),
    ([{**A, "tool_choice": "auto"}], {}, "rate_sweep: classes.a.tool_choice: needs tools (a JSON file of function "
     "tools: the class's or the sweep's)"),
    ([{**A, "tools": "TOOLS", "tool_choice": "g"}], {}, "rate_sweep: classes.a.tool_choice: 'g' is neither auto, "
     "required, none nor a function of the tools (f)"),
    ([{**A, "image_size": "64x64"}], {}, "rate_sweep: classes.a.image_size: needs images (how many each of its "
     "requests carries)"),
    ([{**A, "images": 0, "image_size": "64x64"}], {"images": 1}, "rate_sweep: classes.a.image_size: needs images"),
    ([{**A, "tools": "TOOLS"}], {"response_format": "json_object"}, "rate_sweep: classes.a: tools and "
     "response_format: give one of them, not both"),
    ([{**A, "response_format": "xml"}], {}, "rate_sweep.classes.a.response_format: unknown kind; allowed: "
     "json_object, or json_schema:FILE"),
    ([{**A, "tools": "missing.json"}], {}, "rate_sweep.classes.a.tools: cannot read the tools file"),
    ([{**A, "images": 1, "image_size": "64"}], {}, "rate_sweep.classes.a.image_size: '64' is not an image size"),
    ([{**A, "images": 65}], {}, "rate_sweep.classes.a.images: Input should be less than or equal to 64"),
])  # fmt: skip
def test_a_classs_kinds_break_the_sweeps_rules_in_one_line(
    files: dict[str, str], classes: list[dict], sweep: dict, said: str
) -> None:
    classes = [{k: files["tools"] if v == "TOOLS" else v for k, v in c.items()} for c in classes]
    with pytest.raises(ParamsError) as caught:
        make_rate_params({"classes": classes, **sweep}, "rate_sweep.")
    line = str(caught.value)
    assert "\n" not in line and line.startswith(said), line


def test_a_class_may_send_no_images_where_the_sweeps_requests_carry_them() -> None:
    params = make_rate_params({"images": 1, "classes": [{**A, "images": 0, "endpoint": "completions"}, B]})
    assert [params.kinds(c).images for c in params.classes or []] == [0, 1]


def test_each_classs_valid_share_is_of_its_own_replies(files: dict[str, str]) -> None:
    """Class a carries a schema (3 of its 4 replies keep to it), class b images and no format: a's share is of a's
    replies, b has none, and the step's is of the replies that carried the format."""
    params = make_rate_params({"classes": [{**A, "response_format": files["schema"]}, {**B, "images": 1}]})
    valid = [True, None, False, None, True, None, True, None]  # requests 0, 2, 4, 6: class a
    rows = [{"step": 0, "offered_rate": 1.0, "request": i, "scheduled_s": i, "sent_s": i, "first_token_s": i + 0.1,
             "last_token_s": i + 0.2, "chunk_times_s": [i + 0.1, i + 0.2], "input_tokens": 16, "output_tokens": 2,
             "error": None, "schema_valid": v, "images": 0 if i % 2 == 0 else 1, CLASS_COLUMN: "ab"[i % 2]}
            for i, v in enumerate(valid)]  # fmt: skip
    frame = complete_records(pd.DataFrame(rows))
    figures = step_classes(params, frame)
    assert figures["a"]["schema_valid_share"] == 3 / 4 and "schema_valid_share" not in figures["b"]
    structured = carrying(params, frame, "response_format")
    assert structured is not None and list(structured["request"]) == [0, 2, 4, 6]
    assert carrying(params, frame, "tools") is None


def figures(**extra: float) -> dict:
    """A class's figures in a step's row, as toolkit.method.class_figures writes them."""
    return {"requests": 4, "completed": 4, "share": 0.5, "share_low": 0.1, "share_high": 0.9, "weight_share": 0.5,
            "ttft_sched_p90_ms": 120.0, "tpot_p90_ms": 8.0, "goodput": 2.0, "slo_fraction": 1.0,
            "slo_fraction_low": 0.4, "slo_fraction_high": 1.0, "slo_verdict": "undecided", **extra}  # fmt: skip


def test_the_class_table_shows_each_classs_shares_only_where_some_class_has_them() -> None:
    """The notebooks' and report's table of a class sweep: each class's valid and tool shares beside its figures
    (— for a class whose requests carried none); a sweep whose classes carried none: the table as before."""
    plain = pd.DataFrame([{"step": 0, "classes": {"a": figures(), "b": figures()}}])
    table = classes_table(plain)
    assert table is not None and list(table.columns) == ["Step", "Class", "Share (weight)", "Completed", "TTFT p90",
                                                         "TPOT p90", "Goodput req/s", "Meets its SLO",
                                                         "Verdict"]  # fmt: skip
    assert list(table.iloc[0]) == ["0", "a", "50.0% [10.0%, 90.0%] (50.0%)", "4/4", "120 ms", "8.0 ms", "2.00",
                                   "100.0% [40.0%, 100.0%]", "undecided"]  # fmt: skip
    shaped = {"a": figures(schema_valid_share=0.75), "b": figures(tool_called_share=1.0, tool_args_valid_share=0.5)}
    shown = classes_table(pd.DataFrame([{"step": 0, "classes": shaped}]))
    assert shown is not None and list(shown.columns) == [*table.columns, "Valid replies", "Tool called",
                                                         "Tool arguments valid"]  # fmt: skip
    assert [list(row[-3:]) for _, row in shown.iterrows()] == [["75.0%", "—", "—"], ["—", "100.0%", "50.0%"]]
    assert shown.iloc[:, :-3].equals(table)  # the rest as before


def test_the_terminal_table_gives_each_classs_valid_and_tool_shares_where_it_has_them() -> None:
    """`toolkit rates`' class table: a class with a response format ends its line with its valid share, one with
    tools with its tool-calling share, one with neither with its verdict (as before)."""
    figures = {"requests": 4, "completed": 4, "share": 0.5, "ttft_sched_p90_ms": 10.0, "tpot_p90_ms": 2.0,
               "goodput": 1.0, "slo_fraction": 1.0, "slo_fraction_low": 0.4, "slo_fraction_high": 1.0,
               "slo_verdict": "undecided"}  # fmt: skip
    row = {"step": 0, "classes": {"a": {**figures, "schema_valid_share": 0.75},
                                  "b": {**figures, "tool_called_share": 0.5}, "c": figures}}  # fmt: skip
    a, b, c = classes_table_lines([row])[1:4]
    assert a.endswith("undecided, 75% valid") and b.endswith("undecided, 50% called a tool")
    assert c.endswith("undecided")
