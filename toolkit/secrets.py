"""Secrets: the API key comes from the environment only, and is redacted from anything written."""

from __future__ import annotations

import os
import re

REDACTED = "<redacted>"
_FLAG = re.compile(r"(--api-key(?:=|\s+))('[^']*'|\"[^\"]*\"|\S+)")
# The secret word ends the name or one of its _-separated parts: HF_TOKEN, AWS_SECRET_ACCESS_KEY, not
# TOKENIZERS_PARALLELISM.
_ENV = re.compile(r"\b([A-Z0-9_]*(?:API_KEY|TOKEN|SECRET)S?(?:_[A-Z0-9]+)*=)('[^']*'|\"[^\"]*\"|\S+)")


def api_key_from_env(variable: str) -> str | None:
    """The key in environment variable `variable`, or None when unset or empty."""
    return os.environ.get(variable) or None


def redact(text: str, *secrets: str | None) -> str:
    """Replace `--api-key VALUE`, `*_API_KEY=VALUE` and every known secret value with `<redacted>`."""
    text = _FLAG.sub(lambda m: m.group(1) + REDACTED, text)
    text = _ENV.sub(lambda m: m.group(1) + REDACTED, text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text
