"""Drives a sandbox-server's MCP endpoint with the official Python MCP SDK (`mcp`, PyPI), a
client no one here wrote: over streamable HTTP with the bearer token, then over stdio through
`sandbox-server mcp-stdio`. Run by sandbox-server/tests/it/mcp.rs; prints one line per check
and exits non-zero on the first failure.

    python drive.py http URL TOKEN
    python drive.py stdio SANDBOX_SERVER WORKSPACE
"""
import asyncio
import sys

import httpx2
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def check(condition, what):
    if not condition:
        raise SystemExit(f"FAILED: {what}")
    print(f"ok: {what}", flush=True)


def text(result):
    return "".join(block.text for block in result.content if getattr(block, "text", None))


async def exercise(client):
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for name in ["bash", "read_file", "write_file", "search_replace", "workspace_snapshot",
                 "workspace_changes", "file_at_version", "workspace_restore"]:
        check(name in tools, f"tools/list has {name}")
    check(tools["bash"].input_schema["required"] == ["cmd"], "bash's schema is the registry's")
    check(tools["read_file"].annotations.read_only_hint is True, "read_file is read-only")
    check(tools["bash"].annotations.destructive_hint is True, "bash is destructive")
    check(tools["workspace_restore"].annotations.idempotent_hint is True, "restore is idempotent")

    result = await client.call_tool("bash", {"cmd": "echo hello from bash; exit 3"}, read_timeout_seconds=60)
    check(not result.is_error and "exit=3" in text(result) and "hello from bash" in text(result), "bash runs")
    check(result.structured_content["exit_code"] == 3, "bash's result is structured too")

    snapshot = await client.call_tool("workspace_snapshot", {})
    first = snapshot.structured_content["snapshot_id"]
    check(first.startswith("snap_"), f"workspace_snapshot gives {first}")

    await client.call_tool("write_file", {"path": "notes/a.txt", "content": "version one\n"})
    read = await client.call_tool("read_file", {"path": "notes/a.txt"})
    check("version one" in text(read), "read_file reads what write_file wrote")
    missing = await client.call_tool("read_file", {"path": "nope.txt"})
    check(missing.is_error and "file_not_found" in text(missing), "a missing file is an isError result")
    bad = await client.call_tool("bash", {"command": "ls"})
    check(bad.is_error and "cmd" in text(bad), "bad arguments are an isError result naming them")

    changes = await client.call_tool("workspace_changes", {"since": first})
    check("added notes/a.txt" in text(changes), "workspace_changes lists the new file")
    second = changes.structured_content["snapshot_id"]
    version = await client.call_tool("file_at_version", {"snapshot_id": second, "path": "notes/a.txt"})
    check(text(version) == "version one\n", "file_at_version returns the recorded content")

    await client.call_tool("write_file", {"path": "notes/a.txt", "content": "version two\n"})
    await client.call_tool("write_file", {"path": "later.txt", "content": "later\n"})
    restored = await client.call_tool("workspace_restore", {"snapshot_id": second})
    check(not restored.is_error, f"workspace_restore: {text(restored)}")
    back = await client.call_tool("read_file", {"path": "notes/a.txt"})
    check("version one" in text(back), "the restore brought version one back")
    gone = await client.call_tool("read_file", {"path": "later.txt"})
    check(gone.is_error, "the restore removed a file the snapshot did not have")

    try:
        await client.call_tool("no_such_tool", {})
        check(False, "an unknown tool is refused")
    except MCPError as err:
        check("no tool `no_such_tool`" in str(err), "an unknown tool is a protocol error naming it")


async def over_http(url, token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            check(client.server_info.name == "sandbox-server", "the HTTP server names itself")
            await exercise(client)
    refused = httpx2.AsyncClient(headers={"Authorization": "Bearer wrong"}, timeout=30)
    try:
        async with refused:
            async with Client(streamable_http_client(url, http_client=refused)) as client:
                await client.list_tools()
        check(False, "a wrong token is refused")
    except BaseException:  # the SDK raises an ExceptionGroup around its MCPError
        check(True, "a wrong token is refused")


async def over_stdio(program, workspace):
    params = StdioServerParameters(command=program, args=["mcp-stdio", "--workspace", workspace])
    async with Client(params) as client:
        check(client.server_info.name == "sandbox-server", "the stdio bridge names itself")
        await exercise(client)


if __name__ == "__main__":
    mode, a, b = sys.argv[1:4]
    asyncio.run(over_http(a, b) if mode == "http" else over_stdio(a, b))
    print("done")
