"""``stockade serve --transport http`` under a flood: one client must not take the service.

Real servers (subprocesses) on loopback; real MCP SDK clients beside the attackers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import anyio
import httpx2
import pytest

from host.mcp.tokens import TokenFile
from tests.mcp.conftest import World
from tests.mcp.test_http import HEADERS, INITIALIZE, Served, _tools, grant_carol_reader, http_server

STDERR_BUDGET = 4096  # bytes a flood may make the server write to stderr


@pytest.fixture
def tokens(world: World) -> TokenFile:
    grant_carol_reader(world)
    return TokenFile(world.state / "tokens.json")


def _open_session(served: Served, token: str) -> httpx2.Response:
    headers = HEADERS | {"Authorization": f"Bearer {token}"}
    return httpx2.post(served.url, json=INITIALIZE, headers=headers, timeout=30)


def test_one_principal_opening_its_max_sessions_leaves_others_served(world: World, tokens: TokenFile) -> None:
    alice, _ = tokens.add(project="p", subject="alice", ttl_s=3600)
    alice_laptop, _ = tokens.add(project="p", subject="alice", ttl_s=3600)  # same principal, other token
    carol, _ = tokens.add(project="p", subject="carol", ttl_s=3600)
    args = ("--tokens", str(tokens.path), "--max-sessions-per-principal", "3", "--session-idle", "3")
    with http_server(world, *args, tokens=tokens) as served:
        opened = [_open_session(served, alice) for _ in range(2)] + [_open_session(served, alice_laptop)]
        assert [r.status_code for r in opened] == [200, 200, 200]
        refused = _open_session(served, alice)
        assert refused.status_code == 429
        assert "the bound is 3 per principal" in refused.json()["error"]["message"]
        assert _open_session(served, alice_laptop).status_code == 429  # the bound is the principal's

        names, said = anyio.run(_tools, served, carol, True)  # another principal: unaffected
        assert names == ["echo.say"] and said is not None and said.is_error is False

        time.sleep(4)  # the documented idle expiry frees alice's sessions
        gone = opened[0].headers["mcp-session-id"]
        probe = HEADERS | {"Authorization": f"Bearer {alice}", "mcp-session-id": gone}
        assert httpx2.post(served.url, json=INITIALIZE, headers=probe, timeout=30).status_code == 404
        assert _open_session(served, alice).status_code == 200


class _Flood:
    """Keeps ``count`` half-open connections (half a request head each) open to ``port``."""

    HALF_HEAD = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    REFILL = 50  # connections re-opened per 50 ms round (about 1,000 a second at most)

    def __init__(self, port: int, count: int) -> None:
        self._port, self._count = port, count
        self._stop = threading.Event()
        self.opened = 0
        self.closed_by_server = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> _Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        socks: list[socket.socket] = []
        while not self._stop.is_set():
            refill = 0
            while len(socks) < self._count and refill < self.REFILL and not self._stop.is_set():
                refill += 1
                s = socket.socket()
                s.setblocking(False)
                try:
                    s.connect_ex(("127.0.0.1", self._port))
                    time.sleep(0.0005)
                    s.send(self.HALF_HEAD)
                except OSError:
                    s.close()
                    break
                socks.append(s)
                self.opened += 1
            alive = []
            for s in socks:
                try:
                    if s.recv(1) == b"":
                        raise ConnectionResetError
                    alive.append(s)
                except BlockingIOError:
                    alive.append(s)
                except OSError:
                    self.closed_by_server += 1
                    s.close()
            socks = alive
            time.sleep(0.05)
        for s in socks:
            s.close()


@pytest.fixture
def flooded(world: World, tokens: TokenFile) -> Iterator[Served]:
    args = ("--tokens", str(tokens.path), "--request-timeout", "1", "--max-connections", "512")
    with http_server(world, *args, tokens=tokens, nofile=256) as served:
        yield served


def test_half_open_flood_under_low_fd_limit_leaves_a_client_served(flooded: Served, tokens: TokenFile) -> None:
    # Attack: connections that send half a request head stayed open for ever; under a
    # 1,024-fd limit they locked out real clients and asyncio's accept-failure traceback
    # filled the log. Here: RLIMIT_NOFILE 256 and 400 half-open connections kept open.
    carol, _ = tokens.add(project="p", subject="carol", ttl_s=3600)
    port = int(flooded.url.rsplit(":", 1)[1].split("/", 1)[0])
    served = 0
    with _Flood(port, 400) as flood:
        time.sleep(1.5)
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            names, said = anyio.run(_tools, flooded, carol, True)
            assert names == ["echo.say"] and said is not None and said.is_error is False
            served += 1
        time.sleep(0.5)
    assert served >= 3
    assert flood.opened > 400 and flood.closed_by_server > 100  # the deadline closed them
    time.sleep(1)
    written = "".join(line for line in flooded.stderr if "listening on" not in line)
    assert len(written.encode()) < STDERR_BUDGET, written[-2000:]
    assert "RLIMIT_NOFILE is 256" in written  # the cap was clamped below the fd limit
