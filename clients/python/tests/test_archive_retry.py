"""The archive's download is asked again while the server answers 429 (it writes at most 16
archives at once, and answers one more `overloaded` with `Retry-After: 1`), bounded; a tool call
never is. Both clients, against an `httpx.MockTransport`: no server, and no real sleeping (the
waits are recorded instead).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from harness_sandbox import AsyncSandbox, Sandbox
from harness_sandbox.models import OverloadedError

URL = "http://sandbox.test"
TAR = b"a tar archive" + bytes(500)
ARCHIVE = "GET /v1/workspace/archive"


def busy(retry_after: str | None = "1") -> Callable[[], httpx.Response]:
    """The server's answer past its archive streams (`ApiError::TooManyArchives`)."""
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    error = {"type": "overloaded", "message": "16 workspace archives are being written already (the most at once); retry when one ends"}
    return lambda: httpx.Response(429, headers=headers, json={"error": error})


def archive() -> httpx.Response:
    return httpx.Response(200, headers={"Content-Type": "application/x-tar"}, content=TAR)


class Server:
    """Answers the requests with `answers` in turn (the last one again and again); keeps them."""

    def __init__(self, *answers: Callable[[], httpx.Response]):
        self.answers = answers
        self.requests: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(f"{request.method} {request.url.path}")
        return self.answers[min(len(self.requests), len(self.answers)) - 1]()


class Client:
    """`client(server, method)`: `method(sandbox)` on the sync or the async client, its HTTP
    answered by `server`; `waits` keeps the seconds it slept between attempts."""

    def __init__(self, kind: str, monkeypatch: pytest.MonkeyPatch):
        self.kind = kind
        self.waits: list[float] = []

        async def sleep(seconds: float) -> None:
            self.waits.append(seconds)

        monkeypatch.setattr(time, "sleep", self.waits.append)
        monkeypatch.setattr(asyncio, "sleep", sleep)

    def __call__(self, server: Server, method: Callable[[Any], Any]) -> Any:
        if self.kind == "sync":
            with Sandbox(URL) as sandbox:
                sandbox._http.close()
                sandbox._http = httpx.Client(base_url=URL, transport=httpx.MockTransport(server))
                return method(sandbox)

        async def session() -> Any:
            async with AsyncSandbox(URL) as sandbox:
                await sandbox._http.aclose()
                sandbox._http = httpx.AsyncClient(base_url=URL, transport=httpx.MockTransport(server))
                return await method(sandbox)

        return asyncio.run(session())


@pytest.fixture(params=["sync", "async"])
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Client:
    return Client(request.param, monkeypatch)


def test_an_archive_refused_twice_is_taken_at_the_third_attempt(client: Client) -> None:
    server = Server(busy(), busy(), archive)
    tar = client(server, lambda sandbox: sandbox.archive())
    assert tar == TAR
    assert server.requests == [ARCHIVE] * 3
    # The server's `Retry-After: 1`, honoured.
    assert client.waits == [1.0, 1.0]


def test_an_archive_refused_every_time_says_so_after_the_last_attempt(client: Client) -> None:
    server = Server(busy("0"))
    with pytest.raises(OverloadedError) as refused:
        client(server, lambda sandbox: sandbox.archive())
    assert server.requests == [ARCHIVE] * 5
    assert refused.value.status == 429 and refused.value.type == "overloaded"
    assert "refused with 429 after 5 attempts" in str(refused.value), refused.value
    assert "16 workspace archives" in refused.value.message
    assert client.waits == [0.0] * 4


def test_without_retry_after_the_wait_is_a_short_backoff(client: Client) -> None:
    server = Server(busy(None), busy(None), busy(None), busy(None), archive)
    tar = client(server, lambda sandbox: sandbox.archive())
    assert tar == TAR and len(server.requests) == 5
    assert client.waits == [0.5, 1.0, 2.0, 4.0]


def test_a_long_retry_after_is_honoured_within_30_seconds_in_all(client: Client) -> None:
    server = Server(busy("20"))
    with pytest.raises(OverloadedError, match="refused with 429 after 3 attempts"):
        client(server, lambda sandbox: sandbox.archive())
    assert server.requests == [ARCHIVE] * 3
    # 20 s as asked, then the 10 s left of the 30.
    assert client.waits == [20.0, 10.0]


def test_a_tool_call_refused_with_429_is_not_asked_again(client: Client) -> None:
    server = Server(busy("0"), archive)
    with pytest.raises(OverloadedError) as refused:
        client(server, lambda sandbox: sandbox.bash("echo once"))
    assert server.requests == ["POST /v1/tools/bash"] and client.waits == []
    assert "refused with 429 after" not in str(refused.value)
