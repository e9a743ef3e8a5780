"""An agent-like session through the SDK against a real sandbox-server over mutual TLS:
write, run, follow a process (whose stream is cut and resumes by itself), snapshot, changes,
restore, shells, the terminal, scoped tokens and typed errors; then the same with asyncio.

Run by sandbox-server/tests/it/python_sdk.rs, which makes the certificates, starts the server
and sets SANDBOX_ADDR (host:port), SANDBOX_TOKEN, SANDBOX_CA, SANDBOX_CERT and SANDBOX_KEY.
Every connection goes through a TCP relay here that can cut them all at once.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import tarfile
import threading

import pytest

from harness_sandbox import AsyncSandbox, Sandbox, SandboxApiError
from harness_sandbox.models import MissingScopeError, SandboxFileNotFoundError, UnauthorizedError

TOKEN = os.environ["SANDBOX_TOKEN"]
TLS = {"ca": os.environ["SANDBOX_CA"], "cert": os.environ["SANDBOX_CERT"], "key": os.environ["SANDBOX_KEY"]}


class Relay:
    """Forwards TCP connections to the server; `cut()` ends every connection open now."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.open: list[socket.socket] = []
        self.lock = threading.Lock()
        self.cuts = 0
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream, timeout=10)
            server.settimeout(None)
            with self.lock:
                self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self.pump, args=(a, b), daemon=True).start()

    @staticmethod
    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        with self.lock:
            for s in self.open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                    s.close()
                except OSError:
                    pass
            self.open.clear()
            self.cuts += 1


@pytest.fixture(scope="module")
def relay() -> Relay:
    host, port = os.environ["SANDBOX_ADDR"].rsplit(":", 1)
    return Relay((host, int(port)))


@pytest.fixture()
def sandbox(relay: Relay):
    with Sandbox(f"https://localhost:{relay.port}", TOKEN, timeout=30, **TLS) as sandbox:
        sandbox.reset()
        yield sandbox


TICKER = "for i in $(seq 1 40); do echo tick $i; sleep 0.05; done"


def ticks(chunks: list[dict]) -> list[str]:
    return "".join(c["data"] for c in chunks if c["stream"] == "stdout").split()[1::2]


def test_an_agent_session_end_to_end(sandbox: Sandbox, relay: Relay) -> None:
    health = sandbox.health()
    assert health["tls"] and health["mtls"], health
    assert "bash" in [tool["name"] for tool in sandbox.tools()]

    before = sandbox.snapshot()
    sandbox.write_file("app.py", "print('hello from the sdk')\n")
    result = sandbox.bash("python3 app.py; exit 3")
    assert result["exit_code"] == 3 and "hello from the sdk" in result["output"], result
    assert "1: print" in sandbox.read_file("app.py")["output"]
    sandbox.search_replace("app.py", "hello", "goodbye")
    assert sandbox.get_file("app.py") == b"print('goodbye from the sdk')\n"
    assert sandbox.get_file("missing.txt") is None
    with pytest.raises(SandboxFileNotFoundError) as refused:
        sandbox.read_file("missing.txt")
    assert refused.value.type == "file_not_found" and refused.value.status == 404

    changes = sandbox.changes(before["snapshot_id"])
    assert [(c["path"], c["change"]) for c in changes["changes"]] == [("app.py", "added")], changes
    version = next(c for c in changes["changes"] if c["path"] == "app.py")
    assert sandbox.blob(version["after"]["sha256"]) == b"print('goodbye from the sdk')\n"
    diff = sandbox.diff(before["snapshot_id"], to=changes["snapshot_id"])
    assert diff.startswith("diff --git a/app.py b/app.py\nnew file mode") and "+print('goodbye from the sdk')\n" in diff, diff

    # A process followed to its end, its stream cut in the middle: no chunk lost or repeated.
    process = sandbox.processes.start("ticker", TICKER)
    seen = []
    for chunk in process.output():
        seen.append(chunk)
        if len(ticks(seen)) == 10 and relay.cuts == 0:
            relay.cut()
    assert ticks(seen) == [str(i) for i in range(1, 41)], ticks(seen)
    assert process.resumed >= 1 and process.exit and process.exit["exit_code"] == 0, process.exit
    assert [c["seq"] for c in seen] == sorted({c["seq"] for c in seen})
    assert "ticker" in [p["id"] for p in sandbox.processes.list()["managed"]]

    # Restore: the archive taken now brings the workspace back after it is wiped.
    archive = sandbox.archive()
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        assert "app.py" in tar.getnames()
    sandbox.bash("rm -f app.py && echo gone > other.txt")
    sandbox.restore(archive)
    assert sandbox.get_file("app.py") == b"print('goodbye from the sdk')\n"
    assert sandbox.get_file("other.txt") is None

    shell = sandbox.shells.start("sh")
    shell.run("mkdir -p work && cd work && export WHO=sdk")
    assert "sdk in work" in shell.run("echo $WHO in $(basename $PWD)")["output"]

    term = sandbox.processes.start("term", "read -r line; echo got $line", tty=(24, 80))
    with term.terminal() as terminal:
        terminal.send("hi\n")
        text = ""
        for message in terminal:
            if message["type"] == "output":
                text += message["data"]
            if message["type"] == "exit":
                break
    assert "got hi" in text, text


def test_scoped_tokens_are_typed_and_refused_where_they_should_be(sandbox: Sandbox, relay: Relay) -> None:
    sandbox.write_file("notes.txt", "for the viewer\n")
    minted = sandbox.tokens.mint(["read"], 60, "viewer")
    assert minted["token"].startswith("sbt_") and minted["scopes"] == ["read"]
    assert minted["id"] in [t["id"] for t in sandbox.tokens.list()]
    with Sandbox(f"https://localhost:{relay.port}", minted["token"], **TLS) as viewer:
        assert "for the viewer" in viewer.read_file("notes.txt")["output"]
        with pytest.raises(MissingScopeError) as refused:
            viewer.bash("id")
        assert "`run`" in refused.value.message and isinstance(refused.value, SandboxApiError)
        sandbox.tokens.revoke(minted["id"])
        with pytest.raises(UnauthorizedError, match="revoked"):
            viewer.info()

    # A process followed on a token that is revoked meanwhile: the stream ends, typed.
    runner = sandbox.tokens.mint(["run"], 60, "runner")
    with Sandbox(f"https://localhost:{relay.port}", runner["token"], **TLS) as agent:
        process = agent.processes.start("forever", "while true; do echo tick; sleep 0.1; done")
        with pytest.raises(UnauthorizedError, match="revoked"):
            for n, _ in enumerate(process.output()):
                if n == 3:
                    sandbox.tokens.revoke(runner["id"])
    sandbox.processes.get("forever").kill()


def test_the_async_client_is_the_same_api(relay: Relay) -> None:
    async def session() -> None:
        async with AsyncSandbox(f"https://localhost:{relay.port}", TOKEN, timeout=30, **TLS) as sandbox:
            await sandbox.reset()
            await sandbox.write_file("a.txt", "async\n")
            assert (await sandbox.bash("cat a.txt"))["output"].count("async") == 1
            snap = await sandbox.snapshot()
            process = await sandbox.processes.start("aticker", TICKER)
            seen, cut = [], relay.cuts
            async for chunk in process.output():
                seen.append(chunk)
                if len(ticks(seen)) == 5 and relay.cuts == cut:
                    relay.cut()
            assert ticks(seen) == [str(i) for i in range(1, 41)]
            assert process.resumed >= 1
            await sandbox.write_file("b.txt", "b\n")
            changes = await sandbox.changes(snap["snapshot_id"])
            assert [c["path"] for c in changes["changes"]] == ["b.txt"], changes
            shell = await sandbox.shells.start("ash")
            assert "7" in (await shell.run("echo $((3 + 4))"))["output"]
            minted = await sandbox.tokens.mint(["observe"], 30, "scraper")
            async with AsyncSandbox(f"https://localhost:{relay.port}", minted["token"], **TLS) as scraper:
                assert "sandbox_" in await scraper.metrics()
                with pytest.raises(MissingScopeError):
                    await scraper.get_file("a.txt")

    asyncio.run(session())
