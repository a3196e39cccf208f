"""Build the tiny random-weight Llama that the embedded vLLM serves. Runs in .venv-vllm, offline.

Usage: python build_tiny_model.py OUT_DIR
Seeded throughout, so two builds give identical files. Output text is gibberish; timing is real.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

VOCAB_SIZE = 4096
MAX_POSITIONS = 32768
SEED = 1234
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]


def corpus(lines: int = 20000) -> list[str]:
    """Generated English-like text: syllable words, digits and punctuation."""
    rng = random.Random(SEED)
    syllables = [a + b for a in "bcdfghklmnprstvwz" for b in "aeiou"] + ["th", "st", "ing", "er", "an"]
    out = []
    for _ in range(lines):
        words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(rng.randint(5, 20))]
        out.append(" ".join(words) + rng.choice([".", ",", "?", "!", f" {rng.randint(0, 9999)}."]))
    return out


def build_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>", model_max_length=MAX_POSITIONS
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def build_model(out: Path) -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=MAX_POSITIONS,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=2,
        tie_word_embeddings=True,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)


def main(out_dir: str) -> None:
    out = Path(out_dir)
    tmp = out.with_name(out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    build_tokenizer(tmp)
    build_model(tmp)
    (tmp / "toolkit-tiny-model.json").write_text(json.dumps({"seed": SEED, "vocab_size": VOCAB_SIZE}))
    tmp.rename(out)
    print(f"tiny model written to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
