"""The one filter for what leaves the process (toolkit.base.api_keys.scrub): a key in hiding (UTF-16, UTF-32, NULs
or other controls between its characters, percent-encoded byte by byte, base64 at any alignment) is found; the
credentials `holds_secret` knew but `redact` left (Bearer and Basic, JSON pairs, `-e=NAME=`) are redacted; a
launched server's environment values and command are published without them; every document written goes
through it."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from toolkit.base.api_keys import REDACTED, excerpt, holds_secret, redact, scrub, secret_assignment
from toolkit.base.schema import Measurement
from toolkit.rates.files import scrubbed
from toolkit.results.store import ResultStore, write_json_atomic
from toolkit.servers.launch import shown_command

KEY = "sk-scrub-TEST-5d1e8a0f"


def no_piece(text: str, key: str = KEY) -> bool:
    return not any(key[i : i + 8] in text for i in range(len(key) - 7))


HIDDEN = {
    "utf-16-le": ("rejected " + KEY).encode("utf-16-le").decode("utf-8", "replace"),
    "utf-16-be": ("rejected " + KEY).encode("utf-16-be").decode("utf-8", "replace"),
    "utf-32": ("rejected " + KEY).encode("utf-32").decode("utf-8", "replace"),
    "nul": "\0".join(KEY),
    "other controls": "\x01\x7f".join(KEY),
    "percent": "key=" + "".join(f"%{b:02X}" for b in KEY.encode()),
    "percent, lower case": "key=" + "".join(f"%{b:02x}" for b in KEY.encode()),
}
for pad in range(3):
    HIDDEN[f"base64, offset {pad}"] = base64.b64encode(b"u:"[:pad] + KEY.encode() + b"!").decode()
    HIDDEN[f"url-safe base64, offset {pad}"] = base64.urlsafe_b64encode(b"~~"[:pad] + KEY.encode()).decode()


@pytest.mark.parametrize("form", sorted(HIDDEN))
def test_a_key_in_hiding_is_redacted(form: str) -> None:
    shown = scrub(f"HTTP 401: {HIDDEN[form]}", KEY)
    assert REDACTED in shown and no_piece(shown), shown
    if "base64" in form:  # what is left beside <redacted> is too short to carry 8 characters of the key (11)
        assert all(len(run) < 11 for run in re.findall(r"[A-Za-z0-9+/_=-]+", shown.split()[-1])), shown


def test_scrub_cuts_after_redacting_and_drops_what_drives_a_terminal() -> None:
    text = "x" * 290 + KEY + "\x1b[31m"
    assert scrub(text, KEY, limit=300) == "x" * 290 + REDACTED[:10]
    assert scrub("a\tb\nc\x1b[2Jd\re", KEY) == "a\tb\nc[2Jde"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("curl -H 'Authorization: Bearer abcdefghijkl0123'", f"curl -H 'Authorization: Bearer {REDACTED}'"),
        ("Authorization: basic dXNlcjpwYXNzd29yZA==", f"Authorization: basic {REDACTED}"),
        ('{"HF_TOKEN": "hf_json_9f8e7d", "model": "m"}', f'{{"HF_TOKEN": "{REDACTED}", "model": "m"}}'),
        ("{'password': 'hunter2hunter2'}", f"{{'password': '{REDACTED}'}}"),
        ("docker run -e=HF_TOKEN=hf_eq_424242 image", f"docker run -e=HF_TOKEN={REDACTED} image"),
        ("HTTPS_PROXY=http://user:proxypass@10.0.0.1:3128", f"HTTPS_PROXY=http://{REDACTED}@10.0.0.1:3128"),
        ("PIP_INDEX_URL=https://user:idx_tok@pypi.local/simple", f"PIP_INDEX_URL=https://{REDACTED}@pypi.local/simple"),
        ("HF_ENDPOINT=https://hub.local/?token=hubtok123", f"HF_ENDPOINT=https://hub.local/?token={REDACTED}"),
    ],
)
def test_credentials_holds_secret_knew_are_redacted(text: str, shown: str) -> None:
    assert holds_secret(text) and redact(text) == shown and not holds_secret(shown)


@pytest.mark.parametrize(
    "text",
    ['{"api_key_env": "VLLM_API_KEY"}', '"max_tokens": "128"', "Bearer <redacted>", "port 12345 of https://a.b/?x=1"],
)
def test_what_only_names_a_secret_is_left_as_it_is(text: str) -> None:
    assert redact(text) == text and not holds_secret(text)


def test_a_container_environment_option_with_equals_is_a_secret_assignment() -> None:
    assert secret_assignment("-e=HF_TOKEN=x") and secret_assignment("-eHF_TOKEN=x")
    assert not secret_assignment("-e=MODE=x")


def test_an_excerpt_of_a_utf16_body_shows_no_piece_of_the_key() -> None:
    body = ("bad key " + KEY).encode("utf-16-le")
    assert no_piece(excerpt(body, 400, KEY)) and REDACTED in excerpt(body, 400, KEY)


def test_a_launched_servers_environment_and_command_are_published_without_credentials() -> None:
    env = {"HTTPS_PROXY": "http://user:proxypass@10.0.0.1:3128", "PIP_INDEX_URL": "https://u:idx_tok@pypi.local/simple",
           "HF_ENDPOINT": "https://hub.local/?token=hubtok123", "MODE": "fast"}  # fmt: skip
    command = ["vllm", "serve", "m", "-H", "Authorization: Bearer hdr_token_777777", "--api-key", KEY]
    shown = shown_command(command, env, KEY)
    for secret in ("proxypass", "idx_tok", "hubtok123", "hdr_token_777777", KEY):
        assert secret not in shown
    assert "MODE=fast" in shown and shown.startswith(f"VLLM_API_KEY={REDACTED} HTTPS_PROXY=http://{REDACTED}@")


def test_every_document_and_record_written_is_scrubbed(tmp_path: Path) -> None:
    write_json_atomic(tmp_path / "doc.json", {"env": {"HTTPS_PROXY": "http://u:pw_secret@h:1"}, "err": "\0".join(KEY)})
    assert "pw_secret" not in (tmp_path / "doc.json").read_text()
    assert no_piece((tmp_path / "doc.json").read_text()) or KEY not in json.loads((tmp_path / "doc.json").read_text())
    ResultStore(tmp_path).append(Measurement(phase="prefill", context_tokens=64, context="64", concurrency=1,
                                             status="Error", error="HTTP 401: " + "\0".join(KEY)))  # fmt: skip
    line = (tmp_path / "results.jsonl").read_text()
    assert "\\u0000" not in line and "\0" not in line
    frame = scrubbed(pd.DataFrame({"error": ["\0".join(KEY), None], "n": [1, 2]}))
    assert pd.isna(frame["error"].tolist()[1]) and frame["n"].tolist() == [1, 2]
    assert "\0" not in frame["error"].tolist()[0]
