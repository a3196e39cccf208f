"""`toolkit.base.tls.tls_context`: every httpx client of a process shares one verifying context."""

from __future__ import annotations

import ssl

import pytest

from toolkit.base.tls import tls_context
from toolkit.loadgen.embeddings import EmbeddingClient
from toolkit.matrix.server_api import ServerAPI


def test_many_clients_read_the_ca_bundle_once(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[ssl.SSLContext] = []
    real = ssl.create_default_context

    def counted(*args: object, **kwargs: object) -> ssl.SSLContext:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    monkeypatch.setattr(ssl, "create_default_context", counted)
    tls_context.cache_clear()
    try:
        clients = [ServerAPI("https://127.0.0.1:9") for _ in range(5)]
        clients += [EmbeddingClient("https://127.0.0.1:9") for _ in range(5)]  # type: ignore[misc]
        assert len(made) == 1  # httpx's own default: one context, and one CA bundle read, per client
        assert tls_context() is made[0] and tls_context().verify_mode == ssl.CERT_REQUIRED
    finally:
        tls_context.cache_clear()
