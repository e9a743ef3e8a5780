#!/usr/bin/env python3
"""A/B of `bash` call latency across server builds or flags, interleaved round by round with a
bare `bash -c` spawn, over a keep-alive Python client (`requests`); or, with --pause, the
latency of a call that follows a pause (as an agent's calls do).

    python3 ab_bash.py before=/tmp/old/sandbox-server after=target/release/sandbox-server \
        "after-host=target/release/sandbox-server --network host"
    python3 ab_bash.py --pause 0.3 before=/tmp/old/sandbox-server after=target/release/sandbox-server

Each argument is LABEL=BINARY [FLAGS...]. Rounds and calls are bounded (--rounds, --per).
Used for the step-by-step figures of BENCHMARKS.md; `cargo bench --bench peers` is the
reference benchmark.
"""
import argparse
import json
import subprocess
import tempfile
import time

import requests


def start(spec):
    label, _, command = spec.partition("=")
    binary, *flags = command.split()
    workspace = tempfile.mkdtemp()
    process = subprocess.Popen(
        [binary, "serve", "--workspace", workspace, "--listen", "127.0.0.1:0", *flags],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    address = json.loads(process.stdout.readline())["listening"]
    session = requests.Session()
    url = f"http://{address}/v1/tools/bash"
    for _ in range(20):
        session.post(url, json={"cmd": "echo hi"}).raise_for_status()
    return {"label": label, "process": process, "session": session, "url": url, "samples": []}


def timed(call, into, n):
    for _ in range(n):
        start = time.perf_counter()
        call()
        into.append((time.perf_counter() - start) * 1000)


def quantile(samples, q):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("servers", nargs="+", help="LABEL=BINARY [FLAGS...]")
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--per", type=int, default=40)
    parser.add_argument("--pause", type=float, default=0.0,
                        help="seconds of idleness before each timed call (then --per calls in all)")
    args = parser.parse_args()
    servers = [start(spec) for spec in args.servers]
    bare = []

    def call(server):
        server["session"].post(server["url"], json={"cmd": "echo hi"}).raise_for_status()

    def spawn():
        subprocess.run(["bash", "-c", "echo hi"], stdout=subprocess.PIPE, check=True)

    try:
        if args.pause:
            for _ in range(args.per):
                for server in servers:
                    time.sleep(args.pause)
                    timed(lambda: call(server), server["samples"], 1)
                time.sleep(args.pause)
                timed(spawn, bare, 1)
        else:
            for _ in range(args.rounds):
                for server in servers:
                    timed(lambda: call(server), server["samples"], args.per)
                timed(spawn, bare, args.per)
    finally:
        for server in servers:
            server["process"].terminate()
    floor = quantile(bare, 0.5)
    print(f"{'bare bash -c':24} p50 {floor:7.3f} ms  p99 {quantile(bare, 0.99):7.3f} ms")
    for server in servers:
        samples = server["samples"]
        p50 = quantile(samples, 0.5)
        print(f"{server['label']:24} p50 {p50:7.3f} ms  p99 {quantile(samples, 0.99):7.3f} ms"
              f"  {p50 / floor:.2f}x bare  ({len(samples)} calls)")


if __name__ == "__main__":
    main()
