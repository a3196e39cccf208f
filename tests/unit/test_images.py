"""Images in chat requests (toolkit.loadgen.images): the size parsed, each seed's PNG made alike every time, the parts
put beside a message's text and counted in the record, and the rate sweep's parameters refused in one line."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from toolkit.base.errors import ParamsError
from toolkit.loadgen.images import (
    IMAGE_TOKENS_MAX,
    add_images,
    image_count,
    image_png,
    image_url,
    parse_image_size,
)
from toolkit.loadgen.open_loop import REQUEST_FIELDS, PlannedRequest, record
from toolkit.loadgen.stream_events import StreamResult, build_request, prompt_tokens_max
from toolkit.method.goodput import RECORD_DEFAULTS
from toolkit.rates.params import make_rate_params


def decoded(url: str) -> Image.Image:
    head, _, data = url.partition(",")
    assert head == "data:image/png;base64"
    return Image.open(io.BytesIO(base64.b64decode(data)))


def test_a_size_is_width_by_height() -> None:
    assert parse_image_size("224x224") == (224, 224)
    assert parse_image_size(" 32X24 ") == (32, 24)


@pytest.mark.parametrize("text", ["0x64", "64x0", "64", "ax b", "64x", "-1x5", "4097x1", "2x2x2"])
def test_a_size_that_is_not_one_is_one_line(text: str) -> None:
    with pytest.raises(ParamsError) as caught:
        parse_image_size(text)
    assert "\n" not in str(caught.value) and repr(text) in str(caught.value)


def test_each_seed_makes_its_own_png_and_the_same_one_again() -> None:
    first = image_png(40, 30, (0, 1, 2, 0))
    assert image_png(40, 30, (0, 1, 2, 0)) == first  # a run repeats
    assert image_png(40, 30, (0, 1, 3, 0)) != first  # another request, another image
    picture = Image.open(io.BytesIO(first))
    assert picture.format == "PNG" and picture.size == (40, 30) and picture.mode == "RGB"
    assert len(set(picture.convert("RGB").tobytes()[:48])) > 3  # coloured cells, not one flat colour
    assert decoded(image_url(40, 30, (0, 1, 2, 0))).tobytes() == picture.tobytes()


def test_images_go_after_the_last_user_messages_text_and_are_counted() -> None:
    _, body = build_request("chat", "m", "describe", 8)
    reply = {"role": "assistant", "content": "a dataset's reply"}
    body["messages"] = [{"role": "system", "content": "be brief"}, *body["messages"], reply]
    urls = [image_url(8, 8, (0, 0, 0, k)) for k in range(3)]
    add_images(body, urls)
    system, user, after = body["messages"]
    assert system == {"role": "system", "content": "be brief"} and after == reply
    assert user["role"] == "user" and user["content"][0] == {"type": "text", "text": "describe"}
    assert [p["image_url"]["url"] for p in user["content"][1:]] == urls
    assert all(p["type"] == "image_url" for p in user["content"][1:])
    assert image_count(body) == 3
    assert image_count(build_request("chat", "m", "plain", 8)[1]) == 0
    assert image_count(build_request("completions", "m", "plain", 8)[1]) == 0


def test_the_record_holds_the_images_its_request_carried() -> None:
    _, body = build_request("chat", "m", "hi", 2)
    add_images(body, [image_url(8, 8, (0, 0, 0, k)) for k in range(2)])
    result = StreamResult(started=1.0, first_token_at=1.1, token_events=[(1.1, 1), (1.2, 2)], completion_tokens=2,
                          done=True)  # fmt: skip
    row = record(0, 0.0, result, PlannedRequest("/v1/chat/completions", body, 4), 0.0)
    assert set(row) == set(REQUEST_FIELDS) and row["images"] == 2
    plain = record(0, 0.0, result, PlannedRequest(*build_request("chat", "m", "hi", 2), 4), 0.0)
    assert plain["images"] == 0 and RECORD_DEFAULTS["images"] == 0


def test_an_image_may_count_more_prompt_tokens_than_its_bytes() -> None:
    assert prompt_tokens_max(500, 2) == prompt_tokens_max(500) + 2 * IMAGE_TOKENS_MAX


def test_the_sweep_takes_images_and_their_size() -> None:
    params = make_rate_params({"images": 2, "image_size": "32x24"})
    assert params.images == 2 and params.image_dimensions() == (32, 24)
    assert make_rate_params({"images": 1}).image_dimensions() == (224, 224)
    assert make_rate_params({}).images == 0


@pytest.mark.parametrize(
    ("values", "said"),
    [
        ({"image_size": "64x64"}, "image_size: needs images (how many each request carries)"),
        ({"images": 0, "image_size": "64x64"}, "image_size: needs images"),
        ({"images": 1, "image_size": "0x64"}, "image_size: '0x64': each side from 1 to 4096 pixels"),
        ({"images": 1, "image_size": "64"}, "image_size: '64' is not an image size; allowed: WxH in pixels"),
        ({"images": 1, "image_size": "ax b"}, "image_size: 'ax b' is not an image size"),
        ({"images": -1}, "images: Input should be greater than or equal to 0"),
        ({"images": 65}, "images: Input should be less than or equal to 64"),
        ({"images": 1, "endpoint": "completions"}, "images: chat only; endpoint completions takes none"),
        ({"images": 1, "endpoint": "embeddings"}, "images: chat only; endpoint embeddings takes none"),
        ({"images": 1, "workload": "conversation", "turns": 2}, "images: apply to single requests, not to"),
        ({"images": 1, "classes": [{"name": "a", "weight": 1, "input_tokens": 8, "output_tokens": 8,
                                   "endpoint": "completions"}]},
         "classes.a: endpoint completions takes no images"),
    ],
)  # fmt: skip
def test_bad_image_parameters_are_one_line(values: dict[str, object], said: str) -> None:
    with pytest.raises(ParamsError) as caught:
        make_rate_params(values)
    line = str(caught.value)
    assert "\n" not in line and line.startswith(said), line
