"""What the sync and async clients share: the connection's settings, each request as data
(`Call`), the answers turned into values or typed exceptions, and the event stream's parser."""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from typing import Any

from .errors import SandboxApiError
from .models import ERRORS

#: Status codes of a process's event stream that a resume should not retry.
FINAL = frozenset({400, 401, 403, 404, 422})


@dataclass(frozen=True)
class Connection:
    """Where a sandbox is and how to reach it.

    `ca` trusts a private CA (besides none: with `ca`, only it); `cert` and `key` are a client
    certificate for mutual TLS; `token` is the bearer token (the server's, or a scoped one).
    """

    url: str
    token: str | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    timeout: float = 60.0

    def verify(self) -> ssl.SSLContext | bool:
        if not (self.ca or self.cert):
            return True
        context = ssl.create_default_context(cafile=self.ca)
        if self.cert:
            context.load_cert_chain(self.cert, self.key)
        return context

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@dataclass
class Call:
    """One request, before it is sent: what the clients' methods build."""

    method: str
    path: str
    json: Any = None
    content: bytes | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    #: How to read a 2xx answer: "json", "bytes", "text" or "none".
    answer: str = "json"
    #: A 404 answer is `None` rather than an exception.
    missing_is_none: bool = False
    #: The longest a call may take, when longer than the connection's (a tool's timeout).
    timeout: float | None = None

    def query(self) -> dict[str, Any]:
        return {k: ("true" if v is True else "false" if v is False else v) for k, v in self.params.items() if v is not None}


def raise_for(status: int, body: bytes) -> None:
    """The typed exception of an error answer."""
    try:
        error = json.loads(body)["error"]
        kind, message = error["type"], error["message"]
    except (ValueError, KeyError, TypeError):
        raise SandboxApiError(status, body[:300].decode(errors="replace"), "unknown") from None
    raise ERRORS.get(kind, SandboxApiError)(status, message, kind)


def read(call: Call, status: int, body: bytes) -> Any:
    """The value of an answer: its JSON, bytes or text; `None` for a missing one when asked."""
    if status == 404 and call.missing_is_none:
        return None
    if status >= 400:
        raise_for(status, body)
    if call.answer == "json":
        return json.loads(body) if body else None
    if call.answer == "bytes":
        return body
    if call.answer == "text":
        return body.decode()
    return None


def tool_timeout(args: dict[str, Any], connection: Connection) -> float:
    """A tool call may run for its own `timeout`: the HTTP wait covers it, and a margin."""
    timeout = args.get("timeout")
    return max(connection.timeout, float(timeout) + 30.0) if isinstance(timeout, (int, float)) else max(connection.timeout, 150.0)


def drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class EventParser:
    """Server-Sent Events, line by line: `feed` returns an event `(name, id, data)` when a
    blank line ends one."""

    def __init__(self) -> None:
        self.name, self.id, self.data = "message", None, []

    def feed(self, line: str) -> tuple[str, str | None, str] | None:
        if line == "":
            if not self.data:
                self.name = "message"
                return None
            event = (self.name, self.id, "\n".join(self.data))
            self.name, self.id, self.data = "message", None, []
            return event
        if line.startswith(":"):
            return None
        key, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if key == "event":
            self.name = value
        elif key == "id":
            self.id = value
        elif key == "data":
            self.data.append(value)
        return None
