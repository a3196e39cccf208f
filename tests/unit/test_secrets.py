"""`toolkit.secrets`: the API key comes from the environment and is redacted from anything written."""

import pytest

from toolkit.secrets import REDACTED, api_key_from_env, redact

KEY = "sk-test-DISTINCTIVE-12345"


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
    ],
)
def test_redact_flags_and_env_prefixes(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert KEY not in redact(text)


def test_redact_known_values_anywhere() -> None:
    text = f"HTTP 401: Incorrect API key provided: {KEY} (again: {KEY})"
    assert redact(text, KEY) == f"HTTP 401: Incorrect API key provided: {REDACTED} (again: {REDACTED})"
    assert redact(text, None, "") == text  # no key known: nothing to replace besides the patterns


def test_redact_leaves_other_text_alone() -> None:
    for text in [
        "vllm serve m --port 8000 -tp 8 --max-model-len 262144",
        "python -m toolkit matrix --api-key-env VLLM_API_KEY --out x",  # a variable's name is no secret
        "--api-key",  # no value
        "",
    ]:
        assert redact(text) == text


def test_redact_is_idempotent() -> None:
    once = redact(f"VLLM_API_KEY={KEY} vllm serve --api-key {KEY}", KEY)
    assert redact(once, KEY) == once


def test_api_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_KEY_VAR", KEY)
    assert api_key_from_env("SOME_KEY_VAR") == KEY
    monkeypatch.setenv("SOME_KEY_VAR", "")
    assert api_key_from_env("SOME_KEY_VAR") is None
    monkeypatch.delenv("SOME_KEY_VAR")
    assert api_key_from_env("SOME_KEY_VAR") is None
