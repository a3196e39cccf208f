"""Rate sweeps against the fault server: the run folder's files, the search, failures, datasets, a stop, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from tests.faultserver import TEMPLATE_TOKENS, FaultServer
from toolkit.base.errors import RunRefused
from toolkit.method.goodput import BOUND_COLUMNS, RECORD_COLUMNS, ServiceLevel, judge_steps, summarize_step
from toolkit.rates.files import STEPS_FILE, rates_dir, read_records, read_steps, read_sweep, step_line
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.results.store import append_line

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parents[1] / "fixtures" / "rates"
STEP_KEYS = ["step", "searched", "arrival", "burstiness", "offered_rate", "scheduled_rate", "achieved_rate",
             "requests", "completed", "failed", "duration_s", "request_throughput", "output_tok_s", "input_tokens",
             "output_tokens", "goodput", "slo_fraction", "slo_met", "slo_fraction_low", "slo_fraction_high",
             "slo_fraction_se", "slo_fraction_dof", "slo_fraction_deff", "slo_verdict", "steady_requests", "held",
             *(f"{m}_p{q}_ms" for m in ("ttft", "tpot", "e2e", "ttft_sched", "e2e_sched", "lag") for q in (50, 90, 99)),
             "itl_p50_ms", "itl_p90_ms", "itl_p99_ms", "lag_max_ms", *BOUND_COLUMNS, "lag_flagged",
             "server_running_max", "server_waiting_max", "server_waiting_mean", "kv_usage_max", "server_prompt_tokens",
             "server_generation_tokens", "client_prompt_tokens", "client_generation_tokens", "prefix_cache_hit_rate",
             "external_prefix_cache_hit_rate", "prompt_tokens_by_source", "expected_hit_rate",
             "client_cached_tokens", "workload", "control_of", "warmup_requests", "schema_valid_share", "invalid_reply",
             "tool_called_share", "tool_args_valid_share",
             "breakdown_basis", "queue_p50_ms", "server_ttft_p50_ms", "wire_ttft_p50_ms", "decode_p50_ms",
             "server_itl_p50_ms", "client_itl_p50_ms", "timed_requests", "timing_mismatches", "queue_mean_ms",
             "server_ttft_mean_ms", "wire_ttft_mean_ms", "decode_mean_ms", "api_ttft_mean_ms"]  # fmt: skip


@pytest.fixture
def server(make_fault_server: Callable[..., FaultServer]) -> FaultServer:
    return make_fault_server(token_interval_s=0.005)


def sweep(server: FaultServer, tmp_path: Path, said: list[str] | None = None, **values: Any) -> Path:
    base = {"base_url": server.base_url, "requests_per_step": 12, "input_tokens": 40, "output_tokens": 8,
            "results_dir": str(tmp_path / "run")}  # fmt: skip
    return run_rates(make_rate_params(base | values), say=(said if said is not None else []).append)


KEY = "sk-rates-TEST-5d1e0b"


def test_the_run_folder_holds_exactly_the_documented_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    with FaultServer(token_interval_s=0.005, api_key=KEY) as server:
        out = sweep(server, tmp_path, rates=[5, 20, "inf"], slo_ttft_ms=1000)
    assert sorted(p.name for p in rates_dir(out).iterdir()) == [
        "step-000.parquet", "step-001.parquet", "step-002.parquet", "steps.jsonl", "sweep.json"]  # fmt: skip
    lines = (rates_dir(out) / "steps.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]  # strict JSON: no NaN, no Infinity
    assert [list(r) for r in rows] == [STEP_KEYS] * 3
    assert [r["offered_rate"] for r in rows] == [5.0, 20.0, "inf"] and [r["step"] for r in rows] == [0, 1, 2]
    assert all(r["completed"] == 12 and r["failed"] == 0 and not r["searched"] for r in rows)
    for r in rows:  # the fault server counts words + template tokens, as its usage does
        assert r["server_prompt_tokens"] == r["client_prompt_tokens"] == 12 * r["input_tokens"] // 12
        assert r["server_generation_tokens"] == r["client_generation_tokens"] == 12 * 8
        assert r["server_running_max"] is not None and r["server_waiting_max"] == 0 and r["kv_usage_max"] is not None
    records = pd.read_parquet(rates_dir(out) / "step-001.parquet")
    assert tuple(records.columns) == RECORD_COLUMNS and len(records) == 12
    assert (records["sent_s"] >= records["scheduled_s"]).all() and records["error"].isna().all()
    assert (records["input_tokens"] - 40).abs().max() <= 16 and (records["output_tokens"] == 8).all()
    assert all(
        len(times) == 8 and times[-1] == last
        for times, last in zip(records["chunk_times_s"], records["last_token_s"], strict=True)
    )
    sweep_json = json.loads((rates_dir(out) / "sweep.json").read_text())
    assert sweep_json["rates"] == [5.0, 20.0, "inf"] and sweep_json["model"] == "fault-model"
    assert sweep_json["search"] is False and sweep_json["api_key_env"] == "VLLM_API_KEY"
    assert not [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]
    run = json.loads((out / "run.json").read_text())
    assert run["kind"] == "rates" and run["server"]["model"] == "fault-model" and "environment" in run
    assert run["schema_version"] == sweep_json.pop("schema_version") == 1  # each document stamped
    assert run["params"] == sweep_json


def test_cold_prompts_are_unique_and_warm_ones_share_their_prefix(server: FaultServer, tmp_path: Path) -> None:
    sweep(server, tmp_path, rates=[50])
    prompts = [e for e in server.state.log if e["path"] == "/v1/chat/completions"]
    assert len(prompts) == 12 and server.state.prefix_hits == 0
    sweep(server, tmp_path / "warm", rates=[50], cold_prompts=False)
    assert server.state.prefix_hits > 0  # the same prompt again: the fault server's cache hits it


def test_the_search_bisects_to_its_precision_and_records_its_bracket(server: FaultServer, tmp_path: Path) -> None:
    """The fault server's TTFT grows with what runs; an SLO no step can meet above 0 gives no highest rate, an
    easy one every rate, each verdict by the interval of its fraction: 6 of 6 requests show a fraction of at
    least 0.54 (enough for a target of 0.5, not for 0.99); 0 of 6 at most 0.46."""
    out = sweep(server, tmp_path, rates=[10, 40], requests_per_step=6, slo_e2e_ms=10_000, search=True,
                goodput_target=0.5, steady_trim=0)  # fmt: skip
    assert json.loads((rates_dir(out) / "sweep.json").read_text())["search"] == {
        "highest_rate": 40.0,
        "bracket": [40.0, None],
        "undecided": [],
        "requests_to_show": 6,  # 6 of 6 show 0.54
        "too_few": [],
    }
    said: list[str] = []
    out = sweep(server, tmp_path / "unsure", said, rates=[10, 40], requests_per_step=6, slo_e2e_ms=10_000,
                search=True, steady_trim=0)  # fmt: skip
    assert said[-1] == (
        "search: highest rate shown to meet the service level: no rate shown to meet it; undecided: 10, 40; Showing "
        "99 % takes at least 368 steady requests at a rate (95 %); at 10.00, 40.00 req/s the steps held fewer, so "
        "those rates could only fail or stay undecided: longer steps (duration_s or requests_per_step) would decide "
        "them."
    )
    assert json.loads((rates_dir(out) / "sweep.json").read_text())["search"] == {
        "highest_rate": None,
        "bracket": [None, None],
        "undecided": [10.0, 40.0],
        "requests_to_show": 368,  # 0.99 takes 368: no step of 6 can show it, so the search could not decide
        "too_few": [10.0, 40.0],
    }
    out = sweep(server, tmp_path / "none", rates=[10, 40], requests_per_step=6, slo_ttft_ms=0.001, search=True,
                steady_trim=0)  # fmt: skip
    assert json.loads((rates_dir(out) / "sweep.json").read_text())["search"] == {
        "highest_rate": None,
        "bracket": [None, 10.0],
        "undecided": [],
        "requests_to_show": 368,
        "too_few": [10.0, 40.0],
    }
    assert len(read_steps(out)) == 2  # nothing to bisect


def test_probes_are_full_steps_between_the_bracket(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that meets the level below 10 req/s: probes between 4 and 16 until within 10 %."""
    import toolkit.rates.runner as runner

    async def fake_step(self: Any, rate: float, searched: bool) -> None:
        self.rows.append({"step": len(self.rows), "offered_rate": rate, "slo_met": rate < 10, "requests": 400,
                          "slo_fraction": float(rate < 10), "request_throughput": 0.0,
                          "searched": searched})  # fmt: skip

    monkeypatch.setattr(runner._Sweep, "step", fake_step)
    with FaultServer() as fs:
        out = run_rates(make_rate_params({"base_url": fs.base_url, "rates": [1, 4, 16], "duration_s": 1,
                                          "slo_ttft_ms": 100, "search": True, "search_precision": 0.1,
                                          "results_dir": str(tmp_path)}), say=lambda line: None)  # fmt: skip
    result = json.loads((rates_dir(out) / "sweep.json").read_text())["search"]
    low, high = result["bracket"]
    assert low < 10 <= high and (high - low) <= 0.1 * low and result["highest_rate"] == low


def test_failed_requests_are_recorded_and_never_meet_the_level(server: FaultServer, tmp_path: Path) -> None:
    server.set_fault("500", after=3, times=4)
    out = sweep(server, tmp_path, rates=[30], slo_ttft_ms=5000)
    (row,) = read_steps(out)
    records = read_records(out)
    assert (row["completed"], row["failed"]) == (8, 4) and not row["slo_met"]
    assert row["slo_fraction"] == pytest.approx(8 / 12)
    failed = records[records["error"].notna()]
    assert len(failed) == 4 and failed["error"].str.startswith("HTTP 500").all()
    assert failed["first_token_s"].isna().all() and (failed["output_tokens"] == 0).all()
    assert row["client_prompt_tokens"] == row["server_prompt_tokens"]  # refused prompts counted on neither side


def test_max_in_flight_caps_the_requests_running(server: FaultServer, tmp_path: Path) -> None:
    out = sweep(server, tmp_path, rates=["inf"], max_in_flight=3, output_tokens=20)
    (row,) = read_steps(out)
    assert row["server_running_max"] <= 3 and row["completed"] == 12
    records = read_records(out)
    assert records["sent_s"].max() > 3 * 19 * 0.005  # the last ones waited for three rounds to finish


def test_a_stop_keeps_every_finished_step(server: FaultServer, tmp_path: Path) -> None:
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("step 1"):
            raise KeyboardInterrupt

    params = make_rate_params({"base_url": server.base_url, "rates": [10, 20, 30], "requests_per_step": 6,
                               "input_tokens": 30, "output_tokens": 4,
                               "results_dir": str(tmp_path / "run")})  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        run_rates(params, say=say)
    out = tmp_path / "run"
    assert [r["step"] for r in read_steps(out)] == [0, 1] and len(read_records(out)) == 12
    assert not (rates_dir(out) / "step-002.parquet").exists() and not (out / ".lock").exists()

    kept, sweep_json, sent = (rates_dir(out) / "steps.jsonl").read_bytes(), read_sweep(out), server.state.requests_total
    with pytest.raises(RunRefused, match=r"already holds a rate sweep; choose another folder, or resume it$"):
        run_rates(params, say=said.append)
    other = make_rate_params({**params.model_dump(), "rates": [10, 20, 40], "output_tokens": 5})
    with pytest.raises(RunRefused, match=r"other parameters \(output_tokens: 4 -> 5, rates: \[10\.0, 20\.0, 30\.0\] -> "
                                         r"\[10\.0, 20\.0, 40\.0\]\); choose another folder$"):  # fmt: skip
        run_rates(other, say=said.append, resume=True)
    assert server.state.requests_total == sent  # refused before any load

    run_rates(params, say=said.append, resume=True)
    assert said[-2:-1] == [f"resuming the sweep in {out}; finished steps kept: 2"] and said[-1].startswith(
        "step 2: 30 req/s"
    )
    assert (rates_dir(out) / "steps.jsonl").read_bytes().startswith(kept)  # the finished steps as they were
    assert [r["step"] for r in read_steps(out)] == [0, 1, 2] and len(read_records(out)) == 18
    assert read_sweep(out) == sweep_json  # the same sweep (run_id and all), continued
    assert server.state.prefix_hits == 0  # step 2's prompts are cold: not those of an earlier attempt
    sent = server.state.requests_total
    run_rates(params, say=said.append, resume=True)  # nothing left to measure
    assert server.state.requests_total == sent and len(read_steps(out)) == 3


def test_a_resumed_search_keeps_its_probes_and_its_budget(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped in its second probe, a search resumed probes the rates an uninterrupted one does, within one budget."""
    import toolkit.rates.runner as runner

    stop_at: list[int | None] = [4]  # steps 0-2 are the listed rates, 3 and on the probes

    async def fake_step(self: Any, rate: float, searched: bool) -> None:  # a server meeting the level below 10 req/s
        row = {"step": len(self.rows), "offered_rate": rate, "slo_met": rate < 10, "searched": searched,
               "requests": 400, "slo_fraction": float(rate < 10)}  # fmt: skip
        if row["step"] == stop_at[0]:
            raise KeyboardInterrupt
        append_line(rates_dir(self.out) / STEPS_FILE, step_line(row))
        self.rows.append(row)

    monkeypatch.setattr(runner._Sweep, "step", fake_step)
    values = {"rates": [1, 4, 16], "duration_s": 1, "slo_ttft_ms": 100, "search": True, "search_precision": 0.01,
              "search_max_probes": 5}  # fmt: skip
    with FaultServer() as fs:
        params = make_rate_params({**values, "base_url": fs.base_url, "results_dir": str(tmp_path / "resumed")})
        with pytest.raises(KeyboardInterrupt):
            run_rates(params, say=lambda line: None)
        out = tmp_path / "resumed"
        before = read_steps(out)
        assert [r["searched"] for r in before] == [False] * 3 + [True] and read_sweep(out)["search"] is True
        stop_at[0] = None
        run_rates(params, say=lambda line: None, resume=True)
        whole = run_rates(make_rate_params({**values, "base_url": fs.base_url, "results_dir": str(tmp_path / "whole")}),
                          say=lambda line: None)  # fmt: skip
    after = read_steps(out)
    assert after[:4] == before and [r["searched"] for r in after] == [False] * 3 + [True] * 5
    assert [r["offered_rate"] for r in after] == [r["offered_rate"] for r in read_steps(whole)]
    assert read_sweep(out)["search"] == read_sweep(whole)["search"]


@pytest.mark.parametrize(("dataset", "endpoint"), [("requests.jsonl", "chat"), ("sharegpt.json", "completions")])
def test_a_dataset_drives_a_sweep(server: FaultServer, tmp_path: Path, dataset: str, endpoint: str) -> None:
    out = sweep(server, tmp_path, rates=[40], dataset=str(FIXTURES / dataset), endpoint=endpoint,
                requests_per_step=6, output_tokens=5)  # fmt: skip
    records = read_records(out)
    assert records["error"].isna().all() and len(records) == 6
    bodies = [e for e in server.state.log if e["path"].startswith("/v1/")]
    assert len(bodies) >= 6
    outputs = set(records["output_tokens"])
    if dataset == "requests.jsonl":  # given lengths, and the drawn one for the line without
        assert outputs == {24, 5, 16}  # 6 requests go through the 3 lines twice
    else:  # the reference reply's tokens (fault server: words + template)
        reply = (
            "Put the egg in boiling water for six minutes, then cool it in cold water for a minute before peeling it."
        )
        assert outputs == {len(reply.split()) + TEMPLATE_TOKENS, 4 + TEMPLATE_TOKENS}


def test_a_chat_dataset_needs_the_chat_endpoint(server: FaultServer, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"requests.jsonl:3: chat messages need endpoint: chat"):
        sweep(server, tmp_path, rates=[40], dataset=str(FIXTURES / "requests.jsonl"), endpoint="completions")


def test_the_stored_records_judge_again_against_other_levels(server: FaultServer, tmp_path: Path) -> None:
    out = sweep(server, tmp_path, rates=[10, 40, 80], requests_per_step=20, slo_ttft_ms=8, slo_tpot_ms=7)
    records, rows = read_records(out), read_steps(out)
    run_level = ServiceLevel(ttft_ms=8, tpot_ms=7)
    again = judge_steps(records, run_level)
    assert list(again["goodput"]) == pytest.approx([r["goodput"] for r in rows])
    for level in (ServiceLevel(ttft_ms=3), ServiceLevel(e2e_ms=60, target=0.5)):
        judged = judge_steps(records, level)
        for step, group in records.groupby("step"):
            direct = summarize_step(group, level)
            assert judged.loc[judged["step"] == step, "goodput"].item() == pytest.approx(direct.goodput)


@pytest.mark.process
def test_the_command_line_runs_a_sweep_and_refuses_a_used_folder(server: FaultServer, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "toolkit", "rates", "--base-url", server.base_url, "--rates", "5,inf",
               "--requests", "4", "--input-tokens", "uniform:20:60", "--output-tokens", "3", "--slo-ttft-ms", "500",
               "--out", str(tmp_path / "cli")]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "step 0: 5 req/s offered" in done.stderr and "step 1: inf req/s offered" in done.stderr
    assert "offered" in done.stdout and "results:" in done.stdout
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and again.stderr.strip().endswith(
        "already holds a rate sweep; choose another folder, or resume it"
    )
    bad = subprocess.run([*command[:6], "--rates", "1,-2"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "error: rates: '-2' is not a positive rate; allowed: a positive number of requests/s or inf (got '1,-2')"
    ]
    assert len(read_steps(tmp_path / "cli")) == 2


def test_a_sweep_beside_a_run_keeps_its_run_json_and_refuses_another_servers(
    server: FaultServer, tmp_path: Path
) -> None:
    """`toolkit run` measures a `rate_sweep:` block into the matrix run's folder: its run.json stays as it is."""
    first = sweep(server, tmp_path, rates=[20])
    changes = {"beside": {}, "model": {"model": "another-model"}, "url": {"base_url": "http://127.0.0.1:9"}}
    for name, change in changes.items():
        (tmp_path / name).mkdir()
        recorded = json.loads((first / "run.json").read_text())
        recorded["server"].update({k: v for k, v in change.items() if k == "model"})
        recorded["params"].update({k: v for k, v in change.items() if k == "base_url"})
        (tmp_path / name / "run.json").write_text(json.dumps(recorded))
    beside = tmp_path / "beside"
    kept = (beside / "run.json").read_bytes()
    sweep(server, tmp_path, rates=[20], results_dir=str(beside))
    assert (beside / "run.json").read_bytes() == kept and len(read_steps(beside)) == 1
    for name, differs in (("model", "model: 'another-model' -> '.+'"), ("url", "base_url: 'http://127.0.0.1:9' -> ")):
        with pytest.raises(RunRefused, match=rf"holds a run of another server \({differs}"):
            sweep(server, tmp_path, rates=[20], results_dir=str(tmp_path / name))
        assert not rates_dir(tmp_path / name).exists()  # refused before any load


@pytest.mark.process
def test_toolkit_run_refuses_a_bad_rate_sweep_block_before_any_load(tmp_path: Path) -> None:
    params = tmp_path / "run.yaml"
    params.write_text("base_url: http://127.0.0.1:9\ncontexts: [512]\nrate_sweep:\n  rates: [1]\n  drain: false\n")
    done = subprocess.run([sys.executable, "-m", "toolkit", "run", str(params), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        "error: rate_sweep.drain: not a rate sweep parameter; allowed: endpoint, batch_size, rates, arrival, "
        "burstiness, duration_s, requests_per_step, max_in_flight, rescale_schedule, steady_trim, seed, cold_prompts, "
        "input_tokens, output_tokens, dataset, slo_ttft_ms, slo_tpot_ms, slo_e2e_ms, goodput_target, search, "
        "search_precision, search_max_probes, search_repeats, ray_address, clients, replay, workload, prefixes, "
        "prefix_tokens, prefix_choice, turns, think_time_s, think_time_dist, warmup_turns, cold_control, trace, "
        "trace_format, time_scale, trace_start_s, trace_duration_s, trace_block_tokens, warmup_s, percentiles, "
        "response_format, tools, tool_choice, classes, images, image_size"
    ]
    assert not (tmp_path / "out").exists()


INTERRUPTED_IN_A_NOTEBOOK = """
import asyncio, json, signal, sys, threading, time
from pathlib import Path
from toolkit.rates.files import read_steps
from toolkit.rates.params import make_rate_params
from toolkit.rates.runner import run_rates
from toolkit.results.store import append_line

base_url, run = sys.argv[1], Path(sys.argv[2])
params = make_rate_params({"base_url": base_url, "rates": [5, 6, 7, 8], "requests_per_step": 10,
                           "input_tokens": 30, "output_tokens": 4, "results_dir": str(run)})
said = []

def say(line):  # in the sweep's thread, as the first step ends: Ctrl-C, which the kernel's main thread gets
    said.append(line)
    if len(said) == 1:
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)

async def in_a_notebook():
    run_rates(params, say=say)

loop = asyncio.new_event_loop()  # a loop without asyncio.run's own SIGINT handling, as a kernel's cell runs
try:
    loop.run_until_complete(in_a_notebook())
    raised = False
except KeyboardInterrupt:
    raised = True
finally:
    loop.close()
written = len(read_steps(run))
time.sleep(2.5)  # a sweep left running would finish another step by now
print(json.dumps({"raised": raised, "written": written, "later": len(read_steps(run)), "said": len(said),
                  "lock": (run / ".lock").exists(),
                  "threads": [t.name for t in threading.enumerate() if t.name == "toolkit-run"]}))
"""


@pytest.mark.process
def test_an_interrupt_under_a_running_loop_stops_the_sweep_thread(server: FaultServer, tmp_path: Path) -> None:
    """As in Jupyter: a loop runs, so the sweep runs in a thread and Ctrl-C reaches only the waiting main thread.
    In a process of its own, so that no signal handler another test left in this worker decides the outcome; the
    signal is sent as the first step ends, from the sweep's own progress line (a watcher thread polling for the
    step's file, the sweep once ran to its end under CI's load before the signal took effect)."""
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IN_A_NOTEBOOK, server.base_url, str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["raised"], seen
    assert 1 <= seen["written"] == seen["later"] < 4 and seen["said"] == seen["written"], seen
    assert not seen["lock"] and seen["threads"] == []


def test_a_replayed_step_sends_the_peers_schedule_and_lengths(server: FaultServer, tmp_path: Path) -> None:
    """vllm bench serve's own run (24 requests at 4 req/s), replayed: the same arrival times and lengths, one step."""
    from toolkit.results.peers.read import read_peer_result

    peer = read_peer_result(REPO / "tests" / "fixtures" / "peers" / "vllm-bench-4rps.json").records
    assert peer is not None
    out = run_rates(make_rate_params({"base_url": server.base_url, "replay": str(REPO / "tests" / "fixtures" / "peers"
                                       / "vllm-bench-4rps.json"), "results_dir": str(tmp_path / "run")}),
                    say=lambda line: None)  # fmt: skip
    records = read_records(out).sort_values("request")
    theirs = peer.sort_values("scheduled_s", kind="stable")
    assert read_sweep(out)["rates"] == [4.0] and read_sweep(out)["replay_source"].endswith("(vllm-bench-4rps.json)")
    assert list(records["scheduled_s"]) == pytest.approx(list(theirs["scheduled_s"] - theirs["scheduled_s"].min()))
    assert list(records["input_tokens"]) == list(theirs["input_tokens"])
    assert list(records["output_tokens"]) == list(theirs["output_tokens"])
    assert (records["sent_s"] - records["scheduled_s"]).max() < 0.25  # sent on the file's schedule


def test_replay_takes_no_dataset_or_search_and_a_file_without_requests_is_one_line(tmp_path: Path) -> None:
    from toolkit.base.errors import ParamsError

    with pytest.raises(ParamsError, match="replay: replays one file's schedule and lengths; it takes no dataset"):
        make_rate_params({"replay": "x.json", "search": True, "slo_ttft_ms": 100})
    aggregate = tmp_path / "aggregate.json"
    aggregate.write_text(json.dumps({"completed": 3, "output_throughput": 1.0, "median_ttft_ms": 2.0}))
    from toolkit.rates.replay import load_replay

    with pytest.raises(ParamsError, match=rf"^replay: {aggregate}: holds no per-request data to replay"):
        load_replay(aggregate)


def common_length(texts: list[str]) -> int:
    """How many characters all of `texts` begin with."""
    first = texts[0]
    return next((i for i in range(len(first)) if any(len(t) <= i or t[i] != first[i] for t in texts)), len(first))


def test_a_shared_prefix_step_starts_each_prompt_with_its_groups_prefix(server: FaultServer, tmp_path: Path) -> None:
    out = sweep(server, tmp_path, rates=[20], input_tokens=90, workload="shared-prefix", prefixes=3,
                prefix_tokens=60, endpoint="completions")  # fmt: skip
    prompts = [r["prompt"] for r in server.completion_requests()]
    assert len(prompts) == 12
    heads = {p.split("] ", 1)[0] for p in prompts}  # "[shared prefix 0000g of step 000, run …"
    assert 1 < len(heads) <= 3 and all(h.startswith("[shared prefix ") for h in heads)
    for head in heads:
        group = [p for p in prompts if p.startswith(head + "] ")]
        shared = common_length(group)
        assert len(group) == 1 or shared >= len(min(group, key=len)) * 0.5  # the prefix, then each its own rest
        assert len({p[shared:] for p in group}) == len(group)
    (row,) = read_steps(out)
    assert row["completed"] == 12 and "expected_hit_rate" in row and "prefix_cache_hit_rate" in row
