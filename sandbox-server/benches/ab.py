"""Interleaved A/B of tool-call round trips against two sandbox-server builds running at once,
so that both sides see the same minutes of a shared, noisy machine.

    python3 sandbox-server/benches/ab.py OLD_BINARY NEW_BINARY [WORKER_THREADS]

Each server gets an empty workspace of its own and default containment; one keep-alive
connection per server; 20 rounds of 50 calls on each in turn; the first 50 calls of each side
are a warm-up. Prints p50 and p90 per side.

AB_TOOL=read_file calls `read_file` on a small file instead of `bash true`. AB_ENV_OLD and
AB_ENV_NEW add variables to one side's environment (`NAME=value,NAME=value`), e.g. the same
binary on both sides with OTEL_EXPORTER_OTLP_ENDPOINT on one.
"""
import os
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import time


def start(binary, workspace, threads, extra):
    env = {"RUST_LOG": "error", "PATH": "/usr/bin:/bin"}
    env.update(pair.split("=", 1) for pair in extra.split(",") if pair)
    with open(os.path.join(workspace, "small.txt"), "w") as f:
        f.write("one line\n" * 20)
    server = subprocess.Popen(
        [binary, "serve", "--workspace", workspace, "--listen", "127.0.0.1:0", "--worker-threads", str(threads)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
    )
    host, port = json.loads(server.stdout.readline())["listening"].rsplit(":", 1)
    return server, http.client.HTTPConnection(host, int(port))


def call(connection):
    started = time.perf_counter()
    if os.environ.get("AB_TOOL") == "read_file":
        path, body = "/v1/tools/read_file", {"path": "small.txt"}
    else:
        path, body = "/v1/tools/bash", {"cmd": "true"}
    connection.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    connection.getresponse().read()
    return time.perf_counter() - started


def print_table(header, cell, times):
    """Prints `header` (the table's first two lines), then a row a side: its name, `cell`, and
    the p50 and p90 in ms of its samples after the first 50 (the warm-up)."""
    print(header)
    for name, samples in times.items():
        kept = sorted(samples[50:])
        print(f"| {name} | {cell} | {statistics.median(kept) * 1000:.3f} | {kept[int(len(kept) * 0.9)] * 1000:.3f} |")


def main():
    old, new = sys.argv[1], sys.argv[2]
    threads = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        servers = {
            "old": start(old, a, threads, os.environ.get("AB_ENV_OLD", "")),
            "new": start(new, b, threads, os.environ.get("AB_ENV_NEW", "")),
        }
        times = {name: [] for name in servers}
        try:
            for _ in range(20):
                for name, (_, connection) in servers.items():
                    times[name].extend(call(connection) for _ in range(50))
        finally:
            for server, _ in servers.values():
                server.terminate()
                server.wait()
    print_table("| side | worker threads | p50 ms | p90 ms |\n|---|---:|---:|---:|", threads, times)


if __name__ == "__main__":
    main()
