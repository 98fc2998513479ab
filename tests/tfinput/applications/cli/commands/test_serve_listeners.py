"""`tfinput._src.applications.cli.commands.serve`: the listening addresses read from the kernel's
socket table, for sockets bound to loopback and to every interface (IPv4 and IPv6),
checked against ``ss -ltn`` where it is installed. Nothing connects anywhere."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys

import pytest

from tfinput._src.applications.cli.commands.serve import (
    is_loopback,
    listening_addresses,
    listening_on,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")


def _listen(family: int, host: str) -> socket.socket:
    s = socket.socket(family, socket.SOCK_STREAM)
    s.bind((host, 0))
    s.listen()
    return s


def test_each_bound_address_is_read_back_as_bound():
    with contextlib.ExitStack() as stack:
        bound = {}
        for family, host, shown in (
            (socket.AF_INET, "127.0.0.1", "127.0.0.1"),
            (socket.AF_INET, "0.0.0.0", "0.0.0.0"),
            (socket.AF_INET6, "::1", "[::1]"),
            (socket.AF_INET6, "::", "[::]"),
        ):
            s = stack.enter_context(_listen(family, host))
            bound[f"{shown}:{s.getsockname()[1]}"] = host in ("127.0.0.1", "::1")
        found = listening_addresses()
        assert found is not None and set(bound) <= set(found)
        assert {a: is_loopback(a) for a in bound} == bound
        wildcard = next(a for a in bound if a.startswith("[::]"))
        assert listening_on(int(wildcard.rsplit(":", 1)[1])) == f"{wildcard} (every interface)"
        local = next(a for a, loop in bound.items() if loop and a.startswith("127."))
        assert listening_on(int(local.rsplit(":", 1)[1])) == f"{local} (this host only)"
        if shutil.which("ss"):  # the same table as ss shows it (ss writes [::] as *)
            ss = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
            columns = {line.split()[3].replace("*:", "[::]:") for line in ss.splitlines()}
            assert set(bound) <= columns


def test_another_process_and_what_cannot_be_read():
    with _listen(socket.AF_INET, "127.0.0.1") as s:
        child = subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
        )
        try:
            assert listening_addresses(child.pid) == []  # it listens on nothing
            assert f"127.0.0.1:{s.getsockname()[1]}" in listening_addresses(os.getpid())
        finally:
            child.communicate(b"")
    assert listening_addresses(2**22 + 12345) is None  # no such process
    # A port nothing listens on: the address tf.data service would have bound.
    assert listening_on(1) == "0.0.0.0:1 (every interface)"
    assert is_loopback("[::ffff:127.0.0.1]:5") and not is_loopback("10.0.0.1:5")
