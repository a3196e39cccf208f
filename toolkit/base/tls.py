"""The one TLS context that every httpx client of the process shares."""

from __future__ import annotations

import functools
import ssl

import httpx

__all__ = ["tls_context"]


@functools.cache
def tls_context() -> ssl.SSLContext:
    """httpx's default verifying context, made once: each client that makes its own reads the CA bundle again,
    21 ms of CPU a client here (benchmarks/client_setup.py), a /health poll included."""
    return httpx.create_ssl_context()
