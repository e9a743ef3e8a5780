"""Interleaved A/B of a sandbox-server's start: from the spawn to the first `bash true` answered
(the namespaces' init and the commands' view of the files are made in between), against two
builds, in the same minutes of a shared, noisy machine.

    python3 sandbox-server/benches/start_ab.py OLD_BINARY NEW_BINARY [ROUNDS] [-- SERVER FLAGS…]

Each start gets an empty workspace of its own (in a private folder, as `mktemp -d` makes one)
and default containment; AB_USER=65534 runs both servers as that user (a server that is not
root), with the workspace given to it; AB_OPEN_PARENT=1 opens the workspace's parent to every
user (a server before issue 55 refused a private one under `--run-as`). Prints p50 and p90 per
side, in milliseconds.
"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def start_once(binary, flags, user):
    with tempfile.TemporaryDirectory() as parent:
        workspace = os.path.join(parent, "ws")
        os.mkdir(workspace)
        if os.environ.get("AB_OPEN_PARENT"):
            os.chmod(parent, 0o755)
        if user is not None:
            os.chown(parent, user, user)
            os.chown(workspace, user, user)
        env = {"RUST_LOG": "error", "PATH": "/usr/bin:/bin", "HOME": "/root" if user is None else parent}
        started = time.perf_counter()
        server = subprocess.Popen(
            [binary, "serve", "--workspace", workspace, "--listen", "127.0.0.1:0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            user=user, group=user, extra_groups=[] if user is not None else None,
        )
        try:
            host, port = json.loads(server.stdout.readline())["listening"].rsplit(":", 1)
            connection = http.client.HTTPConnection(host, int(port))
            connection.request("POST", "/v1/tools/bash", body=json.dumps({"cmd": "true"}),
                               headers={"Content-Type": "application/json"})
            answer = connection.getresponse()
            answer.read()
            assert answer.status == 200, answer.status
            return time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(timeout=30)


def main():
    args = sys.argv[1:]
    flags = []
    if "--" in args:
        flags = args[args.index("--") + 1:]
        args = args[:args.index("--")]
    old, new = args[0], args[1]
    rounds = int(args[2]) if len(args) > 2 else 20
    user = int(os.environ["AB_USER"]) if "AB_USER" in os.environ else None
    times = {"old": [], "new": []}
    for _ in range(rounds):
        times["old"].append(start_once(old, flags, user))
        times["new"].append(start_once(new, flags, user))
    for name, values in times.items():
        values = sorted(v * 1000 for v in values)
        p90 = values[int(len(values) * 0.9) - 1]
        print(f"{name}: p50 {statistics.median(values):.2f} ms, p90 {p90:.2f} ms ({len(values)} starts)")
    print(f"new / old (p50): {statistics.median(times['new']) / statistics.median(times['old']):.3f}")


if __name__ == "__main__":
    main()
