"""The server's HTTP API besides streaming: `/v1/models`, `/version`, `/tokenize`, `/metrics` (httpx)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import httpx

from toolkit.base.api_keys import excerpt, redact, redact_and_cut
from toolkit.base.errors import ServerAPIError
from toolkit.base.tls import tls_context
from toolkit.matrix.prometheus import (
    RUNNING,
    WAITING,
    MetricsSnapshot,
    foreign_metrics,
    merge_snapshots,
    parse_metrics,
)

MAX_REPLY_BYTES = 16 * 1024 * 1024  # vLLM's /metrics is ~100 KB; a reply past this is refused, not held


class ServerAPI:
    """Async access to the non-streaming endpoints. Use as an async context manager.

    `metrics_urls` (the `server_metrics` parameter: full URLs ending in /metrics): the replicas behind a gateway at
    `base_url`, scraped instead of `base_url`'s own `/metrics` and merged into one snapshot (`merge_snapshots`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        metrics_urls: Sequence[str] | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.metrics_urls = list(metrics_urls or [])
        # Uncompressed replies only: a 398 KiB gzip /metrics grew this process by 1.2 GiB when it was inflated.
        headers = {"Accept-Encoding": "identity"} | ({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self.has_key = bool(api_key)
        self._key = api_key
        self._timeout_s = timeout_s
        # trust_env=False: no HTTP(S)_PROXY from the environment sees the key (the streams go direct too).
        self._client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=timeout_s, trust_env=False, verify=tls_context()
        )
        self.tokenize_calls = 0  # /tokenize requests made (a trace's prompts are built within a budget of them)

    async def __aenter__(self) -> ServerAPI:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    def _where(self, path: str) -> str:
        """The URL asked: `path` under base_url, or `path` itself when it is a full URL (a `metrics_urls` entry)."""
        return path if path.startswith(("http://", "https://")) else f"{self.base_url}{path}"

    def _unreachable(self, path: str, exc: httpx.HTTPError) -> ServerAPIError:
        return ServerAPIError(redact(f"cannot reach {self._where(path)}: {type(exc).__name__}: {exc}", self._key))

    async def _fetch(self, method: str, path: str, json: dict[str, Any] | None = None) -> httpx.Response:
        """One request, read whole within `timeout_s` in all (httpx's timeout is per read: a server trickling a byte
        a second would hold it for ever) and up to MAX_REPLY_BYTES, uncompressed."""
        try:
            async with asyncio.timeout(self._timeout_s), self._client.stream(method, path, json=json) as response:
                encoding = response.headers.get("content-encoding", "identity").strip().lower()
                if encoding not in ("", "identity"):
                    raise ServerAPIError(f"{self._where(path)} answered {encoding[:40]!r}-encoded though asked for "
                                         "an uncompressed reply", response.status_code)  # fmt: skip
                body = bytearray()
                async for piece in response.aiter_bytes():  # identity: the bytes as sent
                    body += piece
                    if len(body) > MAX_REPLY_BYTES:
                        raise ServerAPIError(f"{self._where(path)} answered more than {MAX_REPLY_BYTES:,} bytes",
                                             response.status_code)  # fmt: skip
        except TimeoutError:
            raise ServerAPIError(f"{self._where(path)} did not answer in full within {self._timeout_s:g} s") from None
        except httpx.HTTPError as exc:
            raise self._unreachable(path, exc) from None
        return httpx.Response(response.status_code, headers=response.headers, content=bytes(body))

    async def _get(self, path: str) -> httpx.Response:
        response = await self._fetch("GET", path)
        where = self._where(path)
        if response.status_code == 401:
            raise ServerAPIError(f"{where} answered 401 Unauthorized: the server needs an API key", 401)
        if response.status_code != 200:
            raise ServerAPIError(f"{where} answered HTTP {response.status_code}", response.status_code)
        return response

    def _object(self, path: str, response: httpx.Response) -> dict[str, Any]:
        """A 200 reply's JSON object; ServerAPIError (status 200) when it is not one (e.g. a gateway's HTML page)."""
        try:
            data = response.json()
        except ValueError:  # not JSON, or not UTF-8
            data = None
        if not isinstance(data, dict):
            kind = response.headers.get("content-type") or "no content type"
            shown = excerpt(response.text, 83, self._key)
            raise ServerAPIError(
                f"{self.base_url}{path} answered 200 but not with a JSON object ({kind}: {shown})", 200
            )
        return data

    def _malformed(self, path: str, what: str, value: Any) -> ServerAPIError:
        shown = excerpt(value, 83, self._key)
        return ServerAPIError(f"{self._where(path)} answered 200 with {what} (got {shown})", 200)

    async def route_status(self, path: str) -> int:
        """The status a GET of `path` answers: a POST-only route that exists answers 405 (vLLM's and most HTTP
        frameworks'), one the server lacks 404. Nothing is generated or queued."""
        return (await self._fetch("GET", path)).status_code

    async def models(self) -> list[dict[str, Any]]:
        """The served models' cards (`data` of `/v1/models`)."""
        data = self._object("/v1/models", await self._get("/v1/models")).get("data", [])
        if not isinstance(data, list) or not all(isinstance(m, dict) for m in data):
            raise self._malformed("/v1/models", "`data` that is not a list of objects", data)
        return data

    async def version(self) -> str | None:
        """The server's version; None when `/version` is missing or unreachable (a malformed 200 raises)."""
        try:
            version = self._object("/version", await self._get("/version")).get("version")
        except ServerAPIError as exc:
            if exc.status == 200:
                raise
            return None
        if version is not None and not isinstance(version, str):
            raise self._malformed("/version", "a version that is not a string", version)
        return version

    async def metrics(self) -> MetricsSnapshot:
        """One scrape; ServerAPIError when unreachable, not Prometheus text with finite samples, or not vLLM's
        metrics (a gateway's own: judged from them, every cell would wait for a running count that never comes).

        With `metrics_urls`, each of them at once, merged in their order (`merge_snapshots`); the first of them
        that fails, in that order, fails the scrape, its URL in the message."""
        if not self.metrics_urls:
            return await self._scrape("/metrics")
        scrapes = await asyncio.gather(*(self._scrape(url) for url in self.metrics_urls), return_exceptions=True)
        for scrape in scrapes:
            if isinstance(scrape, BaseException):
                raise scrape
        return merge_snapshots([s for s in scrapes if isinstance(s, MetricsSnapshot)])

    async def _scrape(self, path: str) -> MetricsSnapshot:
        """One `/metrics` text (`path` under base_url, or a full URL) parsed and checked to be vLLM's."""
        response = await self._get(path)
        try:
            snapshot = parse_metrics(response.text)
        except ValueError as exc:
            raise self._malformed(path, "metrics that cannot be used", exc) from None
        if (foreign := foreign_metrics(snapshot, response.text)) is not None:
            raise ServerAPIError(f"{self._where(path)} holds none of vLLM's gauges: {foreign}", 200)
        return snapshot

    async def metrics_or_none(self) -> MetricsSnapshot | None:
        """One scrape, or None when `/metrics` is unreachable or malformed (callers fall back to client-side rules)."""
        try:
            return await self.metrics()
        except ServerAPIError:
            return None

    async def running_waiting(self) -> tuple[int, int] | None:
        snap = await self.metrics_or_none()
        if snap is None:
            return None
        return int(snap.value(RUNNING) or 0), int(snap.value(WAITING) or 0)

    async def count_tokens(self, model: str, text: str, *, chat: bool) -> int:
        """Prompt tokens the server will see for `text` (with the chat template when `chat`)."""
        body: dict[str, Any] = {"model": model}
        if chat:
            body.update(messages=[{"role": "user", "content": text}], add_generation_prompt=True)
        else:
            body["prompt"] = text
        self.tokenize_calls += 1
        response = await self._fetch("POST", "/tokenize", json=body)
        if response.status_code != 200:
            detail = redact_and_cut(response.text, 200, self._key)
            raise ServerAPIError(
                f"{self.base_url}/tokenize answered HTTP {response.status_code}: {detail}", response.status_code
            )
        count = self._object("/tokenize", response).get("count")
        if type(count) is not int or count < 0:
            raise self._malformed("/tokenize", "no token count", count)
        return count
