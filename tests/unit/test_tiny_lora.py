"""The tiny llama's LoRA adapter (issue 47): its files, the launch flags that serve it, the check that refuses it."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from toolkit.base.errors import ParamsError
from toolkit.cli.entry import build_parser
from toolkit.servers.embedded.server import LORA_NAME, ServerConfig, ensure_lora, launch_command

# The sizes of .cache/tiny-llama/config.json (build_tiny_model.py): q_proj 256 -> 256, v_proj 256 -> 2 heads × 64.
TINY_LLAMA = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "num_hidden_layers": 2}  # fmt: skip


def _tensors(path: Path) -> tuple[dict[str, dict[str, Any]], bytes]:
    """A safetensors file's header (without its metadata) and its data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    header.pop("__metadata__")
    return header, raw[8 + length :]


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    (tmp_path / "tiny-llama").mkdir()
    (tmp_path / "tiny-llama" / "config.json").write_text(json.dumps(TINY_LLAMA))
    return tmp_path / "tiny-llama"


def test_the_adapter_is_peft_lora_rank_8_on_q_and_v_with_small_nonzero_b(model_dir: Path) -> None:
    adapter = ensure_lora(model_dir.with_name("tiny-lora"), model_dir)
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert {k: config[k] for k in ("peft_type", "r", "lora_alpha", "target_modules", "bias", "task_type")} == {
        "peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "task_type": "CAUSAL_LM"}  # fmt: skip
    assert config["base_model_name_or_path"] == str(model_dir)
    header, data = _tensors(adapter / "adapter_model.safetensors")
    prefix = "base_model.model.model.layers.{}.self_attn.{}_proj.lora_{}.weight"
    assert {name: tuple(h["shape"]) for name, h in header.items()} == {
        prefix.format(layer, module, ab): shape
        for layer in (0, 1)
        for module, out in (("q", 256), ("v", 128))
        for ab, shape in (("A", (8, 256)), ("B", (out, 8)))
    }
    assert {h["dtype"] for h in header.values()} == {"F32"}
    assert max(h["data_offsets"][1] for h in header.values()) == len(data)
    start, end = header[prefix.format(1, "v", "B")]["data_offsets"]
    b = struct.unpack(f"<{(end - start) // 4}f", data[start:end])
    assert all(0 < abs(x) <= 0.01 for x in b)


def test_the_adapter_is_built_once_and_seeded(model_dir: Path, tmp_path: Path) -> None:
    first = ensure_lora(tmp_path / "one", model_dir) / "adapter_model.safetensors"
    built_ns = first.stat().st_mtime_ns
    ensure_lora(tmp_path / "one", model_dir)
    assert first.stat().st_mtime_ns == built_ns  # the cached folder is reused
    second = ensure_lora(tmp_path / "two", model_dir) / "adapter_model.safetensors"
    assert first.read_bytes() == second.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "tiny-llama", "two"]  # no temporary folder left


def test_lora_serves_the_adapter_beside_the_model() -> None:
    command = launch_command(ServerConfig(lora=True), 8000, Path("/m"), Path("/cache/tiny-lora"))
    at = command.index("--enable-lora")
    assert command[at : at + 5] == ["--enable-lora", "--lora-modules", "tiny-lora=/cache/tiny-lora",
                                    "--max-lora-rank", "8"]  # fmt: skip
    assert command[command.index("--served-model-name") + 1] == "tiny-llama" and LORA_NAME == "tiny-lora"
    assert "--enable-lora" not in launch_command(ServerConfig(), 8000, Path("/m"))
    assert build_parser().parse_args(["serve", "--lora"]).lora and not build_parser().parse_args(["serve"]).lora


def test_the_embedding_model_refuses_lora() -> None:
    with pytest.raises(ParamsError, match=r"^lora: tiny-embedding takes no LoRA adapter; allowed with tiny-llama$"):
        ServerConfig(model="tiny-embedding", lora=True).check()
    ServerConfig(lora=True).check()
