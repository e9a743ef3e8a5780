"""What the sync and async clients share: the connection's settings, each request as data
(`Call`), the answers turned into values or typed exceptions, and the event stream's parser."""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
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
    # Never in a repr: a logged or printed connection must not carry its bearer token.
    token: str | None = field(default=None, repr=False)
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
    #: A 429 answer (the server busy) is asked again, a bounded number of times (`Retry`): only
    #: for a call that is safe to repeat (the archive's download), never for a tool call.
    retry_busy: bool = False

    def query(self) -> dict[str, Any]:
        return {k: ("true" if v is True else "false" if v is False else v) for k, v in self.params.items() if v is not None}


def raise_for(status: int, body: bytes, note: str = "") -> None:
    """The typed exception of an error answer; `note` is added to its message."""
    try:
        error = json.loads(body)["error"]
        kind, message = error["type"], error["message"]
    except (ValueError, KeyError, TypeError):
        raise SandboxApiError(status, body[:300].decode(errors="replace") + note, "unknown") from None
    raise ERRORS.get(kind, SandboxApiError)(status, message + note, kind)


def read(call: Call, status: int, body: bytes, note: str = "") -> Any:
    """The value of an answer: its JSON, bytes or text; `None` for a missing one when asked."""
    if status == 404 and call.missing_is_none:
        return None
    if status >= 400:
        raise_for(status, body, note)
    if call.answer == "json":
        return json.loads(body) if body else None
    if call.answer == "bytes":
        return body
    if call.answer == "text":
        return body.decode()
    return None


#: At most this many attempts of a call the server refuses with 429 (`Call.retry_busy`)…
BUSY_ATTEMPTS = 5
#: …and at most this many seconds of waiting between them, all told.
BUSY_WAIT = 30.0


class Retry:
    """When to ask again: the one policy of both clients, which send the call, then, for each
    answer, sleep for `after(...)` seconds and send it again, or, on `None`, `read(...)` it.

    A call marked `retry_busy` that is answered 429 is asked again after the answer's
    `Retry-After` (seconds, or a date), or a short backoff (0.5, 1, 2, 4 s) without one, at most
    `BUSY_ATTEMPTS` times and `BUSY_WAIT` seconds of waiting in all; then the 429 is raised, its
    message saying how many attempts were refused. Any other call is sent once.
    """

    def __init__(self, call: Call):
        self.call = call
        self.attempts = 0
        self.waited = 0.0

    def after(self, status: int, headers: Mapping[str, str]) -> float | None:
        """Seconds to wait before the next attempt, or `None`: this answer is the last."""
        self.attempts += 1
        left = BUSY_WAIT - self.waited
        if status != 429 or not self.call.retry_busy or self.attempts >= BUSY_ATTEMPTS or left <= 0:
            return None
        asked = retry_after(headers.get("retry-after"))
        wait = min(asked if asked is not None else 0.5 * 2 ** (self.attempts - 1), left)
        self.waited += wait
        return wait

    def read(self, status: int, body: bytes) -> Any:
        """The last answer's value (`read`); a 429 after retries says how many were refused."""
        refused = status == 429 and self.call.retry_busy
        note = f" (refused with 429 after {self.attempts} attempts)" if refused else ""
        return read(self.call, status, body, note)


def retry_after(value: str | None) -> float | None:
    """A `Retry-After` header's wait in seconds (never negative); `None` without a usable one."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError, OverflowError):
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
