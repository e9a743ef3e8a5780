"""The asynchronous client: `AsyncSandbox`, the same API as `Sandbox`, awaited."""

from __future__ import annotations

import json
import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx

from . import _calls as calls
from ._http import FINAL, Call, Connection, EventParser, Retry, drop_none, raise_for, tool_timeout
from .errors import SandboxApiError, SandboxConnectionError
from .models import (
    ArchivePutResponse,
    BashResult,
    ChangesResponse,
    DirListing,
    DroppedOutput,
    FilePutResponse,
    FingerprintResponse,
    HealthResponse,
    InfoResponse,
    ManagedProcess,
    ManifestResponse,
    MintedToken,
    OutputChunk,
    ProcessKillResponse,
    ProcessListResponse,
    ProcessOutput,
    ReadFileResult,
    ResetResponse,
    SearchReplaceResult,
    ShellRunResult,
    SnapshotResponse,
    StdinResponse,
    TokenInfo,
    TokenRevoked,
    ToolSpec,
    WriteFileResult,
)


class AsyncSandbox:
    """One sandbox-server. Every route of its API is a method (tools, files, the workspace's
    snapshots, changes and archives), with `processes`, `shells` and `tokens` for those routes.

        async with AsyncSandbox("https://sandbox:8443", token=..., ca="ca.pem") as sandbox:
            print((await sandbox.bash("make test"))["output"])

    An error answer raises the `SandboxApiError` subclass of its `type`
    (`harness_sandbox.models.ERRORS`).
    """

    def __init__(self, url: str, token: str | None = None, *, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, timeout: float = 60.0, resume_attempts: int = 8):
        self.connection = Connection(url.rstrip("/"), token, ca, cert, key, timeout)
        self.resume_attempts = resume_attempts
        self._http = httpx.AsyncClient(base_url=self.connection.url, headers=self.connection.headers(),
                                  verify=self.connection.verify(), timeout=timeout)
        self.processes = Processes(self)
        self.shells = Shells(self)
        self.tokens = Tokens(self)

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.connection.url!r})"

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _run(self, call: Call) -> Any:
        retry = Retry(call)
        while True:
            try:
                response = await self._http.request(call.method, call.path, json=call.json, content=call.content,
                                                    params=call.query(), headers=call.headers,
                                                    timeout=call.timeout or self.connection.timeout)
            except httpx.TransportError as err:
                raise SandboxConnectionError(f"{call.method} {self.connection.url}{call.path}: {err!r}") from err
            wait = retry.after(response.status_code, response.headers)
            if wait is None:
                return retry.read(response.status_code, response.content)
            await asyncio.sleep(wait)

    # Service.
    async def health(self) -> HealthResponse:
        return await self._run(calls.health())

    async def info(self) -> InfoResponse:
        return await self._run(calls.info())

    async def tools(self) -> list[ToolSpec]:
        return await self._run(calls.tools())

    async def metrics(self) -> str:
        """`GET /metrics`, the Prometheus text (a token with `observe`)."""
        return await self._run(calls.metrics())

    # Tools.
    async def call_tool(self, name: str, args: dict[str, Any], *, call_id: str | None = None, **step: Any) -> dict[str, Any]:
        """Any tool, a plugin's included; `step` takes `since`, `fingerprint`, `inline_max_bytes`."""
        call = calls.tool(name, args, call_id, **step)
        call.timeout = tool_timeout(args, self.connection)
        return await self._run(call)

    async def bash(self, cmd: str, *, timeout: int | None = None, call_id: str | None = None) -> BashResult:
        """Runs `cmd`; a non-zero exit or a timeout is a result, not an exception."""
        return await self.call_tool("bash", drop_none(cmd=cmd, timeout=timeout), call_id=call_id)

    async def read_file(self, path: str, *, offset: int | None = None, limit: int | None = None) -> ReadFileResult:
        return await self.call_tool("read_file", drop_none(path=path, offset=offset, limit=limit))

    async def write_file(self, path: str, content: str) -> WriteFileResult:
        return await self.call_tool("write_file", {"path": path, "content": content})

    async def search_replace(self, path: str, search: str, replace: str) -> SearchReplaceResult:
        return await self.call_tool("search_replace", {"path": path, "search": search, "replace": replace})

    async def artifact(self, artifact_id: str) -> bytes | None:
        """A call's full output, kept past its truncation."""
        return await self._run(calls.artifact(artifact_id))

    # Files.
    async def get_file(self, path: str) -> bytes | None:
        """A file's bytes, or `None` when there is none."""
        return await self._run(calls.get_file(path))

    async def put_file(self, path: str, content: bytes | str, *, mode: str | None = None) -> FilePutResponse:
        data = content.encode() if isinstance(content, str) else content
        return await self._run(calls.put_file(path, data, mode))

    async def list_dir(self, path: str = "") -> DirListing | None:
        return await self._run(calls.list_dir(path))

    # The workspace.
    async def snapshot(self) -> SnapshotResponse:
        return await self._run(calls.snapshot())

    async def manifest(self, snapshot_id: str) -> ManifestResponse:
        return await self._run(calls.manifest(snapshot_id))

    async def changes(self, since: str) -> ChangesResponse:
        """What was added, modified and deleted since snapshot `since`, and a snapshot of now."""
        return await self._run(calls.changes(since))

    async def diff(self, since: str, to: str | None = None, max_bytes: int | None = None) -> str:
        """The changes since snapshot `since` (to snapshot `to`, or to now) as a unified diff,
        git style, at most `max_bytes` long (1 MiB when not given)."""
        return await self._run(calls.diff(since, to, max_bytes))

    async def blob(self, sha256: str) -> bytes | None:
        """A file version a manifest or change names."""
        return await self._run(calls.blob(sha256))

    async def archive(self) -> bytes:
        """The workspace as a tar archive."""
        return await self._run(calls.archive())

    async def restore(self, tar: bytes) -> ArchivePutResponse:
        """Replaces the whole workspace with a tar archive's files (an `archive()` earlier)."""
        return await self._run(calls.restore(tar))

    async def fingerprint(self) -> FingerprintResponse:
        return await self._run(calls.fingerprint())

    async def reset(self) -> ResetResponse:
        return await self._run(calls.reset())


class Processes:
    """`sandbox.processes`: processes started under an id of yours."""

    def __init__(self, sandbox: AsyncSandbox):
        self._sandbox = sandbox

    async def start(self, id: str, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
                    timeout: int | None = None, tty: tuple[int, int] | None = None) -> Process:
        request = drop_none(id=id, cmd=cmd, cwd=cwd, env=env, timeout=timeout,
                            tty={"rows": tty[0], "cols": tty[1]} if tty else None)
        return Process(self._sandbox, await self._sandbox._run(calls.start_process(request)))

    async def get(self, id: str) -> Process:
        return Process(self._sandbox, await self._sandbox._run(calls.get_process(id)))

    async def list(self) -> ProcessListResponse:
        return await self._sandbox._run(calls.list_processes())

    async def kill_background(self, *, include_running: bool = False) -> ProcessKillResponse:
        return await self._sandbox._run(calls.kill_background(include_running))


class Process:
    """A process started by id. `output()` follows its output to its end, resuming by itself
    after a dropped connection; `exit` is the process as it ended."""

    def __init__(self, sandbox: AsyncSandbox, info: ManagedProcess):
        self._sandbox = sandbox
        self.id: str = info["id"]
        self.info = info
        self.exit: ManagedProcess | None = None
        self.dropped: list[DroppedOutput] = []
        self.last_event_id: str | None = None
        self.resumed = 0

    async def refresh(self) -> ManagedProcess:
        self.info = await self._sandbox._run(calls.get_process(self.id))
        return self.info

    async def read(self, after_seq: int = 0, *, wait_ms: int | None = None, max_bytes: int | None = None) -> ProcessOutput:
        """The numbered output after `after_seq` (a long poll with `wait_ms`)."""
        return await self._sandbox._run(calls.output(self.id, after_seq, wait_ms, max_bytes))

    async def output(self) -> AsyncIterator[OutputChunk]:
        """Each chunk of output as it comes (`GET …/events`), until the process ends."""
        async for name, data in self._events():
            if name == "output":
                yield data
            elif name == "dropped":
                self.dropped.append(data)
            elif name == "exit":
                self.exit = self.info = data
                return

    async def wait(self) -> ManagedProcess:
        """Follows the output to the end; the process as it ended."""
        async for _ in self.output():
            pass
        assert self.exit is not None
        return self.exit

    async def _events(self) -> AsyncIterator[tuple[str, Any]]:
        sandbox, failures = self._sandbox, 0
        while True:
            headers = {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}
            try:
                timeout = httpx.Timeout(sandbox.connection.timeout)
                async with sandbox._http.stream("GET", calls.events_path(self.id), headers=headers,
                                                timeout=timeout) as answer:
                    if answer.status_code >= 400:
                        raise_for(answer.status_code, await answer.aread())
                    parser = EventParser()
                    async for line in answer.aiter_lines():
                        event = parser.feed(line)
                        if event is None:
                            continue
                        name, event_id, data = event
                        failures = 0
                        if event_id:
                            self.last_event_id = event_id
                        if name == "error":
                            # The server ended the stream (its token lapsed): the reconnection
                            # says why, as the typed error of its answer.
                            break
                        yield name, json.loads(data)
                        if name == "exit":
                            return
            except SandboxApiError as err:
                if err.status in FINAL or failures >= sandbox.resume_attempts:
                    raise
            except httpx.TransportError as err:
                if failures >= sandbox.resume_attempts:
                    raise SandboxConnectionError(f"following {self.id}: {err!r}, {failures} resumes failed") from err
            # The stream ended before the process: resume where it stopped.
            failures += 1
            self.resumed += 1
            await asyncio.sleep(min(0.05 * 2 ** failures, 2.0))

    async def stdin(self, data: str = "", *, close: bool = False, encoding: str | None = None) -> StdinResponse:
        return await self._sandbox._run(calls.stdin(self.id, data, close, encoding))

    async def signal(self, name: str) -> None:
        await self._sandbox._run(calls.signal(self.id, name))

    async def resize(self, rows: int, cols: int) -> None:
        await self._sandbox._run(calls.resize(self.id, rows, cols))

    async def kill(self) -> ProcessKillResponse:
        """Kills its whole tree and forgets it."""
        return await self._sandbox._run(calls.delete_process(self.id))

    async def terminal(self) -> Terminal:
        """The process's terminal over the WebSocket (`GET …/pty`)."""
        from websockets.asyncio.client import connect

        connection = self._sandbox.connection
        url = connection.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        verify = connection.verify()
        socket = await connect(url + calls.pty_path(self.id), additional_headers=connection.headers(),
                               ssl=verify if not isinstance(verify, bool) else None,
                               open_timeout=connection.timeout)
        return Terminal(socket)


class Terminal:
    """A process's terminal, live: `send` keystrokes, `resize`, `signal`, and iterate over the
    server's messages (`output`, `dropped`, `exit`)."""

    def __init__(self, socket: Any):
        self._socket = socket

    async def __aenter__(self) -> Terminal:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def send(self, data: str) -> None:
        await self._socket.send(json.dumps({"type": "input", "data": data}))

    async def resize(self, rows: int, cols: int) -> None:
        await self._socket.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    async def signal(self, name: str) -> None:
        await self._socket.send(json.dumps({"type": "signal", "signal": name}))

    async def close_stdin(self) -> None:
        await self._socket.send(json.dumps({"type": "close_stdin"}))

    async def __aiter__(self) -> AsyncIterator[dict[str, Any]]:
        from websockets.exceptions import ConnectionClosed

        try:
            async for message in self._socket:
                yield json.loads(message)
        except ConnectionClosed:
            return

    async def close(self) -> None:
        await self._socket.close()


class Shells:
    """`sandbox.shells`: persistent shells, which keep their directory and variables."""

    def __init__(self, sandbox: AsyncSandbox):
        self._sandbox = sandbox

    async def start(self, id: str, *, cwd: str | None = None, env: dict[str, str] | None = None) -> Shell:
        info = await self._sandbox._run(calls.start_shell(drop_none(id=id, cwd=cwd, env=env)))
        return Shell(self._sandbox, info)


class Shell:
    def __init__(self, sandbox: AsyncSandbox, info: ManagedProcess):
        self._sandbox = sandbox
        self.id: str = info["id"]
        self.info = info

    async def run(self, cmd: str, *, timeout: int | None = None) -> ShellRunResult:
        call = calls.run_in_shell(self.id, cmd, timeout)
        call.timeout = tool_timeout(drop_none(timeout=timeout), self._sandbox.connection)
        return await self._sandbox._run(call)

    async def interrupt(self) -> None:
        await self._sandbox._run(calls.interrupt_shell(self.id))


class Tokens:
    """`sandbox.tokens`: scoped, expiring tokens (with a token holding `admin`)."""

    def __init__(self, sandbox: AsyncSandbox):
        self._sandbox = sandbox

    async def mint(self, scopes: list[str], ttl_secs: int, name: str = "sdk") -> MintedToken:
        """A token with `scopes` (of read, write, run, admin, observe); its secret is in
        `["token"]`, this once."""
        return await self._sandbox._run(calls.mint_token(scopes, ttl_secs, name))

    async def list(self) -> list[TokenInfo]:
        return (await self._sandbox._run(calls.list_tokens()))["tokens"]

    async def revoke(self, token_id: str) -> TokenRevoked:
        return await self._sandbox._run(calls.revoke_token(token_id))
