"""run.json's blocks as typed models: a file the toolkit writes, an older one and the committed run folders' save back
byte for byte (every key, in its order); the blocks read by attribute and as the mappings they were."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from toolkit.base.schema import Measurement
from toolkit.matrix import environment
from toolkit.matrix.control import control_block
from toolkit.matrix.discovery import ServerInfo
from toolkit.method.overhead import matrix_overhead
from toolkit.params import CapacityParams, make_params
from toolkit.results.documents.run_blocks import ControlBlock, LaunchBlock, OverheadBlock, ServerBlock
from toolkit.results.run_document import RunDocument
from toolkit.results.store import RUN_FILE

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUN_FOLDERS = sorted(path.parent for path in FIXTURES.rglob(RUN_FILE))
SERVER = ServerInfo("http://127.0.0.1:8000", "m", 4096, "0.10", 16384, "kv_cache_size_tokens", 16, True, True,
                    models=[{"id": "m", "max_model_len": 4096}], cache_config={"block_size": "16"},
                    metrics_endpoints=["http://127.0.0.1:8001/metrics"])  # fmt: skip


def _written(monkeypatch: pytest.MonkeyPatch, out: Path) -> str:
    """run.json as a measured run leaves it: run_info's, then its control, overhead and capacity blocks."""
    machine = {"os": "linux", "kernel": "6.1", "cpu_model": "cpu", "cpu_cores": 2, "cpu_physical_cores": 1,
               "memory_bytes": 2**30}  # fmt: skip
    gpus = {"devices": [{"name": "H100", "memory_bytes": 2**36}], "driver": "550.1", "cuda": "12.4"}
    monkeypatch.setattr(environment, "environment_info", lambda: {"toolkit_version": "9.9", "machine": machine,
                                                                  "gpus": gpus})  # fmt: skip
    monkeypatch.setattr(environment, "served_here", lambda base_url, launched: True)
    launch = {"launched_by_toolkit": True, "command": "vllm serve m --speculative-config '{\"method\": \"ngram\"}'",
              "log_file": "server.log", "started_at": "2026-01-01T00:00:00+00:00", "startup_s": 21.5,
              "engine": {"version": "0.10", "commit": None, "build": "CUDA 12.4"}}  # fmt: skip
    params = make_params({"base_url": SERVER.base_url, "duration_s": 2, "contexts": [64], "concurrency": [1, 2]})
    environment.run_info(params, SERVER, "r1", None, launch=launch).save(out)
    document = RunDocument.load(out)
    readings = [Measurement("decode", 64, "64", 1, "Valid", total_tok_s=60.0 + r, total_tok_s_ci=1.5, round=r,
                            sub_windows=4) for r in range(3)]  # fmt: skip
    document.control = control_block(readings, 0.5)
    document.save(out)
    rows = [{"phase": "prefill", "cell_wall_s": 1.0, "ttft_ms": 200.0}, {"phase": "decode", "cell_wall_s": 3.0,
            "readiness_s": 0.5, "windows_s": 2.0, "drain_s": 0.1, "measured_s": 2.0, "status": "Valid"}]  # fmt: skip
    RunDocument.load(out).model_copy(update={"overhead": matrix_overhead(rows)}).save(out)
    document = RunDocument.load(out)
    document.capacity = CapacityParams(target_rps=4).model_dump()  # validated on assignment
    document.save(out)
    return (out / RUN_FILE).read_text()


def test_a_run_json_the_toolkit_writes_saves_back_byte_for_byte(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text = _written(monkeypatch, tmp_path / "run")
    document = RunDocument.load(tmp_path / "run")
    assert isinstance(document.server, ServerBlock) and isinstance(document.launch, LaunchBlock)
    assert isinstance(document.overhead, OverheadBlock) and isinstance(document.control, ControlBlock)
    assert document.environment is not None and document.environment.gpus is not None
    assert document.environment.gpus.devices is not None and document.environment.gpus.devices[0].name == "H100"
    assert document.environment.speculative_config == {"method": "ngram"}
    assert document.control.measurements is not None and document.control.measurements[2].total_tok_s == 62.0
    assert document.capacity is not None and document.capacity.target_rps == 4.0
    document.save(tmp_path / "again")
    assert (tmp_path / "again" / RUN_FILE).read_text() == text
    assert list(json.loads(text)["server"]) == list(SERVER.__dataclass_fields__)  # the producer's order


@pytest.mark.parametrize("folder", RUN_FOLDERS, ids=lambda p: p.name)
def test_the_committed_run_folders_save_back_as_they_are_stamped(folder: Path, tmp_path: Path) -> None:
    """Byte for byte; a folder written before stamping gains its schema_version first and the writer's newline, as
    before run.json's blocks had models."""
    held = json.loads((folder / RUN_FILE).read_text())
    RunDocument.load(folder).save(tmp_path)
    stamped = {"schema_version": 1, **{k: v for k, v in held.items() if k != "schema_version"}}
    assert (tmp_path / RUN_FILE).read_text() == json.dumps(stamped, indent=2) + "\n"


def test_a_stamped_committed_run_folder_saves_back_byte_for_byte(tmp_path: Path) -> None:
    stamped = [folder for folder in RUN_FOLDERS if '"schema_version"' in (folder / RUN_FILE).read_text()]
    assert stamped  # the peers' run folders
    for folder in stamped:
        RunDocument.load(folder).save(tmp_path / folder.name)
        assert (tmp_path / folder.name / RUN_FILE).read_bytes() == (folder / RUN_FILE).read_bytes()


def test_an_older_files_blocks_keep_their_order_and_unknown_keys(tmp_path: Path) -> None:
    """Within a block, the file's order; run.json's own fields are written in the model's order, as before."""
    older = {
        "schema_version": 1,
        "run_id": "r0",
        "launch": {"note": "by hand", "launched_by_toolkit": False},
        "server": {"version": "0.9", "model": "m", "a_later_key": {"x": [1, 2]}, "max_model_len": 2048},
        "environment": {"machine": {"memory_bytes": 1024, "os": "linux", "numa": 2}, "toolkit_version": "0.0.9"},
        "overhead": {"ratio": 0.5, "wall_s": 4, "cells": 3},
        "control": {"drift": 0.5, "measurements": [{"status": "Valid", "after_round": 1, "extra": True}]},
        "capacity": {"headroom": 0.25, "target_multiple": 2},
    }
    (tmp_path / RUN_FILE).write_text(json.dumps(older, indent=2) + "\n")
    document = RunDocument.load(tmp_path)
    document.save(tmp_path / "again")
    assert (tmp_path / "again" / RUN_FILE).read_text() == (tmp_path / RUN_FILE).read_text()
    assert document.overhead is not None and document.overhead.wall_s == 4 and isinstance(document.overhead.wall_s, int)


def test_a_block_reads_as_the_mapping_it_was(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text(json.dumps({"server": {"model": "m", "version": "0.9", "later": 1}}))
    server = RunDocument.load(tmp_path).server
    assert server is not None and server.model == "m" and server["version"] == "0.9" and server.get("later") == 1
    assert "later" in server and "max_model_len" not in server and server.get("max_model_len", 0) == 0
    assert server == {"model": "m", "version": "0.9", "later": 1} and server != {"model": "m"}
    with pytest.raises(KeyError):
        server["max_model_len"]


def test_a_block_given_as_a_mapping_becomes_its_model(tmp_path: Path) -> None:
    document = RunDocument(run_id="r1")
    document.launch = {"launched_by_toolkit": True}  # validated on assignment
    copied = document.model_copy(update={"overhead": {"ratio": 0.5}})
    assert isinstance(document.launch, LaunchBlock) and document.launched_by_toolkit
    assert isinstance(copied.overhead, OverheadBlock) and copied.overhead.ratio == 0.5
    assert copied.to_json() == {"run_id": "r1", "launch": {"launched_by_toolkit": True}, "overhead": {"ratio": 0.5}}


def test_a_block_field_of_another_type_is_a_value_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / RUN_FILE).write_text(json.dumps({"server": {"max_model_len": "long"}}))
    with pytest.raises(ValueError, match=r"server\.max_model_len"):
        RunDocument.load(tmp_path)
