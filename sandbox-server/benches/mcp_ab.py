"""The cost of reaching a tool over MCP instead of the REST route: one server, one keep-alive
connection, `bash true` (or AB_TOOL=read_file on a small file) called in turns through
`POST /v1/tools/{name}` and through `POST /mcp` (`tools/call`, JSON answer), 20 rounds of 50
each after 50 of warm-up. Prints p50 and p90 per route.

    python3 sandbox-server/benches/mcp_ab.py SANDBOX_SERVER_BINARY
"""
import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

from ab import print_table  # the same table as the plain A/B


def main():
    binary = sys.argv[1]
    tool = os.environ.get("AB_TOOL", "bash")
    args = {"path": "small.txt"} if tool == "read_file" else {"cmd": "true"}
    with tempfile.TemporaryDirectory() as workspace:
        with open(os.path.join(workspace, "small.txt"), "w") as f:
            f.write("one line\n" * 20)
        server = subprocess.Popen(
            [binary, "serve", "--workspace", workspace, "--listen", "127.0.0.1:0"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env={"RUST_LOG": "error", "PATH": "/usr/bin:/bin"},
        )
        host, port = json.loads(server.stdout.readline())["listening"].rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port))
        rest = ("/v1/tools/" + tool, json.dumps(args), {"Content-Type": "application/json"})
        mcp = ("/mcp", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}),
               {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
        times = {"rest": [], "mcp": []}
        try:
            for _ in range(20):
                for name, (path, body, headers) in (("rest", rest), ("mcp", mcp)):
                    for _ in range(50):
                        started = time.perf_counter()
                        connection.request("POST", path, body=body, headers=headers)
                        answer = connection.getresponse()
                        answer.read()
                        assert answer.status == 200, answer.status
                        times[name].append(time.perf_counter() - started)
        finally:
            server.terminate()
            server.wait()
    print_table("| route | tool | p50 ms | p90 ms |\n|---|---|---:|---:|", tool, times)


if __name__ == "__main__":
    main()
