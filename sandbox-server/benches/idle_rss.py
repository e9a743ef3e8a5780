"""Idle resident memory of sandbox-server builds, side by side.

    python3 sandbox-server/benches/idle_rss.py BINARY [BINARY…]

Starts each build over an empty workspace, waits one second, reads its VmRSS, stops it;
eight rounds, the builds interleaved. Prints the median and every sample per build.
"""
import json
import statistics
import subprocess
import sys
import tempfile
import time


def rss(binary):
    workspace = tempfile.mkdtemp()
    server = subprocess.Popen(
        [binary, "serve", "--workspace", workspace, "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "RUST_LOG": "error"},
    )
    json.loads(server.stdout.readline())
    time.sleep(1.0)
    with open(f"/proc/{server.pid}/status") as status:
        kib = int(next(line for line in status if line.startswith("VmRSS")).split()[1])
    server.terminate()
    server.wait()
    return kib


binaries = sys.argv[1:]
samples = {binary: [] for binary in binaries}
for _ in range(8):
    for binary in binaries:
        samples[binary].append(rss(binary))
for binary in binaries:
    print(f"{binary}: median {statistics.median(samples[binary])} KiB {samples[binary]}")
