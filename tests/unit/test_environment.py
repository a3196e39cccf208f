"""Environment capture: OS, CPU, memory, GPUs and the launched server's engine, parsed from what the system says."""

from __future__ import annotations

import json

import pytest

from toolkit.servers.machine import (
    PROBE_MARK,
    hardware_block,
    interpreter_for,
    machine_facts,
    parse_cpu_model,
    parse_engine_probe,
    parse_os_release,
    shebang_interpreter,
)

OS_RELEASE = 'NAME="Debian GNU/Linux"\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\n'
X86 = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R)  Platinum 8480+\nflags\t: fpu\n" * 2
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd4f\n\nHardware\t: NVIDIA Grace\n"
WHICH = {"python3": "/usr/bin/python3", "vllm": "/srv/venv/bin/vllm", "/srv/venv/bin/python": "/srv/venv/bin/python",
         "python": "/srv/venv/bin/python", "docker": "/usr/bin/docker"}  # fmt: skip


def test_os_and_cpu_are_parsed() -> None:
    assert parse_os_release(OS_RELEASE) == "Debian GNU/Linux 12 (bookworm)"
    assert parse_os_release("ID=x\n") is None
    assert parse_cpu_model(X86) == "Intel(R) Xeon(R) Platinum 8480+"
    assert parse_cpu_model(ARM) == "NVIDIA Grace"
    assert parse_cpu_model("") is None


def test_this_machine_is_captured() -> None:
    facts = machine_facts()
    assert facts["os"] and facts["kernel"] and facts["cpu_model"]
    assert facts["cpu_cores"] >= 1 and facts["memory_bytes"] > 2**28


def test_hardware_block_with_gpus_and_without() -> None:
    machine = {"os": "Ubuntu 24.04 LTS", "kernel": "6.8.0-45-generic", "cpu_model": "AMD EPYC 9654",
               "cpu_cores": 384, "cpu_physical_cores": 192, "memory_bytes": 2 * 2**40}  # fmt: skip
    gpus = {"devices": [{"name": "NVIDIA H200", "memory_bytes": 141 * 2**30}] * 8, "driver": "570.86.15",
            "cuda": "12.8"}  # fmt: skip
    assert hardware_block(machine, gpus) == {
        "GPU": "NVIDIA H200", "GPU count": "8", "VRAM": "1,128.0 GiB (8 × 141 GiB)",
        "GPU driver": "570.86.15 (CUDA 12.8)", "OS": "Ubuntu 24.04 LTS", "Kernel": "6.8.0-45-generic",
        "CPU": "AMD EPYC 9654", "CPU cores": "384 (192 physical)", "Memory": "2,048.0 GiB",
    }  # fmt: skip
    one = hardware_block(machine, {"devices": [{"name": "NVIDIA L4", "memory_bytes": int(22.5 * 2**30)}]})
    assert one["VRAM"] == "22.5 GiB" and one["GPU count"] == "1" and "GPU driver" not in one
    assert hardware_block(machine, {"devices": []})["GPU"] == "none"


@pytest.mark.parametrize(
    ("command", "heads", "expected"),
    [
        (["/srv/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], {}, ["/srv/venv/bin/python"]),
        (["vllm", "serve", "m"], {"/srv/venv/bin/vllm": "#!/srv/venv/bin/python"}, ["/srv/venv/bin/python"]),
        (["vllm", "serve", "m"], {"/srv/venv/bin/vllm": "#!/usr/bin/env python3"}, ["/usr/bin/python3"]),
        (["env", "A=1", "vllm", "serve"], {"/srv/venv/bin/vllm": "#!/srv/venv/bin/python"}, ["/srv/venv/bin/python"]),
        (["vllm", "serve", "m"], {"/srv/venv/bin/vllm": "\x7fELF"}, None),  # a binary
        (["docker", "run", "vllm/vllm-openai"], {"/usr/bin/docker": "\x7fELF"}, None),
        (["no-such-program"], {}, None),
    ],
)
def test_the_servers_interpreter_comes_from_the_command(
    command: list[str], heads: dict[str, str], expected: list[str] | None
) -> None:
    assert interpreter_for(command, WHICH.get, lambda path: heads.get(path, "")) == expected


def test_shebangs() -> None:
    assert shebang_interpreter("#!/opt/py/bin/python3.12 -s", WHICH.get) == ["/opt/py/bin/python3.12", "-s"]
    assert shebang_interpreter("#!/bin/sh", WHICH.get) is None
    assert shebang_interpreter("#!/usr/bin/env -S python3 -u", WHICH.get) == ["/usr/bin/python3", "-u"]


def _probe(**found: object) -> str:
    return "WARNING some import noise\n" + PROBE_MARK + json.dumps(found) + "\n"


def test_engine_probe_answers() -> None:
    cpu = parse_engine_probe(_probe(version="0.32.0", commit=None, torch="2.13.0+cpu", cuda=None, hip=None))
    assert cpu == {"version": "0.32.0", "commit": None, "torch": "2.13.0+cpu", "build": "cpu"}
    cuda = parse_engine_probe(_probe(version="0.29.0", commit="52be12cfac0c", torch="2.9.0", cuda="12.8"))
    assert cuda is not None and cuda["build"] == "CUDA 12.8" and cuda["commit"] == "52be12cfac0c"
    rocm = parse_engine_probe(_probe(version="0.29.0", torch="2.9.0", hip="6.4.1"))
    assert rocm is not None and rocm["build"] == "ROCm 6.4.1"
    broken = parse_engine_probe(_probe(error="ModuleNotFoundError: No module named 'vllm'"))
    assert broken is not None and broken["error"].startswith("ModuleNotFoundError") and broken["build"] is None
    assert parse_engine_probe("Traceback ...\n") is None
