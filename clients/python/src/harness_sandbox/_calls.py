"""Every route of the API as a `Call`: the one place that knows paths, methods and bodies. The
sync and async clients send them."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from ._http import Call, drop_none


def path(text: str) -> str:
    """A workspace path in a URL: each segment escaped, `/` kept."""
    return "/".join(quote(part, safe="") for part in text.strip("/").split("/"))


def health() -> Call:
    return Call("GET", "/healthz")


def info() -> Call:
    return Call("GET", "/v1/info")


def tools() -> Call:
    return Call("GET", "/v1/tools")


def metrics() -> Call:
    return Call("GET", "/metrics", answer="text")


def tool(name: str, args: dict[str, Any], call_id: str | None = None, **step: Any) -> Call:
    headers = {"Sandbox-Call-Id": call_id} if call_id else {}
    return Call("POST", f"/v1/tools/{quote(name, safe='')}", json=args, headers=headers, params=drop_none(**step))


def artifact(artifact_id: str) -> Call:
    return Call("GET", f"/v1/artifacts/{quote(artifact_id, safe='')}", answer="bytes", missing_is_none=True)


def get_file(file: str) -> Call:
    return Call("GET", f"/v1/files/{path(file)}", answer="bytes", missing_is_none=True)


def put_file(file: str, content: bytes, mode: str | None = None) -> Call:
    return Call("PUT", f"/v1/files/{path(file)}", content=content, params=drop_none(mode=mode),
                headers={"Content-Type": "application/octet-stream"})


def list_dir(folder: str = "") -> Call:
    return Call("GET", f"/v1/dirs/{path(folder)}" if folder.strip("/") else "/v1/dirs", missing_is_none=True)


def snapshot() -> Call:
    return Call("POST", "/v1/workspace/snapshot")


def manifest(snapshot_id: str) -> Call:
    return Call("GET", f"/v1/workspace/snapshots/{quote(snapshot_id, safe='')}")


def changes(since: str) -> Call:
    return Call("GET", "/v1/workspace/changes", params={"since": since})


def diff(since: str, to: str | None = None, max_bytes: int | None = None) -> Call:
    return Call("GET", "/v1/workspace/diff", params=drop_none(since=since, to=to, max_bytes=max_bytes), answer="text")


def blob(sha256: str) -> Call:
    return Call("GET", f"/v1/blobs/{quote(sha256, safe='')}", answer="bytes", missing_is_none=True)


def archive() -> Call:
    # The server writes a few archives at once and answers 429 past them: a download changes
    # nothing, so it is asked again (`Retry`).
    return Call("GET", "/v1/workspace/archive", answer="bytes", retry_busy=True)


def restore(tar: bytes) -> Call:
    return Call("PUT", "/v1/workspace/archive", content=tar, headers={"Content-Type": "application/x-tar"})


def fingerprint() -> Call:
    return Call("GET", "/v1/state/fingerprint")


def reset() -> Call:
    return Call("POST", "/v1/reset")


def start_process(request: dict[str, Any]) -> Call:
    return Call("POST", "/v1/processes", json=request)


def list_processes() -> Call:
    return Call("GET", "/v1/processes")


def kill_background(include_running: bool = False) -> Call:
    return Call("DELETE", "/v1/processes", params={"include_running": include_running})


def get_process(process_id: str) -> Call:
    return Call("GET", f"/v1/processes/{quote(process_id, safe='')}")


def delete_process(process_id: str) -> Call:
    return Call("DELETE", f"/v1/processes/{quote(process_id, safe='')}")


def output(process_id: str, after_seq: int = 0, wait_ms: int | None = None, max_bytes: int | None = None) -> Call:
    return Call("GET", f"/v1/processes/{quote(process_id, safe='')}/output",
                params=drop_none(after_seq=after_seq, wait_ms=wait_ms, max_bytes=max_bytes))


def stdin(process_id: str, data: str = "", close: bool = False, encoding: str | None = None) -> Call:
    return Call("POST", f"/v1/processes/{quote(process_id, safe='')}/stdin",
                json=drop_none(data=data, close=close, encoding=encoding))


def signal(process_id: str, name: str) -> Call:
    return Call("POST", f"/v1/processes/{quote(process_id, safe='')}/signal", json={"signal": name}, answer="none")


def resize(process_id: str, rows: int, cols: int) -> Call:
    return Call("POST", f"/v1/processes/{quote(process_id, safe='')}/resize", json={"rows": rows, "cols": cols}, answer="none")


def start_shell(request: dict[str, Any]) -> Call:
    return Call("POST", "/v1/shells", json=request)


def run_in_shell(shell_id: str, cmd: str, timeout: int | None = None) -> Call:
    return Call("POST", f"/v1/shells/{quote(shell_id, safe='')}/run", json=drop_none(cmd=cmd, timeout=timeout))


def interrupt_shell(shell_id: str) -> Call:
    return Call("POST", f"/v1/shells/{quote(shell_id, safe='')}/interrupt", answer="none")


def mint_token(scopes: list[str], ttl_secs: int, name: str) -> Call:
    return Call("POST", "/v1/tokens", json={"name": name, "scopes": list(scopes), "ttl_secs": ttl_secs})


def list_tokens() -> Call:
    return Call("GET", "/v1/tokens")


def revoke_token(token_id: str) -> Call:
    return Call("DELETE", f"/v1/tokens/{quote(token_id, safe='')}")


def events_path(process_id: str) -> str:
    return f"/v1/processes/{quote(process_id, safe='')}/events"


def pty_path(process_id: str) -> str:
    return f"/v1/processes/{quote(process_id, safe='')}/pty"
