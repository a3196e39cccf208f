"""A random-weight LoRA adapter for the tiny llama, in PEFT's format, written with the standard library alone.

The adapter (rank 8 on q_proj and v_proj) is seeded, so two builds give identical files. Its lora_B is small and
nonzero: served as `tiny-lora`, it changes the model's outputs a little, at LoRA's real cost per token.
"""

from __future__ import annotations

import json
import random
import struct
import sys
from array import array
from pathlib import Path

__all__ = ["LORA_ALPHA", "LORA_RANK", "TARGET_MODULES", "adapter_shapes", "write_adapter"]

LORA_RANK = 8
LORA_ALPHA = 16
TARGET_MODULES = ("q_proj", "v_proj")
SEED = 4321
B_SCALE = 0.01  # lora_B's entries lie in ±B_SCALE: the update is about a tenth of q_proj's and v_proj's weights
WEIGHTS_FILE = "adapter_model.safetensors"


def adapter_shapes(model_config: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Each tensor's name and (rows, columns): lora_A is rank × in, lora_B out × rank (from a llama config.json)."""
    hidden = model_config["hidden_size"]
    head_dim = model_config.get("head_dim") or hidden // model_config["num_attention_heads"]
    out_features = {"q_proj": model_config["num_attention_heads"] * head_dim,
                    "v_proj": model_config["num_key_value_heads"] * head_dim}  # fmt: skip
    shapes = {}
    for layer in range(model_config["num_hidden_layers"]):
        for module in TARGET_MODULES:
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            shapes[f"{prefix}.lora_A.weight"] = (LORA_RANK, hidden)
            shapes[f"{prefix}.lora_B.weight"] = (out_features[module], LORA_RANK)
    return shapes


def _values(rng: random.Random, name: str, count: int, in_features: int) -> array:
    """lora_A as PEFT initialises it (uniform in ±1/sqrt(in)), lora_B small instead of PEFT's zeros."""
    bound = 1 / in_features**0.5 if ".lora_A." in name else B_SCALE
    values = array("f", (rng.uniform(-bound, bound) for _ in range(count)))
    if sys.byteorder == "big":
        values.byteswap()  # safetensors is little-endian
    return values


def _safetensors(tensors: dict[str, tuple[tuple[int, int], array]]) -> bytes:
    """float32 tensors in the safetensors layout: a length, a JSON header of offsets, the raw data."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (shape, values) in tensors.items():
        size = len(values) * values.itemsize
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(values.tobytes() for _, values in tensors.values())


def write_adapter(out: Path, model_dir: Path) -> None:
    """Write adapter_config.json and adapter_model.safetensors into `out` for the llama in `model_dir`."""
    model_config = json.loads((model_dir / "config.json").read_text())
    rng = random.Random(SEED)
    tensors = {name: (shape, _values(rng, name, shape[0] * shape[1], model_config["hidden_size"]))
               for name, shape in adapter_shapes(model_config).items()}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    (out / WEIGHTS_FILE).write_bytes(_safetensors(tensors))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": LORA_RANK, "lora_alpha": LORA_ALPHA,
              "lora_dropout": 0.0, "target_modules": list(TARGET_MODULES), "bias": "none",
              "base_model_name_or_path": str(model_dir), "fan_in_fan_out": False, "inference_mode": True}  # fmt: skip
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
