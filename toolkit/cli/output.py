"""What every command prints on failure."""

from __future__ import annotations

import sys

from toolkit.base.api_keys import scrub


def error(text: str) -> None:
    """Print an error on stderr, every secret this process knows redacted, without control characters."""
    print(scrub(f"error: {text}"), file=sys.stderr)
