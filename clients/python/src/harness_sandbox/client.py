"""The synchronous client: `Sandbox`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
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


class Sandbox:
    """One sandbox-server. Every route of its API is a method (tools, files, the workspace's
    snapshots, changes and archives), with `processes`, `shells` and `tokens` for those routes.

        with Sandbox("https://sandbox:8443", token=..., ca="ca.pem") as sandbox:
            print(sandbox.bash("make test")["output"])

    An error answer raises the `SandboxApiError` subclass of its `type`
    (`harness_sandbox.models.ERRORS`).
    """

    def __init__(self, url: str, token: str | None = None, *, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, timeout: float = 60.0, resume_attempts: int = 8):
        self.connection = Connection(url.rstrip("/"), token, ca, cert, key, timeout)
        self.resume_attempts = resume_attempts
        self._http = httpx.Client(base_url=self.connection.url, headers=self.connection.headers(),
                                  verify=self.connection.verify(), timeout=timeout)
        self.processes = Processes(self)
        self.shells = Shells(self)
        self.tokens = Tokens(self)

    def __repr__(self) -> str:
        return f"Sandbox({self.connection.url!r})"

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _run(self, call: Call) -> Any:
        retry = Retry(call)
        while True:
            try:
                response = self._http.request(call.method, call.path, json=call.json, content=call.content,
                                              params=call.query(), headers=call.headers,
                                              timeout=call.timeout or self.connection.timeout)
            except httpx.TransportError as err:
                raise SandboxConnectionError(f"{call.method} {self.connection.url}{call.path}: {err!r}") from err
            wait = retry.after(response.status_code, response.headers)
            if wait is None:
                return retry.read(response.status_code, response.content)
            time.sleep(wait)

    # Service.
    def health(self) -> HealthResponse:
        return self._run(calls.health())

    def info(self) -> InfoResponse:
        return self._run(calls.info())

    def tools(self) -> list[ToolSpec]:
        return self._run(calls.tools())

    def metrics(self) -> str:
        """`GET /metrics`, the Prometheus text (a token with `observe`)."""
        return self._run(calls.metrics())

    # Tools.
    def call_tool(self, name: str, args: dict[str, Any], *, call_id: str | None = None, **step: Any) -> dict[str, Any]:
        """Any tool, a plugin's included; `step` takes `since`, `fingerprint`, `inline_max_bytes`."""
        call = calls.tool(name, args, call_id, **step)
        call.timeout = tool_timeout(args, self.connection)
        return self._run(call)

    def bash(self, cmd: str, *, timeout: int | None = None, call_id: str | None = None) -> BashResult:
        """Runs `cmd`; a non-zero exit or a timeout is a result, not an exception."""
        return self.call_tool("bash", drop_none(cmd=cmd, timeout=timeout), call_id=call_id)

    def read_file(self, path: str, *, offset: int | None = None, limit: int | None = None) -> ReadFileResult:
        return self.call_tool("read_file", drop_none(path=path, offset=offset, limit=limit))

    def write_file(self, path: str, content: str) -> WriteFileResult:
        return self.call_tool("write_file", {"path": path, "content": content})

    def search_replace(self, path: str, search: str, replace: str) -> SearchReplaceResult:
        return self.call_tool("search_replace", {"path": path, "search": search, "replace": replace})

    def artifact(self, artifact_id: str) -> bytes | None:
        """A call's full output, kept past its truncation."""
        return self._run(calls.artifact(artifact_id))

    # Files.
    def get_file(self, path: str) -> bytes | None:
        """A file's bytes, or `None` when there is none."""
        return self._run(calls.get_file(path))

    def put_file(self, path: str, content: bytes | str, *, mode: str | None = None) -> FilePutResponse:
        data = content.encode() if isinstance(content, str) else content
        return self._run(calls.put_file(path, data, mode))

    def list_dir(self, path: str = "") -> DirListing | None:
        return self._run(calls.list_dir(path))

    # The workspace.
    def snapshot(self) -> SnapshotResponse:
        return self._run(calls.snapshot())

    def manifest(self, snapshot_id: str) -> ManifestResponse:
        return self._run(calls.manifest(snapshot_id))

    def changes(self, since: str) -> ChangesResponse:
        """What was added, modified and deleted since snapshot `since`, and a snapshot of now."""
        return self._run(calls.changes(since))

    def diff(self, since: str, to: str | None = None, max_bytes: int | None = None) -> str:
        """The changes since snapshot `since` (to snapshot `to`, or to now) as a unified diff,
        git style, at most `max_bytes` long (1 MiB when not given)."""
        return self._run(calls.diff(since, to, max_bytes))

    def blob(self, sha256: str) -> bytes | None:
        """A file version a manifest or change names."""
        return self._run(calls.blob(sha256))

    def archive(self) -> bytes:
        """The workspace as a tar archive."""
        return self._run(calls.archive())

    def restore(self, tar: bytes) -> ArchivePutResponse:
        """Replaces the whole workspace with a tar archive's files (an `archive()` earlier)."""
        return self._run(calls.restore(tar))

    def fingerprint(self) -> FingerprintResponse:
        return self._run(calls.fingerprint())

    def reset(self) -> ResetResponse:
        return self._run(calls.reset())


class Processes:
    """`sandbox.processes`: processes started under an id of yours."""

    def __init__(self, sandbox: Sandbox):
        self._sandbox = sandbox

    def start(self, id: str, cmd: str, *, cwd: str | None = None, env: dict[str, str] | None = None,
              timeout: int | None = None, tty: tuple[int, int] | None = None) -> Process:
        request = drop_none(id=id, cmd=cmd, cwd=cwd, env=env, timeout=timeout,
                            tty={"rows": tty[0], "cols": tty[1]} if tty else None)
        return Process(self._sandbox, self._sandbox._run(calls.start_process(request)))

    def get(self, id: str) -> Process:
        return Process(self._sandbox, self._sandbox._run(calls.get_process(id)))

    def list(self) -> ProcessListResponse:
        return self._sandbox._run(calls.list_processes())

    def kill_background(self, *, include_running: bool = False) -> ProcessKillResponse:
        return self._sandbox._run(calls.kill_background(include_running))


class Process:
    """A process started by id. `output()` follows its output to its end, resuming by itself
    after a dropped connection; `exit` is the process as it ended."""

    def __init__(self, sandbox: Sandbox, info: ManagedProcess):
        self._sandbox = sandbox
        self.id: str = info["id"]
        self.info = info
        self.exit: ManagedProcess | None = None
        self.dropped: list[DroppedOutput] = []
        self.last_event_id: str | None = None
        self.resumed = 0

    def refresh(self) -> ManagedProcess:
        self.info = self._sandbox._run(calls.get_process(self.id))
        return self.info

    def read(self, after_seq: int = 0, *, wait_ms: int | None = None, max_bytes: int | None = None) -> ProcessOutput:
        """The numbered output after `after_seq` (a long poll with `wait_ms`)."""
        return self._sandbox._run(calls.output(self.id, after_seq, wait_ms, max_bytes))

    def output(self) -> Iterator[OutputChunk]:
        """Each chunk of output as it comes (`GET …/events`), until the process ends."""
        for name, data in self._events():
            if name == "output":
                yield data
            elif name == "dropped":
                self.dropped.append(data)
            elif name == "exit":
                self.exit = self.info = data
                return

    def wait(self) -> ManagedProcess:
        """Follows the output to the end; the process as it ended."""
        for _ in self.output():
            pass
        assert self.exit is not None
        return self.exit

    def _events(self) -> Iterator[tuple[str, Any]]:
        sandbox, failures = self._sandbox, 0
        while True:
            headers = {"Last-Event-ID": self.last_event_id} if self.last_event_id else {}
            try:
                timeout = httpx.Timeout(sandbox.connection.timeout)
                with sandbox._http.stream("GET", calls.events_path(self.id), headers=headers, timeout=timeout) as answer:
                    if answer.status_code >= 400:
                        raise_for(answer.status_code, answer.read())
                    parser = EventParser()
                    for line in answer.iter_lines():
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
            time.sleep(min(0.05 * 2 ** failures, 2.0))

    def stdin(self, data: str = "", *, close: bool = False, encoding: str | None = None) -> StdinResponse:
        return self._sandbox._run(calls.stdin(self.id, data, close, encoding))

    def signal(self, name: str) -> None:
        return self._sandbox._run(calls.signal(self.id, name))

    def resize(self, rows: int, cols: int) -> None:
        return self._sandbox._run(calls.resize(self.id, rows, cols))

    def kill(self) -> ProcessKillResponse:
        """Kills its whole tree and forgets it."""
        return self._sandbox._run(calls.delete_process(self.id))

    def terminal(self) -> Terminal:
        """The process's terminal over the WebSocket (`GET …/pty`)."""
        return Terminal(self._sandbox.connection, self.id)


class Terminal:
    """A process's terminal, live: `send` keystrokes, `resize`, `signal`, and iterate over the
    server's messages (`output`, `dropped`, `exit`)."""

    def __init__(self, connection: Connection, process_id: str):
        from websockets.sync.client import connect

        url = connection.url.replace("https://", "wss://", 1).replace("http://", "ws://", 1)
        verify = connection.verify()
        self._socket = connect(url + calls.pty_path(process_id), additional_headers=connection.headers(),
                               ssl=verify if not isinstance(verify, bool) else None,
                               open_timeout=connection.timeout)

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, data: str) -> None:
        self._socket.send(json.dumps({"type": "input", "data": data}))

    def resize(self, rows: int, cols: int) -> None:
        self._socket.send(json.dumps({"type": "resize", "rows": rows, "cols": cols}))

    def signal(self, name: str) -> None:
        self._socket.send(json.dumps({"type": "signal", "signal": name}))

    def close_stdin(self) -> None:
        self._socket.send(json.dumps({"type": "close_stdin"}))

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from websockets.exceptions import ConnectionClosed

        try:
            for message in self._socket:
                yield json.loads(message)
        except ConnectionClosed:
            return

    def close(self) -> None:
        self._socket.close()


class Shells:
    """`sandbox.shells`: persistent shells, which keep their directory and variables."""

    def __init__(self, sandbox: Sandbox):
        self._sandbox = sandbox

    def start(self, id: str, *, cwd: str | None = None, env: dict[str, str] | None = None) -> Shell:
        info = self._sandbox._run(calls.start_shell(drop_none(id=id, cwd=cwd, env=env)))
        return Shell(self._sandbox, info)


class Shell:
    def __init__(self, sandbox: Sandbox, info: ManagedProcess):
        self._sandbox = sandbox
        self.id: str = info["id"]
        self.info = info

    def run(self, cmd: str, *, timeout: int | None = None) -> ShellRunResult:
        call = calls.run_in_shell(self.id, cmd, timeout)
        call.timeout = tool_timeout(drop_none(timeout=timeout), self._sandbox.connection)
        return self._sandbox._run(call)

    def interrupt(self) -> None:
        return self._sandbox._run(calls.interrupt_shell(self.id))


class Tokens:
    """`sandbox.tokens`: scoped, expiring tokens (with a token holding `admin`)."""

    def __init__(self, sandbox: Sandbox):
        self._sandbox = sandbox

    def mint(self, scopes: list[str], ttl_secs: int, name: str = "sdk") -> MintedToken:
        """A token with `scopes` (of read, write, run, admin, observe); its secret is in
        `["token"]`, this once."""
        return self._sandbox._run(calls.mint_token(scopes, ttl_secs, name))

    def list(self) -> list[TokenInfo]:
        return self._sandbox._run(calls.list_tokens())["tokens"]

    def revoke(self, token_id: str) -> TokenRevoked:
        return self._sandbox._run(calls.revoke_token(token_id))
