"""Images in chat requests: synthetic PNGs, each made from its own seed, sent as OpenAI `image_url` content parts.

A request that carries images has its last user message's content as a list of parts: its text
(`{"type": "text", ...}`), then one `{"type": "image_url", "image_url": {"url": "data:image/png;base64,..."}}` per
image. Each image is a WxH PNG of a grid of `CELLS` x `CELLS` coloured cells drawn from its seed (nearest-neighbour
scaled): the same seed, the same bytes (a run repeats), another seed, other colours (requests differ). A grid
compresses to a few KB (2,065 bytes at 224x224) and is made in about 1 ms; each seed's image is made once
(`image_url` is cached). A size that is not WxH of positive whole numbers up to `MAX_SIDE` is one line
(ParamsError), before anything is sent.
"""

from __future__ import annotations

import base64
import functools
import io
import re
from typing import Any

import numpy as np

from toolkit.base.errors import ParamsError

MAX_IMAGES = 64  # images in one request
MAX_SIDE = 4096  # pixels of an image's width or height
DEFAULT_SIZE = "224x224"
CELLS = 16  # an image is a grid of CELLS x CELLS colours
# The most prompt tokens one image can count: Qwen2-VL's default `max_pixels` (12,845,056) in 28x28 patches; a model
# that pads every image to a fixed grid (LLaVA: 576 tokens) counts less, however small the image.
IMAGE_TOKENS_MAX = 16384
_SIZE = re.compile(r"(\d+)x(\d+)")


def parse_image_size(text: str) -> tuple[int, int]:
    """Width and height from "WxH" (e.g. 224x224); ParamsError in one line (without the parameter's name)."""
    found = _SIZE.fullmatch(text.strip().lower())
    if found is None:
        raise ParamsError(f"{text!r} is not an image size; allowed: WxH in pixels, e.g. {DEFAULT_SIZE}")
    width, height = int(found[1]), int(found[2])
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ParamsError(f"{text!r}: each side from 1 to {MAX_SIDE} pixels, e.g. {DEFAULT_SIZE}")
    return width, height


def image_png(width: int, height: int, seed: tuple[int, ...]) -> bytes:
    """A `width` x `height` PNG of `CELLS` x `CELLS` colours drawn from `seed`: the same seed, the same bytes."""
    from PIL import Image  # only a sweep that sends images needs Pillow

    cells = np.random.default_rng(seed).integers(0, 256, (CELLS, CELLS, 3), dtype=np.uint8)
    picture = Image.fromarray(cells).resize((width, height), Image.Resampling.NEAREST)
    out = io.BytesIO()
    picture.save(out, format="PNG")
    return out.getvalue()


@functools.lru_cache(maxsize=256)  # at most 256 x 81 KB (4096x4096 images) kept
def image_url(width: int, height: int, seed: tuple[int, ...]) -> str:
    """`image_png` as a `data:image/png;base64,` URL, made once per seed and size (of the last 256)."""
    return "data:image/png;base64," + base64.b64encode(image_png(width, height, seed)).decode("ascii")


def add_images(body: dict[str, Any], urls: list[str]) -> None:
    """Put `urls` in a chat body as image parts after the text of its last user message (of its last message when
    none is the user's; the other messages and the rest of the body as they were)."""
    messages = body["messages"]
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=len(messages) - 1)
    content = messages[last]["content"]
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    parts += [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    body["messages"] = [*messages[:last], {**messages[last], "content": parts}, *messages[last + 1 :]]


def image_count(body: dict[str, Any]) -> int:
    """The image parts a request body carries (0 for a completions or embeddings body, or plain text)."""
    return sum(
        1
        for message in body.get("messages") or ()
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
        if isinstance(part, dict) and part.get("type") == "image_url"
    )
