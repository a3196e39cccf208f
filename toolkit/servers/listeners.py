"""Who listens on a URL's port on this machine: the processes behind a local `base_url`."""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import psutil


def is_this_machine(hostname: str | None) -> bool:
    """Whether a URL's host reaches this machine: `localhost`, the whole loopback range (127.0.0.0/8, ::1, and
    shorthands such as 127.1), the unspecified addresses (0.0.0.0, ::), or an address of one of its interfaces."""
    if not hostname:
        return False
    if hostname.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(hostname)
    except ValueError:
        try:
            address = ipaddress.ip_address(socket.inet_aton(hostname))  # what connect() takes: 127.1, 2130706433
        except OSError:
            return False
    if address.is_loopback or address.is_unspecified:
        return True
    own = {entry.address.split("%")[0] for entries in psutil.net_if_addrs().values() for entry in entries}
    return str(address) in own


def port_listeners(base_url: str) -> list[int | None]:
    """The processes listening on a local `base_url`'s port; None stands for a listener whose owner this process
    cannot see (another user's, when not root), or for all of them when the sockets cannot be listed."""
    url = urlsplit(base_url)
    if not is_this_machine(url.hostname):
        return []
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        connections = psutil.net_connections(kind="tcp")
    except (psutil.AccessDenied, OSError):
        return [None]
    return [c.pid for c in connections if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port]


def listening_pids(base_url: str) -> list[int]:
    """The visible processes listening on a local `base_url`'s port (empty when none can be seen)."""
    return [pid for pid in port_listeners(base_url) if pid is not None]
