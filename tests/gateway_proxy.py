"""A small reverse proxy in front of a server, as a gateway stands in front of vLLM: every request streams through,
but `/metrics` answers with the proxy's own metrics, none of vLLM's (tests/integration/test_gateway_vllm.py,
benchmarks/gateway_proxy.py). In front of several servers it is a round-robin load balancer: each request, whole
stream and all, goes to the next of them in turn."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from itertools import cycle

from aiohttp import ClientSession, web

GATEWAY_METRICS = "# TYPE gateway_requests_total counter\ngateway_requests_total 1.0\n"
FORWARDED = ("authorization", "content-type", "accept")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def gateway(upstream: str | Sequence[str]) -> Iterator[str]:
    """A reverse proxy on 127.0.0.1 in a thread: `/metrics` is its own, everything else streams from `upstream`;
    given several upstreams, each request goes to the next of them in turn (round-robin, from the first), with the
    same headers (Authorization included) whichever it is."""
    upstreams = [upstream] if isinstance(upstream, str) else list(upstream)
    if not upstreams:
        raise ValueError("gateway: no upstream")
    turn = cycle(upstreams)  # advanced only on the proxy's event loop thread: no lock needed
    loop = asyncio.new_event_loop()
    port = _free_port()
    ready = threading.Event()
    state: dict[str, object] = {}

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=GATEWAY_METRICS, content_type="text/plain")

    async def forward(request: web.Request) -> web.StreamResponse:
        session = state["session"]
        assert isinstance(session, ClientSession)
        headers = {k: v for k, v in request.headers.items() if k.lower() in FORWARDED}
        target = next(turn)  # chosen before the body is read: the order requests arrived in is the order served
        async with session.request(
            request.method, target + request.rel_url.path_qs, data=await request.read(), headers=headers
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            response.content_type = answer.content_type
            await response.prepare(request)
            try:
                async for piece in answer.content.iter_any():
                    await response.write(piece)
                await response.write_eof()
            except ConnectionResetError:  # the client ended the stream (a window closed): nothing left to pass on
                pass
            return response

    async def serve() -> None:
        state["session"] = ClientSession()
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_route("*", "/{tail:.*}", forward)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        state["runner"] = runner
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop)
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:

        async def stop() -> None:
            runner, session = state["runner"], state["session"]
            assert isinstance(runner, web.AppRunner) and isinstance(session, ClientSession)
            await session.close()
            await runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()  # its self-pipe sockets too: left open, a later test's gc.collect() reports them
