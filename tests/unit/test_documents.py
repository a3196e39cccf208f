"""sweep.json, server.json and batch.json as typed documents: each written by the toolkit's own writer reads back
and writes back unchanged; an older file (no schema_version) reads; a newer or damaged one is one line naming it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from toolkit.base.errors import RateSweepError, ResultsError
from toolkit.batch.state import BatchState
from toolkit.rates.files import read_sweep, update_sweep, write_sweep
from toolkit.results.documents.base import Document
from toolkit.results.documents.batch import BATCH_FILE, BatchDocument
from toolkit.results.documents.server import LAUNCH_FILE, ServerRecord, read_server_record
from toolkit.results.documents.sweep import SWEEP_FILE, SweepDocument
from toolkit.servers import launch

FIXTURES = Path(__file__).parents[1] / "fixtures"


def _sweep(out: Path) -> Path:
    write_sweep(out, {"model": "m", "rates": [1, 2.5, "inf"], "classes": ({"name": "chat", "priority": 0},),
                      "search": False, "goodput_target": 0.99, "steady_trim": 0.1, "results_dir": out})  # fmt: skip
    update_sweep(out, search={"highest_rate": 2.5, "bracket": [2.5, None], "undecided": []})
    return out / "rates" / SWEEP_FILE


def _server(out: Path) -> Path:
    launch._update_record(out, launched_by="toolkit", command="vllm serve m", pid=None, exit_code=None)
    launch._update_record(out, pid=4321, started_at="2026-01-01T00:00:00+00:00", startup_s=21.5)
    launch._update_record(out, engine={"version": "0.32.0", "commit": None, "build": "cpu"})
    return out / LAUNCH_FILE


def _batch(out: Path) -> Path:
    state = BatchState(out, ["a", "b"], "sweep.yaml", None)
    state.update("a", state="done", duration_s=3.25)
    state.set(compare={"state": "done", "labels": ["a", "b"]})
    return out / BATCH_FILE


WRITERS: list[tuple[type[Document], Callable[[Path], Path]]] = [
    (SweepDocument, _sweep),
    (ServerRecord, _server),
    (BatchDocument, _batch),
]


@pytest.mark.parametrize(("model", "write"), WRITERS)
def test_a_file_the_toolkit_writes_reads_back_and_writes_back_unchanged(
    tmp_path: Path, model: type[Document], write: Callable[[Path], Path]
) -> None:
    path = write(tmp_path)
    text = path.read_text()
    document = model.read(path)
    assert document.as_dict() == json.loads(text) and document.schema_version == 1
    again = tmp_path / "again" / path.name
    document.write(again)
    assert again.read_text() == text  # every field, in the file's order


def test_each_writer_fills_the_typed_fields_its_readers_use(tmp_path: Path) -> None:
    sweep = read_sweep(_sweep(tmp_path).parents[1])
    assert sweep.rates == [1, 2.5, "inf"] and isinstance(sweep.rates[0], int)  # a number stays as written
    assert sweep.search_result == {"highest_rate": 2.5, "bracket": [2.5, None], "undecided": []}
    assert sweep.classes == [{"name": "chat", "priority": 0}] and sweep["results_dir"] == str(tmp_path)
    _server(tmp_path)
    record = read_server_record(tmp_path)
    assert record is not None and (record.pid, record.startup_s, record.exit_code) == (4321, 21.5, None)
    assert record.engine == {"version": "0.32.0", "commit": None, "build": "cpu"} and "log_tail" not in record
    batch = BatchDocument.read(_batch(tmp_path))
    assert batch.labels == ["a", "b"] and batch.variants == {"a": {"state": "done", "duration_s": 3.25},
                                                            "b": {"state": "pending"}}  # fmt: skip
    assert batch.compare == {"state": "done", "labels": ["a", "b"]}


def test_a_fixture_sweep_of_an_earlier_run_writes_back_byte_for_byte(tmp_path: Path) -> None:
    path = FIXTURES / "peers" / "toolkit-4rps" / "rates" / SWEEP_FILE
    document = SweepDocument.read(path)
    assert (document.model, document.rates, document.search, document.search_result) == ("tiny-llama", [4.0], False,
                                                                                         None)  # fmt: skip
    document.write(tmp_path / SWEEP_FILE)
    assert (tmp_path / SWEEP_FILE).read_text() == path.read_text()


@pytest.mark.parametrize(("model", "write"), WRITERS)
def test_a_file_written_before_stamping_reads_and_is_stamped_when_written_again(
    tmp_path: Path, model: type[Document], write: Callable[[Path], Path]
) -> None:
    path = write(tmp_path)
    older = {k: v for k, v in json.loads(path.read_text()).items() if k != "schema_version"}
    path.write_text(json.dumps({**older, "a_field_of_an_earlier_version": [1, 2]}))
    document = model.read(path)
    assert document.schema_version is None and document["a_field_of_an_earlier_version"] == [1, 2]
    document.write(path)
    assert json.loads(path.read_text()) == {"schema_version": 1, **older, "a_field_of_an_earlier_version": [1, 2]}


@pytest.mark.parametrize(("model", "write"), WRITERS)
def test_a_newer_file_is_one_line_naming_it(
    tmp_path: Path, model: type[Document], write: Callable[[Path], Path]
) -> None:
    path = write(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 99}))
    with pytest.raises(model.error) as caught:
        model.read(path)
    assert str(caught.value) == (f"{path}: schema_version 99 is newer than this toolkit reads (up to 1); "
                                 "upgrade vllm-speedtest to read it")  # fmt: skip


@pytest.mark.parametrize(("model", "write"), WRITERS)
@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda text: text[: len(text) // 2], r": not a JSON document \(.*\); the file is damaged$"),
        (lambda text: "[1, 2]", r": not a JSON object but list; not a toolkit document$"),
    ],
)
def test_a_damaged_file_is_one_line_naming_it(
    tmp_path: Path, model: type[Document], write: Callable[[Path], Path], damage: Callable[[str], str], message: str
) -> None:
    path = write(tmp_path)
    path.write_text(damage(path.read_text()))
    with pytest.raises(model.error, match=f"^{path}{message}") as caught:
        model.read(path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("model", "write", "field", "value"),
    [
        (SweepDocument, _sweep, "rates", "1,2"),
        (ServerRecord, _server, "pid", "not a pid"),
        (BatchDocument, _batch, "labels", {"a": 1}),
    ],
)
def test_a_field_of_another_type_is_one_line_naming_the_file_and_the_field(
    tmp_path: Path, model: type[Document], write: Callable[[Path], Path], field: str, value: object
) -> None:
    path = write(tmp_path)
    path.write_text(json.dumps({**json.loads(path.read_text()), field: value}))
    with pytest.raises(model.error, match=rf"^{path}: {field}: ") as caught:
        model.read(path)
    assert "\n" not in str(caught.value)


def test_each_document_says_so_with_its_own_error(tmp_path: Path) -> None:
    """A sweep's problems are RateSweepError (a ResultsError), as load_rate_sweep has always raised; a missing
    sweep.json is named, a missing server.json is no launch."""
    assert SweepDocument.error is RateSweepError and ServerRecord.error is BatchDocument.error is ResultsError
    with pytest.raises(RateSweepError, match=r"sweep\.json: missing; not a rate sweep folder$"):
        read_sweep(tmp_path)
    assert read_server_record(tmp_path) is None
