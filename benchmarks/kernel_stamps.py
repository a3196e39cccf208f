"""Arrival times from the kernel's receive timestamps (`SO_TIMESTAMPNS`) instead of the process's read time.

`KernelStampClient` is a `StreamClient` whose plain-http connections on Linux are sockets it reads itself with
`recvmsg`, taking each read's arrival time from the kernel's stamp; https (asyncio's TLS transport) and other
platforms keep the read time. The kernel stamps the bytes when they reach the socket, so a client busy with
other streams, or briefly preempted, still records when each token came; the price is a Python `recvmsg` per
read instead of uvloop's C read (numbers in benchmarks/README.md). The toolkit measures with the read time:
the kernel stamps CLOCK_REALTIME, and a step of that clock (seen on this VM) would move tokens out of their
window. benchmarks/client_overhead.py runs both.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import time

from toolkit.loadgen.client import StreamClient, _Connection

# recvmsg allocates its buffer on every call; below glibc's mmap threshold (128 KiB) that is a plain malloc
# (in isolation 256 KiB cost an mmap/munmap pair per read: 28 vs 6 us per 300-byte read).
READ_SIZE = 64 * 1024
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
AVAILABLE = sys.platform.startswith("linux") and hasattr(socket.socket, "recvmsg")
_TIMESPEC = struct.Struct("@qq")


class KernelStampClient(StreamClient):
    """A `StreamClient` whose chunk arrival times are the kernel's receive timestamps (plain http on Linux)."""

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        if self._tls or not AVAILABLE:
            return await super()._connect(loop)
        conn = _StampedConnection(self)
        await conn.open_socket(loop, self._host, self._port)
        return conn


class _StampedConnection(_Connection):
    """A connection on a socket read here with `recvmsg`, every read stamped by the kernel."""

    sock: socket.socket | None = None
    loop: asyncio.AbstractEventLoop | None = None

    @property
    def usable(self) -> bool:
        return not self.lost and self.sock is not None and self._clean

    async def open_socket(self, loop: asyncio.AbstractEventLoop, host: str, port: int) -> None:
        error: OSError | None = None
        for family, kind, proto, _, addr in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
            sock = socket.socket(family, kind, proto)
            sock.setblocking(False)
            try:
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.sock, self.loop = sock, loop
            self.client._open.add(self)
            loop.add_reader(sock.fileno(), self._readable)
            return
        raise error or OSError(f"no address for {host}")

    async def _write(self, request: bytes) -> None:
        sock, loop = self.sock, self.loop
        if sock is None or loop is None:
            self._socket_lost()
            return
        try:
            sent = sock.send(request)
            if sent < len(request):
                await loop.sock_sendall(sock, request[sent:])
        except (BlockingIOError, InterruptedError):
            await loop.sock_sendall(sock, request)
        except OSError:
            self._socket_lost()

    def _readable(self) -> None:
        sock = self.sock
        if sock is None:
            return
        try:
            data, ancillary, _, _ = sock.recvmsg(READ_SIZE, 64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._socket_lost()
            return
        if not data:
            self._socket_lost()
            return
        self.last_data = now = time.perf_counter()
        for level, kind, cdata in ancillary:
            if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(cdata) >= 16:
                sec, nsec = _TIMESPEC.unpack_from(cdata)
                # The kernel stamps arrival on CLOCK_REALTIME; carry it to the perf_counter scale of all other
                # times: now (perf_counter) minus how long ago it arrived (realtime, exact in integer ns).
                now += (sec * 1_000_000_000 + nsec - time.time_ns()) * 1e-9
        self._feed(data, now)

    def _socket_lost(self) -> None:
        if self.sock is not None:
            self._close_socket()
            self.connection_lost(None)

    def _close_socket(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            if self.loop is not None and not self.loop.is_closed():
                self.loop.remove_reader(sock.fileno())
            sock.close()

    def close(self) -> None:
        self._close_socket()
        super().close()
