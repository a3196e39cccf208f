"""Images against the fault server: every request of a rate step carries its images beside its text, of the stated
size, made from its seed (a second run sends the same ones); each record says how many; without images a body is
exactly the plain request's; bad image parameters stop the command in one line before anything is sent."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import nbformat
import orjson
import pytest
from PIL import Image

from tests.faultserver import FaultServer
from tests.rate_folders import add_matrix_results
from toolkit.base.errors import RunRefused
from toolkit.cli.entry import main
from toolkit.jupyter.reports import markdown_report
from toolkit.loadgen.client import StreamClient, StreamResult, build_request
from toolkit.rates.files import rates_dir, read_records
from toolkit.rates.params import RateParams, make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.reports.class_compare import sweep_summary
from toolkit.results.rate_runs import load_rate_sweep

pytestmark = pytest.mark.timeout(60)


def image_parts(entry: dict[str, Any]) -> tuple[str, list[str]]:
    """The text and the image URLs of a logged chat request's one user message."""
    (message,) = entry["prompt"]
    text, *images = message["content"]
    assert message["role"] == "user" and text["type"] == "text"
    assert all(part["type"] == "image_url" for part in images)
    return text["text"], [part["image_url"]["url"] for part in images]


def sweep_params(server: FaultServer, out: Path, **values: Any) -> RateParams:
    return make_rate_params({"base_url": server.base_url, "rates": [50, 100], "requests_per_step": 4,
                             "input_tokens": 40, "output_tokens": 4, "results_dir": str(out), **values})  # fmt: skip


def sweep(server: FaultServer, out: Path, **values: Any) -> Path:
    return run_rates(sweep_params(server, out, **values), say=lambda line: None)


def test_every_request_carries_its_images_of_the_stated_size(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = sweep(server, tmp_path / "run", images=2, image_size="32x24")
        sent = server.completion_requests()
        sweep(server, tmp_path / "again", images=2, image_size="32x24")
        again = server.completion_requests()[len(sent) :]
    assert len(sent) == 8
    urls = []
    for entry in sent:
        text, images = image_parts(entry)
        assert text.startswith("[rate sweep ") and len(images) == 2
        for url in images:
            head, _, data = url.partition(",")
            picture = Image.open(io.BytesIO(base64.b64decode(data)))
            assert head == "data:image/png;base64" and picture.format == "PNG" and picture.size == (32, 24)
        urls += images
    assert len(set(urls)) == 16  # each request its own images
    assert sorted(urls) == sorted(url for entry in again for url in image_parts(entry)[1])  # a run repeats
    records = read_records(out)
    assert len(records) == 8 and list(records["images"]) == [2] * 8 and records["error"].isna().all()
    summary = sweep_summary(load_rate_sweep(out))
    assert summary.endswith(" Each request carried 2 images of 32x24 pixels (synthetic PNGs)."), summary
    report = markdown_report(add_matrix_results(out), nbformat.v4.new_notebook())  # report.md says it too
    rates = report[report.index("## Open-loop rates") :]
    assert " Each request carried 2 images of 32x24 pixels (synthetic PNGs).\n\n" in rates, rates[:600]


def test_without_images_a_body_is_the_plain_requests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    payloads: list[bytes] = []
    stream = StreamClient.stream

    async def kept(self: StreamClient, path: str, body: dict[str, Any], result: StreamResult | None = None) -> Any:
        payloads.append(orjson.dumps(body))
        return await stream(self, path, body, result)

    monkeypatch.setattr(StreamClient, "stream", kept)
    with FaultServer(token_interval_s=0.002) as server:
        out = sweep(server, tmp_path / "run", images=0)
    assert len(payloads) == 8
    for payload in payloads:
        body = orjson.loads(payload)
        (message,) = body["messages"]
        plain = build_request("chat", body["model"], message["content"], body["max_tokens"])[1]
        assert payload == orjson.dumps(plain)  # byte for byte: no image part, no other change
    assert list(read_records(out)["images"]) == [0] * 8
    assert "image" not in sweep_summary(load_rate_sweep(out))


def test_a_sweep_from_before_images_resumes_without_them_and_not_with_them(tmp_path: Path) -> None:
    with FaultServer(token_interval_s=0.002) as server:
        out = sweep(server, tmp_path / "run")
        kept = rates_dir(out) / "sweep.json"
        older = {k: v for k, v in json.loads(kept.read_text()).items() if k not in ("images", "image_size")}
        kept.write_text(json.dumps(older))  # as a sweep from before images wrote it
        sent = len(server.completion_requests())
        run_rates(sweep_params(server, out), say=lambda line: None, resume=True)  # nothing left to measure
        with pytest.raises(RunRefused, match=r"other parameters \(images: 0 -> 1\); choose another folder$"):
            run_rates(sweep_params(server, out, images=1), say=lambda line: None, resume=True)
        assert len(server.completion_requests()) == sent


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--image-size", "64x64"], "image_size: needs images"),
        (["--images", "1", "--image-size", "0x64"], "image_size: '0x64': each side from 1 to 4096 pixels"),
        (["--images", "1", "--image-size", "64"], "image_size: '64' is not an image size"),
        (["--images", "1", "--image-size", "ax b"], "image_size: 'ax b' is not an image size"),
        (["--images", "-1"], "images: Input should be greater than or equal to 0"),
        (["--images", "1", "--endpoint", "completions"], "images: chat only; endpoint completions takes none"),
        (["--images", "1", "--endpoint", "embeddings"], "images: chat only; endpoint embeddings takes none"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_sent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], said: str
) -> None:
    with FaultServer() as server:
        status = main(["rates", "--base-url", server.base_url, "--rates", "1", "--requests", "2", *args,
                       "--out", str(tmp_path / "run")])  # fmt: skip
        log = server.log
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: {said}"), err
    assert log == [] and not (tmp_path / "run").exists()
