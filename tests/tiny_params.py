"""The tiny matrix the fast tests run: one short cell of a 64-token context, short timeouts, no drift control."""

from __future__ import annotations

from typing import Any


def tiny_params(**overrides: Any) -> dict[str, Any]:
    """A fresh dict of tiny run parameters; `overrides` replace or add fields, and an override of None leaves its
    field out (the toolkit's default)."""
    values: dict[str, Any] = {"contexts": [64], "concurrency": [1], "duration_s": 0.5, "max_output": 8,
                              "readiness_timeout_s": 5.0, "read_timeout_s": 5.0, "control_window_s": 0}  # fmt: skip
    values.update(overrides)
    return {name: value for name, value in values.items() if value is not None}
