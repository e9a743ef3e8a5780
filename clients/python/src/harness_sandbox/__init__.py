"""A client for sandbox-server: one isolated workspace behind HTTP (tools, files, snapshots,
processes, scoped tokens), over TLS and mutual TLS.

    from harness_sandbox import Sandbox

    with Sandbox("https://sandbox:8443", token=open("token").read().strip(), ca="ca.pem") as sandbox:
        sandbox.write_file("hello.py", "print('hello')\\n")
        print(sandbox.bash("python3 hello.py")["output"])

`AsyncSandbox` is the same API for asyncio. The answers are the typed dictionaries of
`harness_sandbox.models`, generated from the server's OpenAPI document; an error answer raises
the `SandboxApiError` subclass named after its `type`.
"""

from .aio import AsyncSandbox
from .client import Process, Sandbox, Shell, Terminal
from .errors import SandboxApiError, SandboxConnectionError, SandboxError
from .models import ERRORS

__all__ = [
    "ERRORS",
    "AsyncSandbox",
    "Process",
    "Sandbox",
    "SandboxApiError",
    "SandboxConnectionError",
    "SandboxError",
    "Shell",
    "Terminal",
]
