"""The bearer token never shows in what a program prints or logs of a client: the connection's
and the clients' `repr` name the URL, never the token (issue 55)."""

from __future__ import annotations

from harness_sandbox import AsyncSandbox, Sandbox
from harness_sandbox._http import Connection

TOKEN = "sbt_0123456789abcdef_" + "ab" * 32


def test_a_connection_repr_holds_no_token():
    connection = Connection("http://sandbox.test", token=TOKEN)
    assert TOKEN not in repr(connection)
    assert TOKEN not in str(connection)
    assert "sandbox.test" in repr(connection)


def test_a_client_repr_holds_no_token():
    for client in (Sandbox("http://sandbox.test", token=TOKEN), AsyncSandbox("http://sandbox.test", token=TOKEN)):
        assert TOKEN not in repr(client)
        assert TOKEN not in repr(client.connection)
