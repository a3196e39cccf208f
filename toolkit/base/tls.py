"""The one TLS context that every httpx client of the process shares."""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once: a client that makes its own reads the CA bundle again, 16-19 ms
    of CPU a client here against 0.2-0.6 ms with this one (benchmarks/setup_costs.py), a /health poll included."""
    return httpx.create_ssl_context()
