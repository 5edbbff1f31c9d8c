"""A server that cannot be reached: the error names where the client
looked and how to start one (no server is needed)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from outpost import AsyncClient, Client, TransportError


def test_missing_socket(tmp_path):
    sock = tmp_path / "run" / "serve.sock"
    with Client(socket=str(sock)) as c:
        with pytest.raises(TransportError) as ei:
            c.health()
    msg = str(ei.value)
    assert str(sock) in msg and "does not exist" in msg and "`outpost serve`" in msg
    assert msg.startswith("outpost: GET /healthz: ")


def test_missing_socket_async(tmp_path):
    sock = tmp_path / "serve.sock"

    async def go():
        async with AsyncClient(url="unix:" + str(sock)) as c:
            await c.health()

    with pytest.raises(TransportError) as ei:
        asyncio.run(go())
    assert str(sock) in str(ei.value) and "`outpost serve`" in str(ei.value)


def test_stale_socket(tmp_path):
    """A socket file nobody listens on (a server that died)."""
    sock = tmp_path / "serve.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(sock))
    s.close()
    with Client(socket=str(sock)) as c:
        with pytest.raises(TransportError) as ei:
            c.agents()
    msg = str(ei.value)
    assert str(sock) in msg and "is `outpost serve` running?" in msg


def test_tcp_nobody_listens():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    url = f"http://127.0.0.1:{port}"
    with Client(url=url, token="opt_x") as c:
        with pytest.raises(TransportError) as ei:
            c.health()
    msg = str(ei.value)
    assert url in msg and "`outpost serve --listen`" in msg and "opt_x" not in msg


def test_events_of_a_missing_socket(tmp_path):
    sock = tmp_path / "serve.sock"
    with Client(socket=str(sock), max_reconnects=0) as c:
        with pytest.raises(TransportError) as ei:
            list(c.events("t01x"))
    msg = str(ei.value)
    assert "event stream of t01x" in msg and str(sock) in msg and "`outpost serve`" in msg
