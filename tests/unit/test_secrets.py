"""`toolkit.base.api_keys`: the API key comes from the environment, is checked, and redacted from any output."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from toolkit.base import api_keys as secrets
from toolkit.base.api_keys import REDACTED, SecretError, api_key_from_env, redact, secret_flag
from toolkit.params import ParamsError, make_params

KEY = "sk-test-DISTINCTIVE-12345"


@pytest.fixture(autouse=True)
def no_known_keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(secrets, "_KNOWN", set())
    yield


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"vllm serve m --api-key {KEY} --port 8000", "vllm serve m --api-key <redacted> --port 8000"),
        (f"vllm serve m --api-key={KEY} --port 8000", "vllm serve m --api-key=<redacted> --port 8000"),
        (f"vllm serve m --api-key   {KEY}", "vllm serve m --api-key   <redacted>"),
        (f"vllm serve m --api-key '{KEY} with space' -tp 8", "vllm serve m --api-key <redacted> -tp 8"),
        (f'vllm serve m --api-key "{KEY} with space" -tp 8', "vllm serve m --api-key <redacted> -tp 8"),
        (f"vllm serve m --api-key='{KEY}'", "vllm serve m --api-key=<redacted>"),
        (f'vllm serve m --api-key="{KEY}"', "vllm serve m --api-key=<redacted>"),
        (f"VLLM_API_KEY={KEY} vllm serve m", "VLLM_API_KEY=<redacted> vllm serve m"),
        (f"export VLLM_API_KEY='{KEY}'; vllm serve m", "export VLLM_API_KEY=<redacted>; vllm serve m"),
        (f'OPENAI_API_KEY="{KEY}" HF_TOKEN=hf_abc vllm', "OPENAI_API_KEY=<redacted> HF_TOKEN=<redacted> vllm"),
        (f"MY_SECRET={KEY} run", "MY_SECRET=<redacted> run"),
        (f"--api-key {KEY} --api-key={KEY}", "--api-key <redacted> --api-key=<redacted>"),
        # Spelled as vLLM's parser reads them: _ for -, a prefix, several values, any case.
        (f"vllm serve m --api_key {KEY} --port 8000", "vllm serve m --api_key <redacted> --port 8000"),
        (f"vllm serve m --api-ke {KEY}", "vllm serve m --api-ke <redacted>"),
        (f"vllm serve m --api_k={KEY}", "vllm serve m --api_k=<redacted>"),
        (f"vllm serve m --api-key {KEY} second-{KEY} -tp 8", "vllm serve m --api-key <redacted> -tp 8"),
        (f"vllm serve m --hf-token {KEY}", "vllm serve m --hf-token <redacted>"),
        (f"vllm serve m --hf_token={KEY}", "vllm serve m --hf_token=<redacted>"),
        (f"vllm serve m --HF-TOK {KEY}", "vllm serve m --HF-TOK <redacted>"),
        # Every secret-looking NAME=value word: one pattern with the refusal of server.env names.
        (f"DB_PASSWORD={KEY} SMTP_PASS={KEY} x", "DB_PASSWORD=<redacted> SMTP_PASS=<redacted> x"),
        (f"MYSQL_PWD={KEY} x", "MYSQL_PWD=<redacted> x"),
        (f"PROXY_AUTH={KEY} GOOGLE_CREDENTIALS={KEY} x", "PROXY_AUTH=<redacted> GOOGLE_CREDENTIALS=<redacted> x"),
        (f"env hf_token={KEY} vllm", "env hf_token=<redacted> vllm"),
        (f"VLLM_API_KEY='{KEY} unclosed", "VLLM_API_KEY=<redacted>"),  # an unclosed quote runs to the end
        (f"VLLM_API_KEY=a'{KEY} b'c vllm", "VLLM_API_KEY=<redacted> vllm"),  # one shell word of several pieces
        # User info of a URL.
        (f"cannot reach http://user:{KEY}@host:8000/v1", "cannot reach http://<redacted>@host:8000/v1"),
        (f"https://{KEY}@h/x and http://u:p@ss{KEY}@h2", "https://<redacted>@h/x and http://<redacted>@h2"),
    ],
)
def test_redact_flags_assignments_and_urls(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert KEY not in redact(text)


def test_redact_known_values_anywhere() -> None:
    text = f"HTTP 401: Incorrect API key provided: {KEY} (again: {KEY})"
    assert redact(text, KEY) == f"HTTP 401: Incorrect API key provided: {REDACTED} (again: {REDACTED})"
    assert redact(text, None, "") == text  # no key known: nothing to replace besides the patterns


@pytest.mark.parametrize("raw", [KEY + "\r", KEY + "\n", KEY + " ", " " + KEY, KEY + "\t\r\n", "k'ey\\\"/?&=+:" + KEY])
def test_redact_every_form_an_error_can_carry(raw: str) -> None:
    """h11 shows a refused header as bytes (`Illegal header value b'Bearer sk-…\\r'`), JSON escapes, URLs encode."""
    header = f"Bearer {raw}"
    carriers = [
        f"LocalProtocolError: Illegal header value {header.encode()!r}",
        f"LocalProtocolError: Illegal header value {header.encode('latin-1')!r}",
        f"KeyError: {raw!r}",
        f"body: {json.dumps({'detail': raw})}",
        f"GET /v1/models?key={quote(raw, safe='')}",
        f"GET /v1/models?key={quote(raw)}",
        f"stripped: {raw.strip()}",
    ]
    for text in carriers:
        shown = redact(text, raw)
        assert KEY not in shown, (text, shown)
        assert REDACTED in shown


def test_redact_leaves_other_text_alone() -> None:
    for text in [
        "vllm serve m --port 8000 -tp 8 --max-model-len 262144",
        "python -m toolkit matrix --api-key-env VLLM_API_KEY --out x",  # a variable's name is no secret
        "vllm serve m --api-server-count 2 --hf-overrides {} --max-num-batched-tokens=8192",
        "MAX_TOKENS=8 TOKENIZERS_PARALLELISM=false --max_num_batched_tokens=64 x",
        "http://127.0.0.1:8000/v1 answered 401; see user@example.com",
        "--api-key",  # no value
        "",
    ]:
        assert redact(text) == text


def test_redact_ignores_values_too_short_to_be_keys() -> None:
    """A short value is refused as a key, and redacting it would mangle numbers: `port 12345`."""
    assert redact("port 12345", "1234") == "port 12345"


def test_redact_is_idempotent() -> None:
    once = redact(f"VLLM_API_KEY={KEY} vllm serve --api-key {KEY} --api_key={KEY}", KEY)
    assert redact(once, KEY) == once


def test_every_key_read_is_redacted_without_being_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_KEY_VAR", KEY + "\r")
    assert redact(f"x {KEY!r}") == f"x {KEY!r}"  # not read yet
    assert api_key_from_env("SOME_KEY_VAR") == KEY
    assert redact(f"Illegal header value {('Bearer ' + KEY + chr(13)).encode()!r}") == (
        "Illegal header value b'Bearer <redacted>'"
    )


def test_api_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_KEY_VAR", KEY)
    assert api_key_from_env("SOME_KEY_VAR") == KEY
    monkeypatch.setenv("SOME_KEY_VAR", "")
    assert api_key_from_env("SOME_KEY_VAR") is None
    monkeypatch.setenv("SOME_KEY_VAR", " \r\n")
    assert api_key_from_env("SOME_KEY_VAR") is None
    monkeypatch.delenv("SOME_KEY_VAR")
    assert api_key_from_env("SOME_KEY_VAR") is None


@pytest.mark.parametrize("raw", [KEY + "\r", KEY + "\n", KEY + " ", "\t" + KEY + "\r\n"])
def test_surrounding_whitespace_is_stripped(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("SOME_KEY_VAR", raw)
    assert api_key_from_env("SOME_KEY_VAR") == KEY


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        ("sk-test\x07DISTINCTIVE", "control character 0x07"),
        ("sk-test\rDISTINCTIVE", "control character 0x0d"),
        ("sk-test\x7fDISTINCTIVE", "control character 0x7f"),
        ("sk-test-DISTINCTIVÉ", "non-ASCII character"),
    ],
)
def test_a_key_with_another_character_is_refused_unprinted(
    monkeypatch: pytest.MonkeyPatch, raw: str, what: str
) -> None:
    monkeypatch.setenv("SOME_KEY_VAR", raw)
    with pytest.raises(SecretError) as info:
        api_key_from_env("SOME_KEY_VAR")
    assert str(info.value) == f"api_key_env: SOME_KEY_VAR holds a {what}; allowed: printable ASCII (key not shown)"
    assert "DISTINCTIV" not in str(info.value)


def test_a_short_key_is_refused_unprinted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_KEY_VAR", " 1234567\n")
    with pytest.raises(SecretError) as info:
        api_key_from_env("SOME_KEY_VAR")
    assert str(info.value) == ("api_key_env: SOME_KEY_VAR holds a key shorter than 8 characters; allowed: 8 or more")
    monkeypatch.setenv("SOME_KEY_VAR", "12345678")
    assert api_key_from_env("SOME_KEY_VAR") == "12345678"


@pytest.mark.parametrize(
    ("word", "flag"),
    [
        ("--api-key", "--api-key"),
        ("--api_key", "--api-key"),
        ("--api-ke", "--api-key"),
        ("--api-k=x", "--api-key"),
        ("--API-KEY", "--api-key"),
        ("--hf-token", "--hf-token"),
        ("--hf_tok=x", "--hf-token"),
        ("--api-server-count", None),
        ("--hf-overrides", None),
        ("--api-keys", None),
        ("-api-key", None),
        ("--", None),
        ("--a", None),
        ("api-key", None),
    ],
)
def test_secret_flags_as_vllm_parses_them(word: str, flag: str | None) -> None:
    assert secret_flag(word) == flag


@pytest.mark.parametrize("value", [KEY, "sk-abc", "my_key", "1VAR", "VLLM API KEY", "A" * 129])
def test_api_key_env_must_be_a_variable_name_and_is_not_echoed(value: str) -> None:
    with pytest.raises(ParamsError) as info:
        make_params({"api_key_env": value})
    assert str(info.value).startswith("api_key_env: is not an upper-case environment variable name")
    assert value not in str(info.value)
    assert make_params({"api_key_env": "MY_VLLM_KEY_2"}).api_key_env == "MY_VLLM_KEY_2"


@pytest.mark.parametrize("url", [f"http://user:{KEY}@127.0.0.1:8000", f"https://{KEY}@gateway/v1", "ftp://u:p@h"])
def test_user_info_in_base_url_is_refused_unprinted(url: str) -> None:
    with pytest.raises(ParamsError) as info:
        make_params({"base_url": url})
    assert str(info.value).startswith("base_url: holds user info (user:password@); allowed: http(s)://host")
    assert KEY not in str(info.value) and "u:p" not in str(info.value)


def test_launch_command_is_redacted_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VLLM_KEY", KEY + "\r")
    command = f"vllm serve m --api_key {KEY} --port 8000 # key {KEY}, HF_TOKEN=hf_x --hf-tok hf_y"
    params = make_params({"api_key_env": "MY_VLLM_KEY", "launch_command": command})
    assert params.launch_command == (
        "vllm serve m --api_key <redacted> --port 8000 # key <redacted>, HF_TOKEN=<redacted> --hf-tok <redacted>"
    )
    assert KEY not in repr(params) and KEY not in json.dumps(params.model_dump())


def test_a_bad_value_echoed_in_an_error_is_redacted() -> None:
    with pytest.raises(ParamsError) as info:
        make_params({"title": ["HF_TOKEN=hf_DISTINCTIVE"]})
    assert "hf_DISTINCTIVE" not in str(info.value) and "HF_TOKEN=<redacted>" in str(info.value)


def test_redact_takes_linear_time_on_long_text() -> None:
    """Every line a batch relays is redacted: no pattern may rescan a long run of letters at each position."""
    import time

    text = "x " * 50_000 + "a" * 100_000 + " 'unclosed " + "--flag " * 10_000 + "s://" * 20_000
    started = time.perf_counter()
    assert redact(text, KEY) == text
    assert time.perf_counter() - started < 1.0  # 0.03 s here; 5 s with a scheme pattern that rescans


def test_server_api_errors_do_not_carry_the_key() -> None:
    """A `/tokenize` error body echoing the key, and h11 refusing a header (it shows the value bytes-escaped)."""
    import asyncio

    import httpx

    from toolkit.matrix.server_api import ServerAPI, ServerAPIError

    def reply(request: httpx.Request) -> httpx.Response:
        header = request.headers["Authorization"]
        if request.url.path == "/v1/models":
            raise httpx.LocalProtocolError(f"Illegal header value {(header + chr(13)).encode()!r}")
        return httpx.Response(400, text=f"bad request from {header}")

    async def errors() -> list[str]:
        found = []
        async with ServerAPI("http://127.0.0.1:9", api_key=KEY) as api:
            api._client = httpx.AsyncClient(base_url=api.base_url, headers=api._client.headers,
                                            transport=httpx.MockTransport(reply))  # fmt: skip
            for call in (api.count_tokens("m", "text", chat=False), api.models()):
                with pytest.raises(ServerAPIError) as info:
                    await call
                found.append(str(info.value))
        return found

    tokenize, models = asyncio.run(errors())
    assert tokenize == "http://127.0.0.1:9/tokenize answered HTTP 400: bad request from Bearer <redacted>"
    assert models == ("cannot reach http://127.0.0.1:9/v1/models: LocalProtocolError: Illegal header value "
                      "b'Bearer <redacted>\\r'")  # fmt: skip


@pytest.mark.parametrize("length", [12, 64, 1000])
def test_a_key_cut_short_by_the_server_loses_its_head_too(length: int) -> None:
    key = ("sk-live-" + "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" * 30)[:length]
    for cut in (8, 9, max(8, length // 2), length - 1):
        text = f"HTTP 401: bad key {key[:cut]}… (echoed by a gateway)"
        shown = redact(text, key)
        assert key[:8] not in shown and shown.startswith("HTTP 401: bad key <redacted>… (echoed"), (cut, shown)
    assert redact(f"key {key[:7]} and more", key) == f"key {key[:7]} and more"  # shorter than 8: no key head


@pytest.mark.parametrize("length", [12, 64, 1000])
def test_redact_then_cut_leaves_no_piece_of_the_key(length: int) -> None:
    key = ("sk-live-" + "abcdefghijklmnopqrstuvwxyz9876543210" * 30)[:length]
    body = json.dumps({"error": {"message": f"invalid key {key}", "header": f"Bearer {key}"}})
    for limit in (40, 80, 200, 300):
        shown = secrets.redact_and_cut(body, limit, key)
        assert len(shown) <= limit
        assert not any(key[i : i + 8] in shown for i in range(len(key) - 7)), (limit, shown)
        assert shown == redact(body, key)[:limit]


@pytest.mark.parametrize("length", [12, 64, 1000])
def test_any_piece_of_eight_characters_is_redacted_wherever_it_stands(length: int) -> None:
    """Cut at the front, masked in the middle, cut at the end: in short text and in megabytes (numpy's path),
    also among non-ASCII characters."""
    key = ("sk-live-" + "QRSTUVWXYZabcdefghij0123456789klmnop" * 30)[:length]
    parts = [key[3:11], key[length // 2 - 4 : length // 2 + 4], key[-8:], key[2:-2]]
    for filler in ("", "× é " * 300_000):
        text = filler + " | ".join(f"«{part}»" for part in parts) + filler
        shown = redact(text, key)
        assert not any(key[i : i + 8] in shown for i in range(length - 7)), shown[len(filler) : len(filler) + 200]
        assert shown.count(REDACTED) == len(parts) and shown.startswith(filler)
    assert redact(f"a {key[1:8]} b", key) == f"a {key[1:8]} b"  # seven characters are not a piece


def test_an_excerpt_is_redacted_before_it_is_cut() -> None:
    key = "sk-" + "k" * 997
    body = "." * 100 + key
    assert secrets.excerpt(body, 120, key) == repr(f"{'.' * 100}{REDACTED}")
    assert secrets.excerpt(body.encode(), 10, key) == repr(body.encode())[:10]
    assert secrets.excerpt(12345, 83) == "'12345'"


def test_a_redacting_writer_redacts_a_key_split_over_two_writes() -> None:
    import io

    out = io.StringIO()
    writer = secrets.RedactingWriter(out, KEY)
    writer.write(f"first line {KEY[:10]}")
    writer.write(f"{KEY[10:]} end\nunfinished {KEY}")
    assert out.getvalue() == "first line <redacted> end\n"  # the unfinished line waits for its end
    writer.close()
    assert out.getvalue() == "first line <redacted> end\nunfinished <redacted>"


def test_redact_file_rewrites_only_a_file_holding_a_secret(tmp_path: Path) -> None:
    holding, clean = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    holding.write_text(json.dumps({"text": f"echo {KEY}"}))
    clean.write_text("nothing here")
    before = clean.stat().st_mtime_ns
    for path in (holding, clean, tmp_path / "missing.ipynb"):
        secrets.redact_file(path, KEY)
    assert json.loads(holding.read_text()) == {"text": "echo <redacted>"}
    assert clean.stat().st_mtime_ns == before and not (tmp_path / "missing.ipynb").exists()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "HTTPS_PROXY=http://user:pa55@proxy:3128 vllm serve m",
            "HTTPS_PROXY=http://<redacted>@proxy:3128 vllm serve m",
        ),
        (
            "HF_ENDPOINT='https://mirror/hf?token=abc123&x=1' vllm",
            "HF_ENDPOINT='https://mirror/hf?token=<redacted>&x=1' vllm",
        ),
        ("https://h/p?page=2&api-key=k3y&sig=1", "https://h/p?page=2&api-key=<redacted>&sig=1"),
        ("docker run --env=HF_TOKEN=hf_abc img", "docker run --env=HF_TOKEN=<redacted> img"),
        ("docker run -eHF_TOKEN=hf_abc img", "docker run -eHF_TOKEN=<redacted> img"),
        ("docker run -eMODE=fast --env=PORT=80 img", "docker run -eMODE=fast --env=PORT=80 img"),
    ],
)
def test_credentials_in_urls_and_container_env_options_are_redacted(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize("word", ["--env=HF_TOKEN=x", "-eHF_TOKEN=x", "HF_TOKEN=x"])
def test_container_env_options_with_a_secret_name_count_as_secret_assignments(word: str) -> None:
    assert secrets.secret_assignment(word)
    assert not secrets.secret_assignment(word.replace("HF_TOKEN", "MODE"))
