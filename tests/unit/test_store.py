"""`toolkit.results.store`: results appended a line at a time, a kill's partial line survived, latest per key."""

import contextlib
import json
import math
import os
import re
import resource
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from toolkit.base.errors import ResultsError
from toolkit.base.schema import Measurement
from toolkit.results.store import (
    RESULTS_FILE,
    ResultStore,
    StoreError,
    check_writable,
    latest_by_key,
    load_measurements,
    read_json,
    to_dataframe,
    write_json_atomic,
)


def m(phase: str = "decode", ctx: int = 1024, n: int = 1, status: str = "Valid", **extra: object) -> Measurement:
    return Measurement(phase=phase, context_tokens=ctx, context=f"{round(ctx / 1024)}K", concurrency=n,  # type: ignore[arg-type]
                       status=status, **extra)  # type: ignore[arg-type]  # fmt: skip


def test_append_and_load_round_trip(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "new" / "dir")  # created on the first append
    assert store.load() == []
    records = [m("prefill", total_tok_s=1234.5, ttft_ms=12.0), m(n=2, total_tok_s=99.0, error=None),
               m(n=4, status="Error", error="HTTP 500: boom")]  # fmt: skip
    for r in records:
        store.append(r)
    assert store.load() == records
    lines = store.path.read_text().splitlines()
    assert len(lines) == 3 and all(json.loads(x)["schema_version"] == 1 for x in lines)


def test_non_finite_numbers_are_stored_as_null(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.append(m(total_tok_s=math.nan, tbt_ms=math.inf))
    assert "NaN" not in store.path.read_text() and "Infinity" not in store.path.read_text()
    (loaded,) = store.load()
    assert loaded.total_tok_s is None and loaded.tbt_ms is None


def test_truncated_last_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.append(m(n=1))
    store.append(m(n=2))
    data = store.path.read_bytes()
    store.path.write_bytes(data[:-20])  # killed in the middle of writing the second record
    with pytest.warns(UserWarning, match=rf"{RESULTS_FILE}:2: truncated last line ignored"):
        loaded = store.load()
    assert [x.key for x in loaded] == [("decode", 1024, 1)]


def test_a_bad_line_that_is_not_the_last_raises(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_FILE
    good = json.dumps(m().to_dict())
    path.write_text(f"{good}\n{{broken\n{good}\n")
    with pytest.raises(ValueError, match=rf"{RESULTS_FILE}:2: not a JSON record"):
        load_measurements(path)


def test_blank_lines_are_skipped_and_missing_file_is_empty(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_FILE
    assert load_measurements(path) == []
    path.write_text("\n" + json.dumps(m().to_dict()) + "\n\n")
    assert len(load_measurements(path)) == 1


def test_partial_tail_is_dropped_before_the_next_append(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.append(m(n=1))
    with open(store.path, "a") as f:
        f.write('{"phase": "decode", "context_tok')  # a kill -9 mid-write
    store.append(m(n=2))
    text = store.path.read_text()
    assert text.endswith("\n")
    assert [json.loads(x)["concurrency"] for x in text.splitlines()] == [1, 2]  # every line whole
    assert [x.key[2] for x in store.load()] == [1, 2]  # and no warning now


def test_whole_last_record_without_its_newline_is_kept(tmp_path: Path) -> None:
    """A record cut only before its newline loads as finished, so the next append must not drop it."""
    store = ResultStore(tmp_path)
    store.append(m(n=1))
    store.append(m(n=2))
    store.path.write_bytes(store.path.read_bytes()[:-1])
    assert [x.key[2] for x in store.load()] == [1, 2]
    store.append(m(n=4))
    assert [x.key[2] for x in store.load()] == [1, 2, 4]
    assert len(store.path.read_text().splitlines()) == 3


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_FILE
    path.write_text(json.dumps({**m().to_dict(), "schema_version": 99}) + "\n")
    with pytest.raises(ValueError, match="schema_version 99 is newer"):
        load_measurements(path)


def test_unknown_keys_of_a_record_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / RESULTS_FILE
    path.write_text(json.dumps({**m().to_dict(), "from_the_future": 1}) + "\n")
    assert load_measurements(path) == [m()]


def test_latest_by_key_the_last_record_of_a_cell_wins() -> None:
    first_error = m(n=2, status="Error", error="HTTP 500", started_at="t1")
    redone = m(n=2, status="Valid", total_tok_s=10.0, started_at="t2")
    prefill = m("prefill", n=1, started_at="t0")
    other_ctx = m(ctx=2048, n=2, started_at="t3")
    latest = latest_by_key([prefill, first_error, other_ctx, redone])
    assert latest == {("prefill", 1024, 1): prefill, ("decode", 1024, 2): redone, ("decode", 2048, 2): other_ctx}
    assert list(latest) == [("prefill", 1024, 1), ("decode", 1024, 2), ("decode", 2048, 2)]  # first-seen order
    assert latest_by_key([]) == {}


def test_to_dataframe_orders_prefill_first_then_by_context_and_concurrency() -> None:
    frame = to_dataframe([m(ctx=2048, n=1), m(n=4), m("prefill", ctx=2048), m(n=1), m("prefill")])
    assert list(zip(frame["phase"], frame["context_tokens"], frame["concurrency"], strict=True)) == [
        ("prefill", 1024, 1), ("prefill", 2048, 1), ("decode", 1024, 1), ("decode", 1024, 4), ("decode", 2048, 1),
    ]  # fmt: skip
    assert to_dataframe([]).empty


def test_write_json_atomic(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "run.json"
    write_json_atomic(path, {"a": 1, "when": Path("x")})
    write_json_atomic(path, {"a": 2})
    assert read_json(path) == {"schema_version": 1, "a": 2}
    assert [p.name for p in path.parent.iterdir()] == ["run.json"]  # no temporary file left


@contextlib.contextmanager
def file_size_limit(limit: int) -> Iterator[None]:
    """Writes past `limit` bytes fail with EFBIG, as on a full disk (a real kernel limit, not a mock)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an error from write(), not a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, previous)


def test_a_failed_append_is_one_line_and_loses_no_record(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.append(m(n=1))
    store.append(m(n=2))
    before = store.path.read_bytes()
    with file_size_limit(len(before) + 100), pytest.raises(StoreError) as info:  # part of the next line fits
        store.append(m(n=4, error="x" * 400))
    assert re.fullmatch(rf"out: cannot write {re.escape(str(store.path))}: File too large; the records written "
                        r"before are kept \(rerun with --resume once it can be written\)", str(info.value))  # fmt: skip
    assert store.path.read_bytes() == before  # no partial line left behind
    store.append(m(n=4))
    assert [r.concurrency for r in store.load()] == [1, 2, 4]


def test_a_partial_tail_is_cut_in_place_even_on_a_full_disk(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    store.append(m(n=1))
    store.append(m(n=2))
    whole = store.path.read_bytes()
    store.path.write_bytes(whole + b'{"phase": "dec')
    with file_size_limit(10), pytest.raises(StoreError):  # the cut needs no write; the new line cannot be written
        store.append(m(n=4))
    assert store.path.read_bytes() == whole  # rewriting the file would have lost both records


def test_write_json_atomic_on_a_full_disk_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, {"a": 1})
    with file_size_limit(20), pytest.raises(StoreError, match=r"^out: cannot write .*run\.json: File too large$"):
        write_json_atomic(path, {"a": 2, "b": "x" * 100})
    assert read_json(path) == {"schema_version": 1, "a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_write_json_atomic_uses_a_unique_temporary_and_fsyncs_file_and_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run.json"
    (tmp_path / "run.json.tmp").mkdir()  # another writer's fixed temporary name is in the way
    synced: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")) or real_fsync(fd))
    write_json_atomic(path, {"a": 1})
    assert read_json(path) == {"schema_version": 1, "a": 1}
    assert synced[-1] == str(tmp_path) and synced[-2].startswith(str(tmp_path / ".run.json."))


def test_check_writable_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StoreError, match=r"^out: .*/file/out is not writable: Not a directory$"):
        check_writable(tmp_path / "file" / "out")
    check_writable(tmp_path / "new" / "out")
    assert list((tmp_path / "new" / "out").iterdir()) == []  # the probe is gone


@pytest.mark.parametrize(
    ("version", "problem"),
    [
        (2, r"schema_version 2 is newer than this toolkit reads \(up to 1\); upgrade vllm-speedtest to read it$"),
        ("1", r"schema_version '1' is not a version this toolkit knows \(1 to 1\)$"),
        (0, r"schema_version 0 is not a version"),
        (True, r"schema_version True is not a version"),
    ],
)
def test_a_document_of_a_newer_or_unknown_version_is_refused_in_one_line(
    tmp_path: Path, version: object, problem: str
) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema_version": version, "run_id": "x"}))
    with pytest.raises(ResultsError, match=rf"^{re.escape(str(path))}: {problem}"):
        read_json(path)


def test_a_document_without_a_version_reads_as_version_1_and_a_list_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text('{"run_id": "x"}')
    assert read_json(path) == {"run_id": "x"}
    path.write_text("[1, 2]")
    with pytest.raises(ResultsError, match=r"not a JSON object but list; not a toolkit document$"):
        read_json(path)
