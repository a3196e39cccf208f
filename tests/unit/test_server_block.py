"""The params file's `server:` block: validation with one-line errors, the server's environment, the shown command."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from toolkit.base.api_keys import looks_secret, redact
from toolkit.params import ParamsError, RunParams, ServerSpec, load_params, load_run_file
from toolkit.servers.launch import server_env, shown_command

SECRET = "hf_DISTINCTIVE_value_42"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_a_block_as_a_command_line_or_a_list(tmp_path: Path) -> None:
    text = ("base_url: http://127.0.0.1:8011\nserver:\n  command: vllm serve 'my model' --port 8011\n"
            "  env: {VLLM_CPU_KVCACHE_SPACE: 1, TOKENIZERS_PARALLELISM: false, RATIO: 0.5}\n")  # fmt: skip
    params, spec = load_run_file(write(tmp_path, text))
    assert isinstance(params, RunParams) and params.base_url == "http://127.0.0.1:8011"
    assert spec == ServerSpec(
        command=["vllm", "serve", "my model", "--port", "8011"],
        env={"VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false", "RATIO": "0.5"},
    )
    assert spec.health_timeout_s == 600 and spec.log_file is None
    _, listed = load_run_file(write(tmp_path, "server:\n  command: [vllm, serve, m]\n  health_timeout_s: 9\n"))
    assert listed is not None and listed.command == ["vllm", "serve", "m"] and listed.health_timeout_s == 9
    assert load_run_file(write(tmp_path, "duration_s: 3\n"))[1] is None
    assert load_params(write(tmp_path, text)).base_url == "http://127.0.0.1:8011"  # the block is no parameter


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            "  command: vllm\n  comand: x\n",
            r"^server\.comand: unknown parameter; allowed: command, env, "
            r"health_timeout_s, log_file; did you mean command\?$",
        ),
        ("  env: {A: 1}\n", r"^server\.command: required$"),
        ("  command: []\n", r"^server\.command: is empty"),
        ('  command: "vllm \'open"\n', r"^server\.command: cannot be split like a shell command line"),
        ("  command: vllm\n  health_timeout_s: 0\n", r"^server\.health_timeout_s: .*greater than 0"),
        ("  command: vllm\n  env: [A]\n", r"^server\.env: is not a mapping"),
        ("  command: vllm\n  env: {1A: x}\n", r"^server\.env: '1A' is not an environment variable name"),
        ("  command: vllm\n  env: {A: {b: 1}}\n", r"^server\.env: A has no plain value"),
    ],
)
def test_bad_blocks_are_one_line(tmp_path: Path, block: str, expected: str) -> None:
    with pytest.raises(ParamsError) as info:
        load_run_file(write(tmp_path, "server:\n" + block))
    assert "\n" not in str(info.value)
    assert re.search(expected, str(info.value)), str(info.value)


def test_a_block_that_is_no_mapping(tmp_path: Path) -> None:
    with pytest.raises(ParamsError, match=r"^server: must be a mapping; allowed keys: command, env"):
        load_run_file(write(tmp_path, "server: vllm serve m\n"))


@pytest.mark.parametrize(
    "name",
    [
        "HF_TOKEN",
        "VLLM_API_KEY",
        "AWS_SECRET_ACCESS_KEY",
        "DB_PASSWORD",
        "OPENAI_APIKEY",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "hf_token",
        "SSH_KEYS",
        "SMTP_PASS",
        "DB_PASSWD",
        "MYSQL_PWD",
        "PROXY_AUTH",
        "APP_SECRETS",
        "AZURE_CREDENTIAL",
    ],
)
def test_secret_names_are_refused_and_their_values_never_printed(tmp_path: Path, name: str) -> None:
    assert looks_secret(name)
    with pytest.raises(ParamsError) as info:
        load_run_file(write(tmp_path, f"server:\n  command: vllm\n  env: {{SAFE: 1, {name}: {SECRET}}}\n"))
    message = str(info.value)
    assert message.startswith(f"server.env: {name} looks like a key, token or password") and "\n" not in message
    assert SECRET not in message


@pytest.mark.parametrize(
    "name",
    [
        "TOKENIZERS_PARALLELISM",
        "VLLM_CPU_KVCACHE_SPACE",
        "CUDA_VISIBLE_DEVICES",
        "HF_HUB_OFFLINE",
        "MAX_TOKENS_PER_STEP",
        "KEYBOARD",
    ],
)
def test_ordinary_names_pass(name: str) -> None:
    assert not looks_secret(name)


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        (f"vllm serve m --api-key {SECRET}", "--api-key"),
        (f"vllm serve m --api-key={SECRET}", "--api-key"),
        (f"vllm serve m --api_key {SECRET}", "--api-key"),  # vLLM's parser reads _ as -
        (f"vllm serve m --api-ke {SECRET}", "--api-key"),  # argparse takes an unambiguous prefix
        (f"vllm serve m --API_KEY={SECRET}", "--api-key"),
        (f"vllm serve m --hf-token {SECRET}", "--hf-token"),
        (f"vllm serve m --hf_tok={SECRET}", "--hf-token"),
        (["vllm", "serve", "m", "--api_key", SECRET], "--api-key"),
    ],
)
def test_a_secret_flag_in_the_command_is_refused_unprinted(tmp_path: Path, command: str | list[str], flag: str) -> None:
    with pytest.raises(ParamsError) as info:
        load_run_file(write(tmp_path, f"server:\n  command: {command!r}\n"))
    assert str(info.value).startswith(f"server.command: {flag}, however spelled (_ for -, a prefix, =VALUE), has no")
    assert redact(str(info.value)) == str(info.value)  # the CLI redacts what it prints: the line stays whole
    assert SECRET not in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("command", [f"env HF_TOKEN={SECRET} vllm serve m", f"vllm serve m X_API_KEY={SECRET}"])
def test_a_secret_assignment_in_the_command_is_refused_unprinted(tmp_path: Path, command: str) -> None:
    with pytest.raises(ParamsError) as info:
        load_run_file(write(tmp_path, f"server:\n  command: {command}\n"))
    assert str(info.value).startswith("server.command: a NAME=value word sets a key, token or password")
    assert SECRET not in str(info.value)


def test_ordinary_flags_pass() -> None:
    command = ["vllm", "serve", "m", "--api-server-count", "2", "--hf-overrides", "{}", "--max_num_batched_tokens=8"]
    assert ServerSpec(command=command).command == command


def test_a_command_with_a_quoting_error_is_not_echoed(tmp_path: Path) -> None:
    with pytest.raises(ParamsError) as info:
        load_run_file(write(tmp_path, f'server:\n  command: "vllm serve m --note \'x {SECRET}"\n'))
    assert str(info.value) == "server.command: cannot be split like a shell command line: No closing quotation"


def test_the_server_gets_the_key_only_from_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ServerSpec(command=["vllm", "serve", "m"], env={"VLLM_TARGET_DEVICE": "cpu"})
    monkeypatch.setenv("VLLM_API_KEY", "left-over-key")
    monkeypatch.setenv("OTHER", "kept")
    env = server_env(spec, "sk-from-api-key-env")
    assert env["VLLM_API_KEY"] == "sk-from-api-key-env" and env["VLLM_TARGET_DEVICE"] == "cpu"
    assert env["OTHER"] == "kept"
    assert "VLLM_API_KEY" not in server_env(spec, None)  # no key configured: the server requires none


def test_the_shown_command_is_the_one_that_ran_with_the_key_redacted() -> None:
    command = ["/opt/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/my model"]
    shown = shown_command(command, {"VLLM_CPU_KVCACHE_SPACE": "1", "NOTE": "a b"}, "sk-xyz-123")
    assert shown == ("VLLM_API_KEY=<redacted> VLLM_CPU_KVCACHE_SPACE=1 NOTE='a b' /opt/venv/bin/python -m "
                     "vllm.entrypoints.openai.api_server --model '/models/my model'")  # fmt: skip
    assert shown_command(["vllm", "serve", "m"], {}, None) == "vllm serve m"
    assert shown_command(["vllm"], {"TOKENIZERS_PARALLELISM": "false"}, "k") == (
        "VLLM_API_KEY=<redacted> TOKENIZERS_PARALLELISM=false vllm"
    )  # a name the block allowed stays readable
    assert redact("TOKENIZERS_PARALLELISM=false AWS_SECRET_ACCESS_KEY=x GH_KEYS=y MAX_TOKENS=8 vllm") == (
        "TOKENIZERS_PARALLELISM=false AWS_SECRET_ACCESS_KEY=<redacted> GH_KEYS=<redacted> MAX_TOKENS=8 vllm"
    )
