"""vLLM's `vllm:lora_requests_info` gauge: which LoRA adapters the engine ran and queued during a step (pure).

vLLM (0.32) counts an adapter's requests and tokens under its base model's name; this gauge alone names adapters.
It has one series per label set seen (`running_lora_adapters`, `waiting_lora_adapters`: comma-separated names;
`max_lora`), each valued with the wall time that set was last seen at an engine step. A set whose time falls in
the step's wall-clock window was seen during the step; one seen only before it is not counted. The window is the
client's clock against the server's: on one machine they agree; across machines their skew shifts it.
"""

from __future__ import annotations

from typing import Any

from toolkit.matrix.prometheus import LORA_INFO, MetricsSnapshot

__all__ = ["LORA_INFO", "lora_adapters_seen"]


def _names(value: str | None) -> set[str]:
    return {name.strip() for name in (value or "").split(",") if name.strip()}


def lora_adapters_seen(snapshot: MetricsSnapshot | None, since: float, until: float) -> dict[str, Any] | None:
    """The adapters the server had running and waiting at any engine step in [since, until] (Unix seconds), and its
    `max_lora` (adapters it holds at once); None when the server exports no such gauge."""
    if snapshot is None or LORA_INFO not in snapshot.samples:
        return None
    running: set[str] = set()
    waiting: set[str] = set()
    slots: set[int] = set()
    for labels, seen in snapshot.samples[LORA_INFO]:
        if since <= seen <= until:
            running |= _names(labels.get("running_lora_adapters"))
            waiting |= _names(labels.get("waiting_lora_adapters"))
            if (max_lora := labels.get("max_lora", "")).isdigit():
                slots.add(int(max_lora))
    return {"running": sorted(running), "waiting": sorted(waiting), "max_lora": max(slots) if slots else None}
