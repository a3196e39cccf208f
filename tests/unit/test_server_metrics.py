"""`server_metrics`: several `/metrics` endpoints merged into one snapshot (summed, KV use the highest, the first's
cache facts), the URLs as a parameter (one-line errors), and `--server-metrics` on the commands that take it."""

from __future__ import annotations

import pytest

from toolkit.base.errors import ParamsError
from toolkit.cli.entry import main
from toolkit.matrix.discovery import metrics_source_text
from toolkit.matrix.prometheus import (
    CACHE_CONFIG,
    ENDPOINT_LABEL,
    GENERATION_TOKENS,
    KV_USAGE,
    RUNNING,
    WAITING,
    cache_config,
    counter_growth,
    delta,
    endpoint_growth,
    merge_snapshots,
    parse_metrics,
)
from toolkit.params import make_params
from toolkit.rates.params import make_rate_params, run_sweep_values
from toolkit.reports.rate_tables import endpoint_share_line


def scrape(running: int, waiting: int, kv: float, generated: float, blocks: int, engine_label: str = "") -> str:
    extra = f',endpoint="{engine_label}"' if engine_label else ""
    return f"""# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine="0",model_name="m"{extra}}} {running}.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} {waiting}.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {kv}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine="0",model_name="m"}} {generated}
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{{block_size="16",num_gpu_blocks="{blocks}",enable_prefix_caching="True"}} 1.0
"""


def test_two_replicas_scrapes_merge_summed_with_the_highest_kv_use_and_the_first_cache_facts() -> None:
    one, two = parse_metrics(scrape(3, 1, 0.25, 1000, 100)), parse_metrics(scrape(5, 0, 0.75, 500, 999))
    merged = merge_snapshots([one, two])
    assert merged.endpoints == 2
    assert merged.value(RUNNING) == 8 and merged.value(WAITING) == 1 and merged.value(GENERATION_TOKENS) == 1500
    assert merged.highest(KV_USAGE) == 0.75 and merged.value(KV_USAGE) == 1.0  # a share: the fullest, not a sum
    assert [labels[ENDPOINT_LABEL] for labels, _ in merged.samples[RUNNING[0]]] == ["0", "1"]
    assert all(labels["engine"] == "0" for labels, _ in merged.samples[RUNNING[0]])  # the replicas' own labels kept
    config = cache_config(merged)  # the first endpoint's, without the endpoint label
    assert config.num_blocks == 100 and ENDPOINT_LABEL not in config.labels
    assert merged.labels(CACHE_CONFIG) == one.labels(CACHE_CONFIG)
    assert merged.part(1).samples == two.samples and merged.part(0).samples == one.samples


def test_a_scrapes_own_endpoint_label_is_kept_apart_and_given_back() -> None:
    own = parse_metrics(scrape(2, 0, 0.1, 10, 100, engine_label="dp-a"))
    merged = merge_snapshots([own, parse_metrics(scrape(1, 0, 0.1, 10, 100))])
    labels = merged.samples[RUNNING[0]][0][0]
    assert labels[ENDPOINT_LABEL] == "0" and labels["exported_endpoint"] == "dp-a"
    assert merged.part(0).samples == own.samples


def test_each_endpoints_growth_and_a_replica_whose_counter_went_back_refuses_the_sum() -> None:
    before = merge_snapshots([parse_metrics(scrape(0, 0, 0, 1000, 1)), parse_metrics(scrape(0, 0, 0, 500, 1))])
    after = merge_snapshots([parse_metrics(scrape(0, 0, 0, 1300, 1)), parse_metrics(scrape(0, 0, 0, 600, 1))])
    assert delta(before, after, GENERATION_TOKENS) == 400
    assert endpoint_growth(before, after, GENERATION_TOKENS) == [300, 100]
    assert endpoint_growth(before.part(0), after.part(0), GENERATION_TOKENS) is None  # one server: no split
    restarted = merge_snapshots([parse_metrics(scrape(0, 0, 0, 2000, 1)), parse_metrics(scrape(0, 0, 0, 20, 1))])
    # The sum grew (1500 -> 2020), but the second replica's counter went back: not one count.
    assert counter_growth(before, restarted, GENERATION_TOKENS) == (
        None,
        "vllm:generation_tokens_total went back by 480 at endpoint 1",
    )
    assert endpoint_growth(before, restarted, GENERATION_TOKENS) == [1000, None]


def test_merging_nothing_is_a_bug() -> None:
    with pytest.raises(ValueError, match="no scrape"):
        merge_snapshots([])


def test_urls_become_full_metrics_urls_in_their_order() -> None:
    params = make_params({"server_metrics": " http://10.0.0.2:8000/ ,http://10.0.0.1:8000/metrics"})
    assert params.server_metrics == ["http://10.0.0.2:8000/metrics", "http://10.0.0.1:8000/metrics"]
    assert make_params({}).server_metrics is None
    assert make_rate_params({"server_metrics": ["https://r:1/prefix"]}).server_metrics == ["https://r:1/prefix/metrics"]
    # A run's rate sweep takes them from the run, as its base_url, and may not name its own.
    assert run_sweep_values({"server_metrics": ["http://r:1/metrics"]}, {})["server_metrics"] == ["http://r:1/metrics"]
    with pytest.raises(ParamsError, match=r"^rate_sweep\.server_metrics: set by the run"):
        run_sweep_values({}, {"server_metrics": ["http://r:1"]})


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("ftp://10.0.0.1/metrics", "'ftp://10.0.0.1/metrics' is not an http(s) URL; allowed: e.g."),
        ("10.0.0.1:8000", "'10.0.0.1:8000' is not an http(s) URL"),
        ([], "is empty; allowed"),
        ("", "is empty; allowed"),
        ("http://a:1,http://a:1/metrics", "'http://a:1/metrics' is given twice"),
        ("http://user:pw@a:1", "a URL holds user info (user:password@)"),
        ("http://a:1/metrics?x=1", "'http://a:1/metrics?x=1' has a query or fragment"),
        ([8000], "is not a list of URLs"),
    ],
)
def test_a_bad_url_list_is_one_line_naming_the_parameter(value: object, expected: str) -> None:
    for make in (make_params, make_rate_params):
        with pytest.raises(ParamsError) as caught:
            make({"server_metrics": value})
        line = str(caught.value)
        assert line.startswith(f"server_metrics: {expected}") and "\n" not in line, line
        assert "pw" not in line


def test_the_record_names_the_endpoints() -> None:
    assert metrics_source_text([]) is None
    assert metrics_source_text(["http://a:1/metrics", "http://b:2/metrics"]) == (
        "server-side figures from 2 endpoints: http://a:1/metrics, http://b:2/metrics"
    )


def test_each_endpoints_share_in_one_line() -> None:
    import pandas as pd

    steps = pd.DataFrame({"endpoint_generation_tokens": [[300, 100], None, [100, None], [300, 300]]})
    assert endpoint_share_line(steps) == (
        "Generated tokens by /metrics endpoint (server_metrics, in order), over the steps: #0 60.0%, #1 40.0%."
    )
    assert endpoint_share_line(pd.DataFrame({"step": [0]})) is None


@pytest.mark.parametrize("command", [["matrix"], ["rates"], ["run", "params.yaml"]])
def test_the_commands_take_server_metrics(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main([command[0], "--help"])
    assert done.value.code == 0 and "--server-metrics URL[,URL...]" in capsys.readouterr().out


@pytest.mark.parametrize(
    "command",
    [
        ["matrix", "--base-url", "http://127.0.0.1:9", "--out", "OUT"],
        ["rates", "--base-url", "http://127.0.0.1:9", "--out", "OUT"],
    ],
)
def test_a_bad_server_metrics_value_is_exit_2_and_one_line(
    command: list[str], capsys: pytest.CaptureFixture[str], tmp_path: object
) -> None:
    args = [str(tmp_path) if a == "OUT" else a for a in command]
    assert main([*args, "--server-metrics", "http://a:1,ftp://b"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "server_metrics: 'ftp://b' is not an http(s) URL" in err, err
