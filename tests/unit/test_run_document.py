"""run.json as a typed document: facts stored, the report's Run block computed when shown, older files unchanged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from toolkit.base.errors import ResultsError
from toolkit.matrix import environment
from toolkit.matrix.discovery import ServerInfo
from toolkit.params import make_params
from toolkit.results.imported_reports import import_report_file
from toolkit.results.run_document import RunDocument
from toolkit.results.runs import load_run
from toolkit.results.store import RUN_FILE, StoreError

REPORTS = Path(__file__).resolve().parents[1] / "fixtures" / "reference-reports"
SERVER = ServerInfo("http://127.0.0.1:8000", "m", 4096, "0.10", None, "none", None, None, True)

# run.json as the toolkit wrote it before RunDocument: the Run block stored as display strings.
EARLIER = {
    "run_id": "0a1b2c3d", "run_label": "demo", "title": "m on embedded CPU vLLM",
    "hardware": {"GPU": "none", "OS": "linux"}, "engine": {"Engine": "vllm", "Version": "0.10"},
    "run": {"Served model": "m", "Benchmark tool": "toolkit v0.1.0", "Server": "found running at http://h:1",
            "Decode test": "Fixed duration", "Prefill mode": "Measured during decode warm-up",
            "Time per measurement": "30 s", "Max output": "4,096 tokens"},
    "launch_command": "", "launch": {"launched_by_toolkit": False}, "params": {"duration_s": 30.0},
    "fingerprint": {"duration_s": 30.0}, "server": {"model": "m"}, "environment": {"toolkit_version": "0.1.0"},
    "started_at": "2026-01-01T00:00:00+00:00", "source": "toolkit", "overhead": {"cells": 3},
    "a_field_of_a_later_version": [1, 2],
}  # fmt: skip


def measured(monkeypatch: pytest.MonkeyPatch, **params: Any) -> RunDocument:
    monkeypatch.setattr(
        environment, "environment_info", lambda: {"toolkit_version": "9.9", "machine": {}, "gpus": {"devices": []}}
    )
    monkeypatch.setattr(environment, "served_here", lambda base_url, launched: False)
    return environment.run_info(make_params(params), SERVER, "run1", None, prefill_in_warmup=False)


def test_a_measured_run_stores_facts_and_shows_the_run_block_as_before(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    document = measured(monkeypatch, duration_s=2.5, max_output=1024, revision="main", base_url="http://h:1")
    document.save(tmp_path)
    stored = json.loads((tmp_path / RUN_FILE).read_text())
    assert "run" not in stored and stored["prefill_in_warmup"] is False and stored["params"]["duration_s"] == 2.5
    assert load_run(tmp_path)[1]["run"] == {
        "Served model": "m", "Revision": "main", "Benchmark tool": "toolkit v9.9",
        "Server": "found running at http://h:1", "Decode test": "Fixed duration",
        "Prefill mode": "Cold request per context, before the decode cells", "Time per measurement": "2.5 s",
        "Max output": "1,024 tokens",
    }  # fmt: skip
    launched = document.model_copy(update={"launch": {"launched_by_toolkit": True}})
    assert launched.run_block()["Server"] == "launched by the toolkit"


def test_an_earlier_run_json_loads_shows_and_saves_back_with_every_field_as_version_1(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text(json.dumps(EARLIER))
    document = RunDocument.load(tmp_path)
    assert document.run_block() == EARLIER["run"] and document.overhead == {"cells": 3}
    assert load_run(tmp_path)[1] == EARLIER
    document.save(tmp_path / "again")
    assert "schema_version" not in EARLIER  # written before documents were stamped: read as version 1
    assert json.loads((tmp_path / "again" / RUN_FILE).read_text()) == {"schema_version": 1, **EARLIER}


@pytest.mark.parametrize("name", sorted(p.name for p in REPORTS.glob("*.txt")))
def test_an_imported_report_keeps_its_blocks_as_printed(name: str, tmp_path: Path) -> None:
    info = {**import_report_file(REPORTS / name).run_info, "source_file": name}
    RunDocument.model_validate(info).save(tmp_path)
    assert json.loads((tmp_path / RUN_FILE).read_text()) == {"schema_version": 1, **info}
    assert RunDocument.load(tmp_path).shown() == info


def test_a_run_json_that_is_not_a_document_is_a_value_error(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text(json.dumps({"hardware": ["not", "a", "block"]}))
    with pytest.raises(ValueError, match="hardware"):
        RunDocument.load(tmp_path)


@pytest.mark.parametrize(("held", "field"), [({"hardware": ["not", "a", "block"]}, "hardware"),
                                             ({"server": {"max_model_len": "lots"}}, "server.max_model_len"),
                                             ({"launch": 5}, "launch")])  # fmt: skip
def test_a_run_json_field_of_another_type_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path, held: dict[str, object], field: str
) -> None:
    (tmp_path / RUN_FILE).write_text(json.dumps(held))
    with pytest.raises(ResultsError) as raised:
        RunDocument.load(tmp_path)
    assert str(raised.value).startswith(f"{tmp_path / RUN_FILE}: {field}: ") and "\n" not in str(raised.value)


def test_a_document_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match=r"^out: cannot write "):
        RunDocument(run_label="x").save(tmp_path / "file")


def test_a_servers_control_characters_are_not_stored(tmp_path: Path) -> None:
    server = ServerInfo("http://127.0.0.1:8000", "m\x1b[31m<b>\x07", 4096, "0.1\x9b", None, "none", None, None, True,
                        models=[{"id": "m\x1b[31m<b>\x07"}])  # fmt: skip
    doc = environment.run_info(make_params({"base_url": server.base_url}), server, "r1", None)
    doc.save(tmp_path)
    text = (tmp_path / RUN_FILE).read_text()
    assert "\\u001b" not in text and "\\u0007" not in text and "\\u009b" not in text
    assert RunDocument.load(tmp_path).server == {**doc.to_json()["server"]} and '"m[31m<b>"' in text


def test_a_process_parses_an_unchanged_run_json_once_and_a_rewritten_one_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """load after load or save is a copy of what this process last read or wrote while the file is unchanged; a file
    replaced by another writer (a new inode) is read again; a copy changed by its caller changes nothing held."""
    from toolkit.results import run_document

    RunDocument.model_validate(EARLIER).save(tmp_path)
    reads: list[Path] = []
    real = run_document.read_json
    monkeypatch.setattr(run_document, "read_json", lambda path: reads.append(path) or real(path))
    first = RunDocument.load(tmp_path)
    first.run_label = "changed by its caller"
    again = RunDocument.load(tmp_path)
    assert reads == [] and again.run_label == "demo"  # the save's document: nothing parsed, the caller's edit apart
    assert again.to_json() == json.loads((tmp_path / RUN_FILE).read_text())  # what the file holds, stamp and all

    (tmp_path / RUN_FILE).unlink()  # another writer's atomic replace: a new file at the same path
    (tmp_path / RUN_FILE).write_text(json.dumps({**EARLIER, "run_label": "rewritten"}))
    assert RunDocument.load(tmp_path).run_label == "rewritten" and len(reads) == 1
    assert RunDocument.load(tmp_path).run_label == "rewritten" and len(reads) == 1  # held again
