"""The worked CI example (`examples/ci/`, issue 43) as a reader copies it: each workflow's toolkit commands parse;
the batch it runs reads the sweep it names; the gate's `--baseline` and `--candidate` are that sweep's
configurations and its folder is the batch's `--out`; the sweeps launch the embedded vLLM as `make install model`
leaves it (the program and model folder, the embedded server's variables, its port in `base_url`), and the two
configurations differ in `--max-num-seqs` alone, while the A/A's do not differ at all.

Running the example (8 vLLM launches, about 7 minutes here) is left to docs/gate.md's measured run: the suite's
engine tier has no room for it (docs/testing.md)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.unit.test_doc_commands import arguments, problems
from toolkit.batch.sweep import Variant, load_sweep
from toolkit.cli.entry import build_parser
from toolkit.servers.embedded.server import SERVED_MODEL_NAME, vllm_settings

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ci"
SWEEPS = ("sweep.yaml", "sweep-aa.yaml")
PROGRAM = ".venv/bin/vllm-speedtest "

pytestmark = pytest.mark.unit


def workflow_commands(path: Path) -> list[str]:
    """The shell commands a workflow runs: GitHub's steps' `run:`, GitLab's jobs' `script:` lines."""
    document: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    steps = [step.get("run") for job in document.get("jobs", {}).values() for step in job.get("steps", [])]
    scripts = [line for job in document.values() if isinstance(job, dict) for line in job.get("script", [])]
    return [" ".join(str(c).split()) for c in [*steps, *scripts] if c]


def toolkit_commands(path: Path) -> dict[str, list[str]]:
    """The workflow's toolkit commands by subcommand, each parsed by the command line (a refusal fails here)."""
    parser, found = build_parser(), dict[str, list[str]]()
    for command in workflow_commands(path):
        if not command.startswith(PROGRAM):
            continue
        with contextlib.redirect_stderr(io.StringIO()):
            assert problems(parser, command, whole=True) is None, command
        words = arguments(command)
        found[words[0]] = words
    return found


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def configurations(sweep: list[Variant]) -> dict[str, Variant]:
    """Each configuration's first round, in the sweep's order (round 1's)."""
    return {v.configuration: v for v in sweep if v.round == 1 and v.configuration is not None}


@pytest.mark.parametrize("workflow", ["github-actions.yml", "gitlab-ci.yml"])
def test_a_workflow_measures_the_sweep_and_gates_its_folder(workflow: str) -> None:
    path = EXAMPLE / workflow
    commands = toolkit_commands(path)
    assert set(commands) == {"batch", "gate"}
    batch, gate = commands["batch"], commands["gate"]
    sweep = load_sweep(ROOT / batch[1])  # the path is the repository root's, where CI runs it
    assert gate[1] == option(batch, "--out")  # the gate reads the folder the batch wrote
    assert [option(gate, "--baseline"), option(gate, "--candidate")] == list(configurations(sweep))
    assert option(gate, "--max-regression") == "10%"
    assert "make install model" in workflow_commands(path)  # what installs the program, vLLM and the model
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^install:", makefile, re.M) and re.search(r"^model:", makefile, re.M)


@pytest.mark.parametrize("name", SWEEPS)
def test_a_sweep_launches_the_embedded_vllm_in_four_interleaved_rounds(name: str) -> None:
    sweep = load_sweep(EXAMPLE / name)
    assert [v.round for v in sweep] == [1, 1, 2, 2, 3, 3, 4, 4]
    orders = [[v.configuration for v in sweep if v.round == r] for r in (1, 2)]
    assert orders[0] == orders[1][::-1]  # A B, then B A
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    model_dir = re.search(r"^MODEL := (\S+)/[^/\s]+$", makefile, re.M)
    assert model_dir is not None
    for variant in sweep:
        assert variant.server is not None
        command = variant.server.command
        assert command[:3] == [".venv-vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]  # make vllm's
        assert option(command, "--model") == model_dir.group(1)  # the folder `make model` builds
        assert option(command, "--served-model-name") == SERVED_MODEL_NAME
        url = urlsplit(variant.params.base_url)
        assert (option(command, "--host"), int(option(command, "--port"))) == (url.hostname, url.port)
        assert variant.server.env == vllm_settings(kv_cache_gib=1)  # the embedded vLLM's variables, no secret


def test_the_two_configurations_differ_in_max_num_seqs_alone_and_the_aa_in_nothing() -> None:
    def launched(variant: Variant) -> tuple[list[str], dict[str, str], Any]:
        assert variant.server is not None
        params = variant.params.model_dump(exclude={"run_label"})
        return variant.server.command, variant.server.env, params

    baseline, candidate = configurations(load_sweep(EXAMPLE / "sweep.yaml")).values()
    (b_cmd, b_env, b_params), (c_cmd, c_env, c_params) = launched(baseline), launched(candidate)
    assert (b_env, b_params) == (c_env, c_params)
    assert [(b, c) for b, c in zip(b_cmd, c_cmd, strict=True) if b != c] == [("4", "1")]
    assert option(b_cmd, "--max-num-seqs") == "4" and baseline.params.concurrency == [4]
    a, b = configurations(load_sweep(EXAMPLE / "sweep-aa.yaml")).values()
    assert launched(a) == launched(b) and a.server is not None and baseline.server is not None
    assert a.server.command == b_cmd  # the A/A is the baseline twice


def shown_commands(sweep: Path) -> list[str]:
    """The commands a sweep's opening comment shows (its indented lines, continuations joined)."""
    commands, pending = [], ""
    for line in sweep.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#   "):
            continue
        text = (pending + " " + line[1:].strip()).strip()
        pending = text[:-1] if text.endswith("\\") else ""
        if not pending:
            commands.append(text)
    return commands


@pytest.mark.parametrize("name", SWEEPS)
def test_the_commands_a_sweep_shows_in_its_comment_run_it_and_gate_its_folder(name: str) -> None:
    commands = shown_commands(EXAMPLE / name)
    assert [c.split()[:3] for c in commands] == [[PROGRAM.strip(), "batch", f"examples/ci/{name}"],
                                                 [PROGRAM.strip(), "gate", arguments(commands[0])[3]]]  # fmt: skip
    parser = build_parser()
    with contextlib.redirect_stderr(io.StringIO()):
        assert [c for c in commands if problems(parser, c, whole=True) is not None] == []
    gate = arguments(commands[1])
    if "--baseline" in gate:
        assert [option(gate, "--baseline"), option(gate, "--candidate")] == list(
            configurations(load_sweep(EXAMPLE / name))
        )
