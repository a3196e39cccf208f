"""A launch command shown in a report names no local path: relative inside the repository, ``~`` for the home."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolkit.results.local_paths import REPO_ROOT, public_paths
from toolkit.servers.launch import shown_command

REPO = Path("/home/ana/src/toolkit")
HOME = Path("/home/ana")


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/home/ana/src/toolkit/.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server",
         ".venv-vllm/bin/python -m vllm.entrypoints.openai.api_server"),
        ("vllm serve --model /home/ana/src/toolkit/.cache/tiny-llama/m", "vllm serve --model .cache/tiny-llama/m"),
        ("vllm serve --model=/home/ana/models/llama --download-dir /home/ana",
         "vllm serve --model=~/models/llama --download-dir ~"),
        ("PYTHONPATH=/home/ana/src/toolkit:/home/ana/lib vllm", "PYTHONPATH=.:~/lib vllm"),
        ("python '/home/ana/my models/x' /home/ana/src/toolkit/", "python '~/my models/x' ."),
        ("/opt/venv/bin/python --model /models/m", "/opt/venv/bin/python --model /models/m"),  # elsewhere: as it is
        ("/home/anastasia/x /data/home/ana/y /home/ana/src/toolkit2/z",  # only whole path components match
         "/home/anastasia/x /data/home/ana/y ~/src/toolkit2/z"),
        ("vllm serve m --port 8000", "vllm serve m --port 8000"),
    ],
)  # fmt: skip
def test_paths_in_the_repository_are_relative_and_the_home_is_a_tilde(text: str, shown: str) -> None:
    assert public_paths(text, repo=REPO, home=HOME) == shown


def test_a_symlinked_checkout_is_recognised_by_either_spelling(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    text = f"{tmp_path}/link/.venv/bin/python {tmp_path}/real/.venv/bin/python"
    assert public_paths(text, repo=tmp_path / "link", home=Path("/nowhere")) == ".venv/bin/python .venv/bin/python"


def test_the_shown_launch_command_has_no_local_path() -> None:
    python = REPO_ROOT / ".venv-vllm" / "bin" / "python"
    model = str(REPO_ROOT / ".cache" / "tiny-llama")
    shown = shown_command([str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", model],
                          {"VLLM_CPU_KVCACHE_SPACE": "1"}, None)  # fmt: skip
    assert shown == ("VLLM_CPU_KVCACHE_SPACE=1 .venv-vllm/bin/python -m vllm.entrypoints.openai.api_server "
                     "--model .cache/tiny-llama")  # fmt: skip
    assert shown_command(["vllm", "serve", str(Path.home() / "models" / "m")], {}, None) == "vllm serve ~/models/m"


def test_a_given_launch_command_loses_its_local_paths_in_run_json(monkeypatch: pytest.MonkeyPatch) -> None:
    from toolkit.matrix import environment
    from toolkit.matrix.discovery import ServerInfo
    from toolkit.params import make_params

    monkeypatch.setattr(environment, "environment_info", lambda: {"machine": {}, "gpus": {"devices": []}})
    monkeypatch.setattr(environment, "served_here", lambda base_url, launched: False)
    params = make_params({"launch_command": f"{REPO_ROOT}/.venv-vllm/bin/vllm serve {Path.home()}/models/m"})
    server = ServerInfo("http://127.0.0.1:8000", "m", 4096, None, None, "none", None, None, True)
    info = environment.run_info(params, server, "run1", None)
    assert info.launch_command == ".venv-vllm/bin/vllm serve ~/models/m"
