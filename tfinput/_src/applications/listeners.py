"""The TCP addresses a process listens on, read from the kernel's socket table.

    listening_addresses()             # this process: ["[::]:5099"] for a tf.data server
    listening_addresses(pid)          # another process (Linux: /proc/PID/fd and net/tcp*)

A server's own word for its address is not enough: tf.data service prints
``grpc://localhost:PORT`` while it accepts connections on every interface. The socket
table (what ``ss -ltn`` shows) says where a port is open, so `tfinput serve` prints that.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from pathlib import Path

__all__ = ["LOOPBACK", "is_loopback", "listening_addresses", "listening_on"]

#: What `is_loopback` accepts: IPv4 127.0.0.0/8 and IPv6 ::1 (and ::ffff:127.x).
LOOPBACK = ("127.0.0.0/8", "::1")

_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's ``st`` column


def listening_addresses(pid: int | None = None) -> list[str] | None:
    """The ``host:port`` addresses (IPv6 in brackets) that process ``pid`` (None: this
    one) has TCP sockets listening on, sorted; None where the socket table cannot be read
    (not Linux, or another user's process).

    ``0.0.0.0:P`` and ``[::]:P`` mean every interface (``[::]`` takes IPv4 too unless the
    socket is IPv6-only); ``127.0.0.1:P`` and ``[::1]:P`` mean this host only.
    """
    proc = Path("/proc") / str(pid if pid is not None else os.getpid())
    try:
        inodes = _socket_inodes(proc / "fd")
        tables = [(proc / "net" / name).read_text() for name in ("tcp", "tcp6")]
    except OSError:
        return None
    found = set()
    for table in tables:
        for line in table.splitlines()[1:]:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and fields[9] in inodes:
                found.add(_address(fields[1]))
    return sorted(found)


def is_loopback(address: str) -> bool:
    """Whether ``host:port`` (as `listening_addresses` writes it) is reachable from this
    host only."""
    host = address.rsplit(":", 1)[0].strip("[]")
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def listening_on(port: int, pid: int | None = None) -> str:
    """Where ``port`` is open, for a message: the addresses the socket table of ``pid``
    (None: this process) has listening on it, and whether that is every interface or
    this host only (``[::]:5050 (every interface)``). Where the table cannot be read:
    ``0.0.0.0:PORT``, the address tf.data service binds (``AddListeningPort("0.0.0.0:" +
    port)`` in TensorFlow's ``core/data/service/server_lib.cc``)."""
    found = [a for a in listening_addresses(pid) or () if a.endswith(f":{port}")]
    found = found or [f"0.0.0.0:{port}"]
    scope = "this host only" if all(is_loopback(a) for a in found) else "every interface"
    return f"{' and '.join(found)} ({scope})"


def _socket_inodes(fd_dir: Path) -> set[str]:
    inodes = set()
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def _address(field: str) -> str:
    """``0100007F:1F90`` -> ``127.0.0.1:8080``; IPv6 as ``[::1]:8080``. The kernel writes
    each 32-bit word of the address in host byte order."""
    hex_ip, hex_port = field.split(":")
    port = int(hex_port, 16)
    raw = b"".join(
        int(hex_ip[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(hex_ip), 8)
    )
    if len(raw) == 4:
        return f"{ipaddress.IPv4Address(raw)}:{port}"
    return f"[{ipaddress.IPv6Address(raw)}]:{port}"
