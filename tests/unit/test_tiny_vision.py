"""The embedded vision model `tiny-vision` (issue 46): the launch that serves it, the checks that refuse what it
cannot take, and the builder's image tokens as the toolkit states them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from toolkit.base.errors import ParamsError
from toolkit.cli.entry import build_parser
from toolkit.servers.embedded import build_tiny_vision, models
from toolkit.servers.embedded.server import POOLING_FLAGS, STRUCTURED_FLAGS, ServerConfig, launch_command


def test_the_vision_model_is_served_under_its_name_with_the_generation_flags() -> None:
    command = launch_command(ServerConfig(model="tiny-vision", max_num_seqs=2), 8000, Path("/cache/tiny-vision"))
    assert command[command.index("--model") + 1] == "/cache/tiny-vision"
    assert command[command.index("--served-model-name") + 1] == "tiny-vision"
    assert "--enable-per-request-metrics" in command and " ".join(STRUCTURED_FLAGS) in " ".join(command)
    assert POOLING_FLAGS[0] not in command and command[-2:] == ["--max-num-seqs", "2"]
    assert build_parser().parse_args(["serve", "--model", "tiny-vision"]).model == "tiny-vision"


def test_the_vision_model_refuses_lora_and_unknown_models_are_named() -> None:
    with pytest.raises(ParamsError, match=r"^lora: tiny-vision takes no LoRA adapter; allowed with tiny-llama$"):
        ServerConfig(model="tiny-vision", lora=True).check()
    with pytest.raises(ParamsError, match=r"^model: 'tiny-audio'; allowed: tiny-llama, tiny-embedding, tiny-vision$"):
        ServerConfig(model="tiny-audio").check()
    ServerConfig(model="tiny-vision").check()


def test_the_image_tokens_the_toolkit_states_are_the_builders() -> None:
    assert models.VISION_IMAGE_TOKENS == build_tiny_vision.QUERY_TOKENS == 32


def test_a_built_model_folder_is_reused_and_the_model_names_pick_their_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = tmp_path / "tiny-vision"
    built.mkdir()
    (built / "toolkit-tiny-model.json").write_text(json.dumps({"seed": 1234, "image_tokens": 32}))
    monkeypatch.setattr(models, "VLLM_PYTHON", tmp_path / "no-python")  # a build would fail: none is made
    assert models.ensure_vision_model(built, tmp_path / "tiny-llama") == built
    monkeypatch.setattr(models, "ensure_vision_model", lambda: built)
    monkeypatch.setattr(models, "ensure_model", lambda: tmp_path / "tiny-llama")
    assert models.model_folder("tiny-vision") == built
    assert models.model_folder("tiny-llama") == models.model_folder("tiny-embedding") == tmp_path / "tiny-llama"


def test_a_demo_whose_sweep_sends_images_is_served_by_the_vision_model() -> None:
    from toolkit.params import make_params
    from toolkit.rates.params import make_rate_params
    from toolkit.servers.embedded.server import DEMO_CONFIG, config_for

    chat, embeddings = make_params({"endpoint": "chat"}), make_params({"endpoint": "embeddings"})
    assert config_for(chat, DEMO_CONFIG, images=1) == replace(DEMO_CONFIG, model="tiny-vision")
    assert config_for(chat, DEMO_CONFIG) == DEMO_CONFIG and config_for(embeddings).model == "tiny-embedding"
    with pytest.raises(
        ParamsError, match=r"^rate_sweep\.images: 2 a request; the embedded vision model \(tiny-vision\) takes 1$"
    ):
        config_for(chat, DEMO_CONFIG, images=2)
    plain = {"base_url": "http://127.0.0.1:9", "rates": [1.0], "input_tokens": 64, "output_tokens": 8}
    assert make_rate_params(plain).most_images() == 0
    assert make_rate_params({**plain, "images": 1}).most_images() == 1
    classes = [{"name": "text", "weight": 1, "input_tokens": 64, "output_tokens": 8},
               {"name": "seen", "weight": 1, "input_tokens": 64, "output_tokens": 8, "images": 2}]  # fmt: skip
    mixed = {k: v for k, v in plain.items() if k not in ("input_tokens", "output_tokens")}
    assert make_rate_params({**mixed, "classes": classes}).most_images() == 2


def test_the_vision_demos_params_start_the_vision_model() -> None:
    from toolkit.jupyter.run_sweep import check_rate_sweep
    from toolkit.params import load_params
    from toolkit.servers.embedded.server import DEMO_CONFIG, config_for

    params = load_params(Path(__file__).resolve().parents[2] / "params" / "vision-demo.yaml")
    sweep = check_rate_sweep(params)
    assert sweep is not None and sweep.most_images() == 1 and sweep.image_dimensions() == (336, 336)
    assert config_for(params, DEMO_CONFIG, sweep.most_images()).model == "tiny-vision"
