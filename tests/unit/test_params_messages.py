"""A params, sweep or classes file that is not valid YAML is one line saying where (line and column) and what; an
unknown name is one line with the names allowed and, where one is close, the name that was likely meant."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError, SweepError
from toolkit.base.yaml_files import allowed_names
from toolkit.batch.sweep import load_sweep
from toolkit.params import load_run_file
from toolkit.rates.classes import read_classes_file

pytestmark = pytest.mark.unit


def test_bad_yaml_is_one_line_naming_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "params.yaml"
    path.write_text("contexts: [64]\nconcurrency: [1\nduration_s: 5\n")
    with pytest.raises(ParamsError) as info:
        load_run_file(path)
    assert str(info.value) == (
        f"params file: {path} is not valid YAML: line 3, column 11: expected ',' or ']', but got ':'"
    )
    with pytest.raises(SweepError, match=r"is not valid YAML: line 3, column 11: expected ','"):
        load_sweep(path)
    with pytest.raises(ParamsError, match=r"^classes: .* is not valid YAML: line 3, column 11: expected ','"):
        read_classes_file(path)


@pytest.mark.parametrize(
    ("text", "load", "ending"),
    [
        ("durration_s: 5\n", load_run_file, "; did you mean duration_s?"),
        ("server: {command: vllm, health_timeout: 5}\n", load_run_file, "; did you mean health_timeout_s?"),
        ("colour: red\n", load_run_file, ", launch_command"),  # nothing close: the names allowed alone
        ("interleav: 4\nvariants: [{label: a}]\n", load_sweep, "; did you mean interleave?"),
    ],
)
def test_an_unknown_name_says_which_was_likely_meant(
    tmp_path: Path, text: str, load: Callable[[Path], object], ending: str
) -> None:
    path = tmp_path / "params.yaml"
    path.write_text(f"base_url: http://127.0.0.1:8000\ncontexts: ['64']\n{text}")
    with pytest.raises((ParamsError, SweepError)) as info:
        load(path)
    message = str(info.value)
    assert "unknown" in message and "allowed: " in message and "\n" not in message
    assert message.endswith(ending), message


def test_allowed_names_suggests_only_a_close_one() -> None:
    assert allowed_names("concurency", ["contexts", "concurrency"]) == (
        "allowed: contexts, concurrency; did you mean concurrency?"
    )
    assert allowed_names("zzz", ["contexts", "concurrency"]) == "allowed: contexts, concurrency"
