"""What run.json says about a run (toolkit.results.run_document): its descriptive blocks, the client's software and
machine."""

from __future__ import annotations

import platform
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from toolkit import __version__
from toolkit.matrix.discovery import ServerInfo
from toolkit.matrix.run_folder import launch_command
from toolkit.params import RunParams
from toolkit.results.documents.run_blocks import (
    EnvironmentBlock,
    FingerprintBlock,
    LaunchBlock,
    ParamsBlock,
    ServerBlock,
)
from toolkit.results.run_document import RunDocument
from toolkit.servers.gpu import installed_gpus
from toolkit.servers.machine import hardware_block, machine_facts, served_here
from toolkit.servers.speculative import speculative_config


def environment_info() -> dict[str, Any]:
    """The client's software, and this machine: OS, kernel, CPU, memory, GPUs (servers.machine, servers.gpu)."""
    import subprocess

    try:
        rev = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                cwd=Path(__file__).parent,
            ).stdout.strip()
            or None
        )
    except OSError:
        rev = None
    return {
        "toolkit_version": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_revision": rev,
        "machine": machine_facts(),
        "gpus": installed_gpus(),
    }


HARDWARE_FIELDS = ("Type", "GPU", "GPU count", "VRAM", "GPU driver", "OS", "Kernel", "CPU", "CPU cores", "Memory")


def run_info(
    params: RunParams,
    server: ServerInfo,
    run_id: str,
    api_key: str | None,
    *,
    prefill_in_warmup: bool = True,
    launch: dict[str, Any] | None = None,
) -> RunDocument:
    """run.json: the report's descriptive blocks, server facts, parameters (no secrets), environment.

    `launch` (toolkit.servers.launch.launch_info) says whether the toolkit launched the server and with what. This
    machine's hardware fills the Hardware block only when the server runs here; the params' fields win.
    """
    launch = launch or {"launched_by_toolkit": False}
    launched = bool(launch.get("launched_by_toolkit"))
    environment = environment_info()
    environment["server_on_this_machine"] = here = served_here(params.base_url, launched)
    captured = hardware_block(environment["machine"], environment["gpus"]) if here else {"OS": sys.platform}
    given = {"Type": params.hardware_type, "GPU": params.gpu, "GPU count": params.gpu_count, "VRAM": params.vram,
             "OS": params.os}  # fmt: skip
    merged = {**captured, **{k: v for k, v in given.items() if v is not None}}
    hardware = {k: merged.get(k) for k in HARDWARE_FIELDS}
    gpu_line = merged["GPU"] if merged.get("GPU") not in (None, "none") else "embedded CPU vLLM"
    count = merged.get("GPU count")
    title = params.title or f"{server.model} on {gpu_line}" + (f" ×{count}" if count and str(count) != "1" else "")
    found = launch.get("engine") or {}
    build = found.get("build") or ""
    backend = "cpu" if build == "cpu" else "cuda" if build.startswith("CUDA") else "rocm" if build else None
    engine = {"Engine": "vllm", "Version": server.version or found.get("version"), "Commit": found.get("commit"),
              "Quantization": params.quantization, "Backend": params.backend or backend,
              "Repository": "github.com/vllm-project/vllm", "Build": params.build or build}  # fmt: skip
    clean = lambda d: {k: str(v) for k, v in d.items() if v not in (None, "")}  # noqa: E731
    command = launch_command(params, launch, api_key)
    environment["speculative_config"], engine["Speculative decoding"] = speculative_config(command)
    return RunDocument(
        run_id=run_id,
        run_label=params.run_label,
        title=title,
        hardware=clean(hardware),
        engine=clean(engine),
        launch_command=command,
        launch=LaunchBlock.model_validate(launch),
        params=ParamsBlock.model_validate(params.model_dump(exclude={"launch_command"})),
        fingerprint=FingerprintBlock.model_validate(params.fingerprint()),
        server=ServerBlock.model_validate(asdict(server)),
        environment=EnvironmentBlock.model_validate(environment),
        prefill_in_warmup=prefill_in_warmup,
        started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        source="toolkit",
    )
