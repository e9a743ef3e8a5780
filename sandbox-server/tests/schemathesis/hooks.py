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


def _fixtures():
    """A known file and a snapshot."""
    _call("PUT", "/v1/files/fixture/hello.txt", data=b"hello\nworld\n",
          headers={"Content-Type": "application/octet-stream"})
    FIXTURE["snapshot_id"] = _call("POST", "/v1/workspace/snapshot").json()["snapshot_id"]


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


@schemathesis.hook("map_path_parameters").apply_to(operation_id="kill_process")
def real_pid(context, path_parameters):
    """A live background process each time: earlier ones may have been ended meanwhile."""
    pid = (path_parameters or {}).get("pid")
    # Only a pid that is valid by the schema is replaced: an invalid one must stay invalid.
    if isinstance(pid, int) and 0 <= pid <= 4294967295 and _sometimes():
        result = _call("POST", "/v1/tools/bash", json={"cmd": "sleep 600 &"}).json()
        path_parameters["pid"] = result["background_pids"][0]
    return path_parameters


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
