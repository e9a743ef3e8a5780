"""What TLS costs: one sandbox-server build served twice at once, in plain HTTP and in HTTPS
(`--tls-cert`/`--tls-key`, a P-256 certificate made here with the `openssl` command), so that
both sides see the same minutes of a shared, noisy machine.

    python3 sandbox-server/benches/tls_ab.py BINARY

Two figures, in interleaved rounds: a new connection and its first request (`GET /healthz`,
so the TLS side pays its handshake), and a tool call on a kept-alive connection (`bash true`,
or `read_file` of a small file with AB_TOOL=read_file). 20 rounds; each round makes 10 new
connections and 50 calls a side; the first round is a warm-up. Prints p50 and p90 per side
and the ratio of the medians.
"""
import http.client
import json
import os
import ssl
import statistics
import subprocess
import sys
import tempfile
import time

from ab import call  # the same tool call as the plain A/B, on whichever connection


def certificate(folder):
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
         "-keyout", key, "-out", cert],
        check=True, capture_output=True,
    )
    return cert, key


def start(binary, workspace, tls):
    with open(os.path.join(workspace, "small.txt"), "w") as f:
        f.write("one line\n" * 20)
    args = [binary, "serve", "--workspace", workspace, "--listen", "127.0.0.1:0", "--worker-threads", "2"]
    if tls:
        args += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    server = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={"RUST_LOG": "error", "PATH": "/usr/bin:/bin"},
    )
    port = int(json.loads(server.stdout.readline())["listening"].rsplit(":", 1)[1])
    return server, port


def connect(port, context):
    if context is None:
        return http.client.HTTPConnection("127.0.0.1", port)
    return http.client.HTTPSConnection("localhost", port, context=context)


def first_request(port, context):
    started = time.perf_counter()
    connection = connect(port, context)
    connection.request("GET", "/healthz")
    connection.getresponse().read()
    elapsed = time.perf_counter() - started
    connection.close()
    return elapsed


def main():
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as certs, tempfile.TemporaryDirectory() as a, \
            tempfile.TemporaryDirectory() as b:
        cert, key = certificate(certs)
        context = ssl.create_default_context(cafile=cert)
        sides = {"plain": start(binary, a, None), "tls": start(binary, b, (cert, key))}
        contexts = {"plain": None, "tls": context}
        kept = {name: connect(port, contexts[name]) for name, (_, port) in sides.items()}
        handshakes = {name: [] for name in sides}
        calls = {name: [] for name in sides}
        try:
            for round_ in range(20):
                for name, (_, port) in sides.items():
                    opened = [first_request(port, contexts[name]) for _ in range(10)]
                    called = [call(kept[name]) for _ in range(50)]
                    if round_ > 0:
                        handshakes[name].extend(opened)
                        calls[name].extend(called)
        finally:
            for server, _ in sides.values():
                server.terminate()
                server.wait()
    tool = os.environ.get("AB_TOOL", "bash")
    for label, samples in [("new connection + GET /healthz", handshakes), (f"{tool} call, kept alive", calls)]:
        medians = {}
        for name, values in samples.items():
            values.sort()
            medians[name] = statistics.median(values)
            p90 = values[int(len(values) * 0.9)]
            print(f"{label:32} {name:6} p50 {medians[name] * 1000:.3f} ms  p90 {p90 * 1000:.3f} ms  (n={len(values)})")
        print(f"{label:32} tls / plain (p50): {medians['tls'] / medians['plain']:.3f}")


if __name__ == "__main__":
    main()
