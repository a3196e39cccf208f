"""A key echoed in hiding (issue 40): in UTF-16 and UTF-32 error bodies, with NULs between its characters in a JSON
message and in a stream's error event, every byte percent-encoded, base64 inside `user:KEY`, and in a response
header. One rate sweep meets every spelling; afterwards no 8-character piece of the key, nor a 12-character piece of
its percent or base64 spelling, is on the terminal or in any file of the folder (parquet records read as records),
and `check` calls the folder clean.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.component.test_hostile_server import KEY_ENV, KEYS, pieces, toolkit
from tests.faultserver import ECHO_ENCODINGS, FaultServer

pytestmark = [pytest.mark.process, pytest.mark.timeout(240)]
KEY = KEYS[64]


def hidden_pieces(key: str) -> set[bytes]:
    """8-character pieces of the key, 12-character pieces of its percent and base64 spellings."""
    percent = "".join(f"%{b:02X}" for b in key.encode())
    encoded = base64.b64encode(f"user:{key}".encode()).decode()
    spelled = {p[i : i + 12].encode() for p in (percent, encoded) for i in range(len(p) - 11)}
    return pieces(key) | spelled


def texts_of(folder: Path) -> dict[str, bytes]:
    """Every file under folder as bytes; a parquet file as the text of its records (compressed pages hide it)."""
    out = {}
    for path in (p for p in folder.rglob("*") if p.is_file()):
        if path.suffix == ".parquet":
            out[str(path)] = pd.read_parquet(path).to_json(orient="records", force_ascii=False).encode()
        else:
            out[str(path)] = path.read_bytes()
    return out


def test_a_key_echoed_in_hiding_shows_nowhere_and_check_calls_the_folder_clean(tmp_path: Path) -> None:
    out, params = tmp_path / "out", tmp_path / "sweep.yaml"
    with FaultServer(api_key=KEY) as srv:
        params.write_text(yaml.safe_dump({"base_url": srv.base_url, "rates": [6], "duration_s": 2,
                                          "input_tokens": 16, "output_tokens": 4, "seed": 1,
                                          "read_timeout_s": 2, "api_key_env": KEY_ENV}))  # fmt: skip
        srv.set_fault("echo-encoded", after=2, times=len(ECHO_ENCODINGS))
        done = toolkit({KEY_ENV: KEY}, "rates", "--params", params, "--out", out)
        assert srv.fault is not None and srv.fault.hit == len(ECHO_ENCODINGS)
    assert done.returncode == 0, done.stderr[-3000:]
    (step,) = sorted((out / "rates").glob("step-*.parquet"))
    errors = pd.read_parquet(step)["error"].dropna().tolist()
    assert len(errors) == len(ECHO_ENCODINGS), errors
    assert sum("<redacted>" in e for e in errors) == len(ECHO_ENCODINGS) - 1, errors  # the header is not kept
    assert sum(e == "HTTP 401: unauthorized" for e in errors) == 1, errors
    found = hidden_pieces(KEY)
    printed = [name for name, text in (("stdout", done.stdout), ("stderr", done.stderr))
               if any(p in text.encode() for p in found)]  # fmt: skip
    written = [name for name, data in texts_of(out).items() if any(p in data for p in found)]
    assert printed + written == []
    checked = toolkit({KEY_ENV: KEY}, "check", out, "--api-key-env", KEY_ENV)
    assert checked.returncode == 0 and checked.stdout.strip() == f"clean: {out}", checked.stdout + checked.stderr
    assert json.loads((out / "rates" / "steps.jsonl").read_text().splitlines()[0])["failed"] == len(ECHO_ENCODINGS)
