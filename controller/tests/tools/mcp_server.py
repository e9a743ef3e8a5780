"""An MCP server for the tests, on the official Python SDK (`mcp` from PyPI).

    python mcp_server.py stdio [--delay SECONDS] [--marker FILE]
    python mcp_server.py http PORT

Tools: echo(text), add(a, b), slow(seconds), fail() (a tool error), secret(), and one whose
name has a dot, `search.docs(query)`. With --delay it sleeps before it serves (a slow start);
with --marker it appends a line to FILE when it starts (so a test sees when it started).
"""
import sys
import time

from mcp.server.mcpserver import MCPServer

server = MCPServer("test-tools", version="0.0.1")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "slept"


@server.tool()
def fail() -> str:
    """Always fails."""
    raise RuntimeError("this tool always fails")


@server.tool()
def secret() -> str:
    """A tool the configuration hides."""
    return "the secret"


@server.tool()
def whereami() -> str:
    """The server's working folder."""
    import os
    return os.getcwd()


@server.tool(name="search.docs")
def search_docs(query: str) -> str:
    """Search the docs."""
    return f"found {query}"


if __name__ == "__main__":
    if sys.argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]), stateless_http=True, json_response=True)
    else:
        if "--marker" in sys.argv:
            with open(sys.argv[sys.argv.index("--marker") + 1], "a") as marker:
                marker.write("started\n")
        if "--delay" in sys.argv:
            time.sleep(float(sys.argv[sys.argv.index("--delay") + 1]))
        server.run()
