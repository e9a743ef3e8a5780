"""The exceptions of the SDK. Every error answer of the server becomes a `SandboxApiError`
subclass named after its `type` (`MissingScopeError` for `missing_scope`, …), generated in
`models.py`; catch `SandboxApiError` for all of them."""

from __future__ import annotations


class SandboxError(Exception):
    """Anything that went wrong talking to a sandbox."""


class SandboxApiError(SandboxError):
    """The server answered with its error body: `{"error": {"type", "message"}}`."""

    type: str = "unknown"

    def __init__(self, status: int, message: str, type: str | None = None):
        super().__init__(f"{status} {type or self.type}: {message}")
        self.status = status
        self.message = message
        if type is not None:
            self.type = type


class SandboxConnectionError(SandboxError):
    """The sandbox could not be reached, or a stream could not be resumed."""
