"""Schemathesis hooks for sandbox-server: fixtures on the live server, so that no operation is
tested only on 404s, and bounds that keep a fuzzed command from holding a slot for long."""
import io
import os
import random
import tarfile
import uuid

import requests
import schemathesis
from hypothesis import strategies as st

BASE = os.environ["SANDBOX_URL"].rstrip("/")
AUTH = {"Authorization": f"Bearer {os.environ['SANDBOX_TOKEN']}"}
FIXTURE = {"file": "fixture/hello.txt"}
CHOICE = random.Random(1)


def _call(method, path, **kwargs):
    response = requests.request(method, f"{BASE}{path}", headers={**AUTH, **kwargs.pop("headers", {})}, timeout=30, **kwargs)
    response.raise_for_status()
    return response


# Processes started by id: one that has ended (its event stream ends at once), one running
# under a terminal, and a persistent shell. Started again whenever a delete, a reset or a
# fuzzed signal or stdin has ended them.
PROCESSES = {
    "fixture-done": {"id": "fixture-done", "cmd": "echo done"},
    "fixture-tty": {"id": "fixture-tty", "cmd": "cat", "tty": {"rows": 24, "cols": 80}, "timeout": 3600},
}


def _processes():
    for name, body in PROCESSES.items():
        current = requests.get(f"{BASE}/v1/processes/{name}", headers=AUTH, timeout=30)
        if current.status_code == 200 and (name == "fixture-done" or current.json()["state"] == "running"):
            continue
        if current.status_code == 200:
            _call("DELETE", f"/v1/processes/{name}")
        _call("POST", "/v1/processes", json=body)
    shell = requests.get(f"{BASE}/v1/processes/fixture-shell", headers=AUTH, timeout=30)
    if shell.status_code == 200 and shell.json()["state"] != "running":
        _call("DELETE", "/v1/processes/fixture-shell")
    if shell.status_code != 200 or shell.json()["state"] != "running":
        _call("POST", "/v1/shells", json={"id": "fixture-shell"})


def _fixtures():
    """A known file, a snapshot and the processes."""
    _call("PUT", "/v1/files/fixture/hello.txt", data=b"hello\nworld\n",
          headers={"Content-Type": "application/octet-stream"})
    FIXTURE["snapshot_id"] = _call("POST", "/v1/workspace/snapshot").json()["snapshot_id"]
    _processes()


@schemathesis.hook
def after_load_schema(context, schema):
    """Once, before any test."""
    _fixtures()


@schemathesis.hook
def after_call(context, case, response):
    """An archive put or a reset replaces the workspace: the fixtures are made again. The newest
    snapshot becomes the one `since` points at (the server keeps the last 32)."""
    operation = case.operation.definition.raw.get("operationId")
    if operation in ("put_archive", "reset") and response.status_code < 300:
        _fixtures()
    elif operation in ("delete_process", "send_signal", "process_stdin", "run_in_shell", "start_process"):
        _processes()
    elif response.status_code == 200 and operation in ("take_snapshot", "get_changes"):
        FIXTURE["snapshot_id"] = response.json()["snapshot_id"]
    elif response.status_code == 200 and operation in ("bash", "read_file", "write_file", "search_replace"):
        # A step's changes take a new snapshot; the server keeps the last 32.
        changes = (response.json().get("step") or {}).get("changes")
        if changes:
            FIXTURE["snapshot_id"] = changes["snapshot_id"]


@schemathesis.hook
def before_call(context, case, **kwargs):
    """A fresh key for every request that sends a valid one (in every phase: the coverage phase
    applies no map hooks): two generated requests sharing a key would rightly be refused (422),
    which is the key's contract, not a finding."""
    # The coverage phase's "Authorization missing" cases are left exactly as generated.
    data = getattr(getattr(case.meta, "phase", None), "data", None)
    if str(getattr(data, "parameter", "") or "").lower() == "authorization":
        return
    _bound_waits(case)
    headers = case.headers or {}
    key = headers.get("Idempotency-Key")
    if isinstance(key, str) and 1 <= len(key) <= 255 and all("!" <= c <= "~" for c in key):
        headers["Idempotency-Key"] = f"st-{uuid.uuid4()}"


def _sometimes():
    return CHOICE.random() < 0.5


@schemathesis.hook("map_query").apply_to(operation_id="get_changes")
def real_since(context, query):
    # Only a `since` that is there and a string: a case generated without one, or with one of
    # another type, is meant to be refused and stays so.
    if query is not None and isinstance(query.get("since"), str) and _sometimes():
        query["since"] = FIXTURE["snapshot_id"]
    return query


@schemathesis.hook("map_query").apply_to(operation_id="bash")
@schemathesis.hook("map_query").apply_to(operation_id="read_file")
@schemathesis.hook("map_query").apply_to(operation_id="write_file")
@schemathesis.hook("map_query").apply_to(operation_id="search_replace")
def real_step_since(context, query):
    """A tool call's optional `since` is always a live snapshot, so that the tool itself is
    reached (an unknown one is refused, 404, before the tool runs)."""
    if query is not None and isinstance(query.get("since"), str):
        query["since"] = FIXTURE["snapshot_id"]
    return query


@schemathesis.hook("map_path_parameters").apply_to(operation_id="get_file")
def real_file(context, path_parameters):
    path = (path_parameters or {}).get("path")
    if isinstance(path, str) and path and "\x00" not in path and _sometimes():
        path_parameters["path"] = FIXTURE["file"]
    return path_parameters


@schemathesis.hook("map_path_parameters").apply_to(operation_id="list_dir")
def real_dir(context, path_parameters):
    path = (path_parameters or {}).get("path")
    if isinstance(path, str) and path and "\x00" not in path and _sometimes():
        path_parameters["path"] = FIXTURE["file"].rsplit("/", 1)[0]
    return path_parameters


@schemathesis.hook("map_path_parameters").apply_to(operation_id="get_snapshot")
def real_snapshot(context, path_parameters):
    """Outside the stateful phase (whose links supply ids), a live snapshot half of the time."""
    snapshot = (path_parameters or {}).get("id")
    if isinstance(snapshot, str) and snapshot and _sometimes():
        path_parameters["id"] = FIXTURE["snapshot_id"]
    return path_parameters


@schemathesis.hook("map_path_parameters").apply_to(operation_id="delete_process")
def real_process(context, path_parameters):
    """A live background process or a fixture each time: earlier ones may have been ended."""
    target = (path_parameters or {}).get("id")
    if isinstance(target, str) and target and _sometimes():
        if _sometimes():
            result = _call("POST", "/v1/tools/bash", json={"cmd": "sleep 600 &"}).json()
            path_parameters["id"] = str(result["background_pids"][0])
        else:
            path_parameters["id"] = CHOICE.choice(["fixture-done", "fixture-tty", "fixture-shell"])
    return path_parameters


_ANY = ["fixture-done", "fixture-tty", "fixture-shell"]
_FIXTURES_FOR = {
    "get_process": _ANY,
    "get_output": _ANY,
    "process_stdin": ["fixture-tty", "fixture-done"],
    "send_signal": ["fixture-tty", "fixture-done"],
    "resize": ["fixture-tty", "fixture-done"],
    "run_in_shell": ["fixture-shell"],
}


@schemathesis.hook("map_path_parameters").apply_to(operation_id="get_process")
@schemathesis.hook("map_path_parameters").apply_to(operation_id="get_output")
@schemathesis.hook("map_path_parameters").apply_to(operation_id="process_stdin")
@schemathesis.hook("map_path_parameters").apply_to(operation_id="send_signal")
@schemathesis.hook("map_path_parameters").apply_to(operation_id="resize")
@schemathesis.hook("map_path_parameters").apply_to(operation_id="run_in_shell")
def real_process_id(context, path_parameters):
    """A live fixture half of the time, so that no process operation is tested only on 404s."""
    operation = context.operation.definition.raw.get("operationId")
    target = (path_parameters or {}).get("id")
    if isinstance(target, str) and target and _sometimes():
        path_parameters["id"] = CHOICE.choice(_FIXTURES_FOR[operation])
    return path_parameters


def _bound_waits(case):
    """In every phase (the coverage phase applies no map hooks): live fixtures for the process
    operations half of the time; an event stream lasts as long
    as its process, and a generated id may name a running shell another generated request
    started, so every valid id of `events` becomes the ended fixture, whose stream ends at once
    (streams are tested by the server's own tests); and a long-poll, which may wait a minute by
    the document, waits at most a second against the run's 10 s response-time check."""
    operation = case.operation.definition.raw.get("operationId")
    if operation in _FIXTURES_FOR:
        # The coverage phase varies bodies and queries around ids that name nothing: without
        # this, most of its cases are 404s.
        target = (case.path_parameters or {}).get("id")
        if isinstance(target, str) and target and _sometimes():
            case.path_parameters["id"] = CHOICE.choice(_FIXTURES_FOR[operation])
    if operation == "events":
        target = (case.path_parameters or {}).get("id")
        if isinstance(target, str) and target:
            case.path_parameters["id"] = "fixture-done"
    if operation == "get_output":
        wait = (case.query or {}).get("wait_ms")
        if isinstance(wait, int) and 1000 < wait <= 60000:
            case.query["wait_ms"] = 1000
        elif isinstance(wait, str) and wait.isdigit() and 1000 < int(wait) <= 60000:
            case.query["wait_ms"] = "1000"


@schemathesis.hook("map_body").apply_to(operation_id="start_process")
@schemathesis.hook("map_body").apply_to(operation_id="start_shell")
@schemathesis.hook("map_body").apply_to(operation_id="run_in_shell")
def short_processes(context, body):
    """A fuzzed process or shell command ends within seconds (a valid timeout is shortened,
    a missing one given), so none outlives the run or holds an answer past the time check; and
    half of the working directories that are strings name a folder that exists, so that
    starting processes is not tested mostly on 404s."""
    if isinstance(body, dict) and isinstance(body.get("cmd"), str):
        timeout = body.get("timeout")
        if timeout is None or (isinstance(timeout, int) and 3 < timeout <= 86400):
            body["timeout"] = 3
    if isinstance(body, dict) and isinstance(body.get("cwd"), str) and _sometimes():
        body["cwd"] = FIXTURE["file"].rsplit("/", 1)[0]
    return body


@schemathesis.hook("map_body").apply_to(operation_id="read_file")
def real_path(context, body):
    # Only a `path` that is a string: a case generated with another type is meant to be refused
    # and stays so (the mapped value would make it valid).
    if isinstance(body, dict) and isinstance(body.get("path"), str) and _sometimes():
        body["path"] = FIXTURE["file"]
    return body


@schemathesis.hook("map_body").apply_to(operation_id="search_replace")
def real_edit(context, body):
    """Half of the valid-shaped edits target a fresh copy of the fixture with a search string that
    occurs in it exactly once, so that edits are applied, not only refused (404, 422)."""
    if not (isinstance(body, dict) and isinstance(body.get("path"), str) and _sometimes()):
        return body
    path = f"fixture/edit-{uuid.uuid4().hex}.txt"
    _call("PUT", f"/v1/files/{path}", data=b"hello\nworld\n",
          headers={"Content-Type": "application/octet-stream"})
    body["path"] = path
    # Only a search that is valid by the schema (a non-empty string) is replaced.
    if isinstance(body.get("search"), str) and body["search"]:
        body["search"] = "hello"
    return body


@schemathesis.hook("map_body").apply_to(operation_id="bash")
def short_commands(context, body):
    """A fuzzed command may not hold a tool-call slot for long."""
    # Only valid timeouts are shortened: an invalid one must reach the server as generated.
    if isinstance(body, dict) and isinstance(body.get("timeout"), int) and 5 < body["timeout"] <= 3600:
        body["timeout"] = 5
    return body


def _tar(files):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# PUT /v1/workspace/archive takes application/x-tar: real archives, small.
schemathesis.openapi.media_type(
    "application/x-tar",
    st.lists(
        st.tuples(st.from_regex(r"\A[a-z]{1,8}(/[a-z]{1,8})?\Z"), st.binary(max_size=64)),
        min_size=1,
        max_size=3,
    ).map(_tar),
)
