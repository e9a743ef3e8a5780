"""Drives every tool and every workspace route of a live sandbox-server through a client that
openapi-python-client generated from proto-docs/openapi.json, checking the typed answers.

    python drive.py GENERATED_PACKAGE_DIR BASE_URL TOKEN

Run by sandbox-server/tests/it/contract.rs, which generates the client and starts the server.
A generated client that cannot express a route, or parses an answer into the wrong type, fails
here: the fix belongs in the document, not in this script.
"""
import time
import importlib
import io
import sys
import tarfile
from pathlib import Path

import httpx

package_dir, base_url, token = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
sys.path.insert(0, str(package_dir.parent))
api = importlib.import_module(package_dir.name)
client_module = importlib.import_module(f"{package_dir.name}.client")
models = importlib.import_module(f"{package_dir.name}.models")
types = importlib.import_module(f"{package_dir.name}.types")


def op(group, name):
    return importlib.import_module(f"{package_dir.name}.api.{group}.{name}")


# Every request is bounded (the generated client waits forever by default): a call that hangs
# fails here, naming its operation, instead of holding the run.
CLIENT = client_module.AuthenticatedClient(
    base_url=base_url, token=token, raise_on_unexpected_status=True, timeout=httpx.Timeout(60.0)
)
CALLED = []


def call(group, name, expect, **kwargs):
    """Calls one operation; its status must be `expect` and its parsed answer of the 2xx model."""
    try:
        response = op(group, name).sync_detailed(client=CLIENT, **kwargs)
    except httpx.TimeoutException as err:
        raise AssertionError(f"{name}: no answer within 60 s ({err!r})") from err
    CALLED.append(name)
    status = int(response.status_code)
    assert status == expect, f"{name}: {status} {response.content[:400]!r}"
    return response


def parsed(response, model):
    value = response.parsed
    assert isinstance(value, model), f"expected {model.__name__}, got {type(value).__name__}: {value!r}"
    return value


def service():
    assert parsed(call("service", "health", 200), models.HealthResponse).status == "ok"
    info = parsed(call("service", "info", 200), models.InfoResponse)
    assert info.limits.output_limit_chars > 0
    tools = call("tools", "list_tools", 200).parsed
    assert [tool.name for tool in tools][:4] == ["bash", "read_file", "write_file", "search_replace"], tools
    assert "shell" in [tool.name for tool in tools], tools


def file_tools():
    written = parsed(
        call("tools", "write_file", 200, body=models.WriteFileArgs(path="src/app.py", content="x = 1\n")),
        models.WriteFileResultWithStep,
    )
    assert written.bytes_written == 6, written
    read = parsed(call("tools", "read_file", 200, body=models.ReadFileArgs(path="src/app.py", limit=10)), models.ReadFileResultWithStep)
    assert "x = 1" in read.output and read.total_lines == 1, read
    edit = models.SearchReplaceArgs(path="src/app.py", search="x = 1", replace="x = 2")
    parsed(call("tools", "search_replace", 200, body=edit), models.SearchReplaceResultWithStep)
    # A refusal is a typed error body, not an exception.
    refused = parsed(call("tools", "search_replace", 422, body=edit), models.ErrorResponse)
    assert refused.error.type_ == models.ErrorType.NO_MATCH, refused
    missing = parsed(call("tools", "read_file", 404, body=models.ReadFileArgs(path="nope.txt")), models.ErrorResponse)
    assert missing.error.type_ == models.ErrorType.FILE_NOT_FOUND, missing


def bash_and_processes():
    result = parsed(call("tools", "bash", 200, body=models.BashArgs(cmd="echo out; echo err >&2; exit 3", timeout=10)), models.BashResultWithStep)
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n"), result
    stdout = call("artifacts", "get_artifact", 200, id=result.stdout_artifact.id)
    assert stdout.content == b"out\n", stdout.content
    # `timeout: null` is the default timeout, as the document says.
    background = parsed(call("tools", "bash", 200, body=models.BashArgs(cmd="sleep 300 & sleep 300 &", timeout=None)), models.BashResultWithStep)
    assert len(background.background_pids) == 2, background
    listed = parsed(call("processes", "list_processes", 200), models.ProcessListResponse)
    assert {p.pid for p in listed.processes} >= set(background.background_pids), listed
    first, second = background.background_pids
    killed = parsed(call("processes", "delete_process", 200, id=str(first)), models.ProcessKillResponse)
    assert first in killed.killed, killed
    parsed(call("processes", "delete_process", 404, id=str(first)), models.ErrorResponse)
    rest = parsed(call("processes", "kill_background", 200), models.ProcessKillResponse)
    assert second in rest.killed, rest


def processes_by_id():
    start = models.StartProcessRequest(id="cat", cmd="cat")
    started = parsed(call("processes", "start_process", 201, body=start), models.ManagedProcess)
    assert started.state == models.ProcessState.RUNNING, started
    parsed(call("processes", "start_process", 200, body=start), models.ManagedProcess)
    wrote = parsed(call("processes", "process_stdin", 200, id="cat", body=models.StdinRequest(data="hi\n", close=True)), models.StdinResponse)
    assert (wrote.written, wrote.stdin_open) == (3, False), wrote
    output = parsed(call("processes", "get_output", 200, id="cat", after_seq=0, wait_ms=5000), models.ProcessOutput)
    assert [chunk.data for chunk in output.chunks] == ["hi\n"], output
    # Its output can arrive a moment before its exit is reaped: wait for it, bounded.
    deadline = time.monotonic() + 10
    while True:
        got = parsed(call("processes", "get_process", 200, id="cat"), models.ManagedProcess)
        if got.state == models.ProcessState.EXITED or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert got.state == models.ProcessState.EXITED, got
    # An event stream is read as a stream (a generated client parses one JSON body): the
    # generated module gives the request, the client's connection reads it.
    request = op("processes", "events")._get_kwargs(id="cat")
    events = CLIENT.get_httpx_client().request(**request)
    CALLED.append("events")
    assert events.status_code == 200 and b"event: exit" in events.content, events.content
    parsed(call("processes", "pty", 400, id="cat"), models.ErrorResponse)
    parsed(call("processes", "delete_process", 200, id="cat"), models.ProcessKillResponse)
    term = models.StartProcessRequest(id="term", cmd="sleep 60", tty=models.TtySize(rows=24, cols=80))
    parsed(call("processes", "start_process", 201, body=term), models.ManagedProcess)
    call("processes", "resize", 204, id="term", body=models.TtySize(rows=30, cols=100))
    call("processes", "send_signal", 204, id="term", body=models.SignalRequest(signal=models.SignalName.TERM))
    shell = models.StartShellRequest(id="sh")
    parsed(call("processes", "start_shell", 201, body=shell), models.ManagedProcess)
    parsed(call("processes", "run_in_shell", 200, id="sh", body=models.ShellRunRequest(cmd="cd /tmp && X=1")), models.ShellRunResult)
    ran = parsed(call("processes", "run_in_shell", 200, id="sh", body=models.ShellRunRequest(cmd="echo $X $PWD")), models.ShellRunResult)
    assert (ran.exit_code, ran.stdout, ran.shell_alive) == (0, "1 /tmp\n", True), ran
    idle = parsed(call("processes", "interrupt_shell", 409, id="sh"), models.ErrorResponse)
    assert idle.error.type_ == models.ErrorType.PROCESS_CONFLICT, idle
    parsed(call("processes", "delete_process", 200, id="sh"), models.ProcessKillResponse)
    # The opt-in tools: a command that outlives its call.
    started = parsed(call("tools", "exec_", 200, body=models.ExecArgs(cmd="read line; echo got $line", yield_ms=200)), models.ExecResultWithStep)
    assert started.running, started
    answer = parsed(call("tools", "write_stdin", 200, body=models.WriteStdinArgs(process_id=started.process_id, input_="x\n", yield_ms=5000)), models.ExecResultWithStep)
    assert (answer.running, answer.exit_code, answer.new_output) == (False, 0, "got x\n"), answer
    # The model's persistent shell keeps its state between calls.
    parsed(call("tools", "shell", 200, body=models.ShellRunRequest(cmd="cd /tmp && export Y=2")), models.ShellRunResultWithStep)
    ran = parsed(call("tools", "shell", 200, body=models.ShellRunRequest(cmd="echo $Y $PWD")), models.ShellRunResultWithStep)
    assert (ran.stdout, ran.shell_alive) == ("2 /tmp\n", True), ran
    parsed(call("processes", "delete_process", 200, id="model-shell"), models.ProcessKillResponse)
    # A named call is a process of kind `call`.
    named = parsed(call("tools", "bash", 200, body=models.BashArgs(cmd="echo named"), sandbox_call_id="drive-1"), models.BashResultWithStep)
    assert named.call_id == "drive-1", named
    process = parsed(call("processes", "get_process", 200, id="drive-1"), models.ManagedProcess)
    assert (process.kind, process.state) == (models.ProcessKind.CALL, models.ProcessState.EXITED), process


def files_routes():
    put = call("files", "put_file", 201, path="data/blob.bin", body=types.File(payload=io.BytesIO(b"\x00\x01\xff")), mode="0600")
    parsed(put, models.FilePutResponse)
    got = call("files", "get_file", 200, path="data/blob.bin")
    assert got.content == b"\x00\x01\xff", got.content
    empty = call("files", "put_file", 201, path="data/empty")
    assert parsed(empty, models.FilePutResponse).bytes_written == 0
    root = parsed(call("files", "list_root", 200), models.DirListing)
    assert "data" in [entry.name for entry in root.entries], root
    data = parsed(call("files", "list_dir", 200, path="data"), models.DirListing)
    assert sorted(entry.name for entry in data.entries) == ["blob.bin", "empty"], data
    parsed(call("files", "put_file", 422, path="data/x", body=types.File(payload=io.BytesIO(b"x")), mode="9"), models.ErrorResponse)
    traced = parsed(call("files", "trace_path", 200, path="data/blob.bin"), models.PathInfo)
    assert traced.leads_to is None and traced.kind == models.EntryKind.FILE, traced


def _tar(files):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def workspace_routes():
    snapshot = parsed(call("workspace", "take_snapshot", 200), models.SnapshotResponse)
    manifest = parsed(call("workspace", "get_snapshot", 200, id=snapshot.snapshot_id), models.ManifestResponse)
    assert "src/app.py" in [entry.path for entry in manifest.entries], manifest
    # One round trip: the call's answer brings its step (changes, inline bytes, fingerprint).
    step_since = parsed(call("workspace", "take_snapshot", 200), models.SnapshotResponse).snapshot_id
    answer = parsed(
        call("tools", "write_file", 200, body=models.WriteFileArgs(path="step.txt", content="step\n"), since=step_since, fingerprint=True),
        models.WriteFileResultWithStep,
    )
    [change] = answer.step.changes.changes
    assert (change.path, change.change) == ("step.txt", models.ChangeKind.ADDED), answer.step
    assert answer.step.inline[change.after.sha256] == "c3RlcAo=", answer.step.inline
    assert answer.step.fingerprint.processes == [], answer.step.fingerprint
    call("tools", "write_file", 200, body=models.WriteFileArgs(path="new.txt", content="new\n"))
    changes = parsed(call("workspace", "get_changes", 200, since=snapshot.snapshot_id), models.ChangesResponse)
    added = [change for change in changes.changes if change.path == "new.txt"]
    assert added and added[0].change == models.ChangeKind.ADDED, changes
    blob = call("workspace", "get_blob", 200, sha256=added[0].after.sha256)
    assert blob.content == b"new\n", blob.content
    parsed(call("workspace", "get_changes", 404, since="snap_999999"), models.ErrorResponse)
    diff = call("workspace", "get_diff", 200, since=snapshot.snapshot_id, to=changes.snapshot_id)
    assert b"+++ b/new.txt\n@@ -0,0 +1 @@\n+new\n" in diff.content, diff.content
    assert diff.headers["sandbox-diff-truncated"] == "false", diff.headers
    archive = call("workspace", "get_archive", 200)
    with tarfile.open(fileobj=io.BytesIO(archive.content)) as tar:
        assert "new.txt" in tar.getnames(), tar.getnames()
    put = call("workspace", "put_archive", 200, body=types.File(payload=io.BytesIO(_tar({"only.txt": b"1\n"}))))
    assert parsed(put, models.ArchivePutResponse).n_files == 1
    parsed(call("workspace", "put_archive", 422, body=types.File(payload=io.BytesIO(b""))), models.ErrorResponse)
    fingerprint = parsed(call("state", "get_fingerprint", 200), models.FingerprintResponse)
    assert fingerprint.processes == [], fingerprint
    parsed(call("workspace", "reset", 200), models.ResetResponse)
    assert parsed(call("files", "list_root", 200), models.DirListing).entries == []


def tokens_routes():
    request = models.TokenRequest(name="driver", scopes=[models.Scope.READ], ttl_secs=60)
    minted = parsed(call("tokens", "mint_token", 201, body=request), models.MintedToken)
    assert minted.token.startswith("sbt_") and minted.id.startswith("tok_"), minted
    assert minted.scopes == [models.Scope.READ], minted
    listed = parsed(call("tokens", "list_tokens", 200), models.TokenList)
    assert [t.id for t in listed.tokens] == [minted.id], listed
    # The minted token reads and may not run.
    reader = client_module.AuthenticatedClient(base_url=base_url, token=minted.token, timeout=httpx.Timeout(60.0))
    refused = op("tools", "bash").sync_detailed(client=reader, body=models.BashArgs(cmd="true"))
    assert int(refused.status_code) == 403, refused
    assert refused.parsed.error.type_ == models.ErrorType.MISSING_SCOPE, refused.parsed
    revoked = parsed(call("tokens", "revoke_token", 200, id=minted.id), models.TokenRevoked)
    assert revoked.revoked is True
    parsed(call("tokens", "revoke_token", 404, id=minted.id), models.ErrorResponse)


parsed(call("workspace", "reset", 200), models.ResetResponse)
service()
tokens_routes()
file_tools()
bash_and_processes()
processes_by_id()
files_routes()
workspace_routes()
operations = sorted(path.stem for path in (package_dir / "api").glob("*/*.py") if path.stem != "__init__")
missing = sorted(set(operations) - set(CALLED))
assert not missing, f"operations the driver never called: {missing}"
print(f"{len(operations)} operations called through the generated client, {len(CALLED)} calls")
