#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver for the tests (it stands in for the OpenTelemetry Collector,
which no package registry here carries). Used by controller/tests/it/telemetry.rs.

Needs only `pip install opentelemetry-proto` (brings protobuf). Stdlib HTTP server.

    python otlp_receiver.py serve --port 4318 --out spans.jsonl [--port-file p.txt]
    python otlp_receiver.py check spans.jsonl --services harness,sandbox-server

serve:
  POST /v1/traces   body = ExportTraceServiceRequest, Content-Type application/x-protobuf
                    (or application/json, OTLP/JSON), optional Content-Encoding: gzip.
                    Replies 200 with an (empty) ExportTraceServiceResponse in the same encoding.
  GET  /spans       all spans received so far, as a JSON list (for polling from tests).
  GET  /healthz     "ok".
  Each span is also appended as one JSON line to --out (flushed per request).
  --port 0 picks a free port; the bound port is printed ("LISTENING <port>") and written to
  --port-file if given. Binds 127.0.0.1 only.

check:
  Prints every trace as an indented tree (service: span name [kind]) and exits non-zero unless
  at least one trace contains spans from every service in --services, with every non-root span's
  parent present in the same trace, and exactly one root.
"""
from __future__ import annotations

import argparse
import gzip
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

KIND = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}


def _any_value(v):
    which = v.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if which == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    if which == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, which)


def flatten(req: ExportTraceServiceRequest) -> list[dict]:
    out = []
    for rs in req.resource_spans:
        res = {kv.key: _any_value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                out.append(
                    {
                        "service": res.get("service.name"),
                        "scope": ss.scope.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex() or None,
                        "name": s.name,
                        "kind": KIND.get(s.kind, str(s.kind)),
                        "start_ns": s.start_time_unix_nano,
                        "end_ns": s.end_time_unix_nano,
                        "status": s.status.code,
                        "attributes": {kv.key: _any_value(kv.value) for kv in s.attributes},
                        "resource": res,
                    }
                )
    return out


class Store:
    def __init__(self, path: str | None):
        self.lock = threading.Lock()
        self.spans: list[dict] = []
        self.fh = open(path, "a", encoding="utf-8") if path else None

    def add(self, spans: list[dict]) -> None:
        with self.lock:
            self.spans.extend(spans)
            if self.fh:
                for s in spans:
                    self.fh.write(json.dumps(s) + "\n")
                self.fh.flush()


def make_handler(store: Store):
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the Rust exporters expect

        def log_message(self, fmt, *args):  # quiet
            pass

        def _send(self, code: int, body: bytes, ctype: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/healthz":
                return self._send(200, b"ok", "text/plain")
            if self.path == "/spans":
                with store.lock:
                    body = json.dumps(store.spans).encode()
                return self._send(200, body, "application/json")
            self._send(404, b"not found", "text/plain")

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n)
            if self.path != "/v1/traces":
                # Metrics/logs are accepted and dropped so an exporter never errors on them.
                return self._send(200, b"", self.headers.get("Content-Type", "application/x-protobuf"))
            if (self.headers.get("Content-Encoding") or "").lower() == "gzip":
                raw = gzip.decompress(raw)
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            req = ExportTraceServiceRequest()
            try:
                if ctype == "application/json":
                    json_format.Parse(raw, req)
                else:
                    req.ParseFromString(raw)
            except Exception as e:  # noqa: BLE001
                return self._send(400, f"bad request: {e}".encode(), "text/plain")
            store.add(flatten(req))
            resp = ExportTraceServiceResponse()
            if ctype == "application/json":
                self._send(200, json_format.MessageToJson(resp).encode(), "application/json")
            else:
                self._send(200, resp.SerializeToString(), "application/x-protobuf")

    return H


def serve(args) -> None:
    store = Store(args.out)
    srv = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(store))
    port = srv.server_address[1]
    if args.port_file:
        with open(args.port_file, "w") as f:
            f.write(str(port))
    print(f"LISTENING {port}", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


def load(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check(args) -> int:
    spans = load(args.file)
    by_trace: dict[str, list[dict]] = {}
    for s in spans:
        by_trace.setdefault(s["trace_id"], []).append(s)
    want = {x for x in args.services.split(",") if x}
    ok_traces = 0
    for tid, ss in by_trace.items():
        ids = {s["span_id"]: s for s in ss}
        children: dict[str | None, list[dict]] = {}
        for s in ss:
            children.setdefault(s["parent_span_id"], []).append(s)
        roots = [s for s in ss if not s["parent_span_id"]]
        orphans = [s for s in ss if s["parent_span_id"] and s["parent_span_id"] not in ids]
        print(f"trace {tid}: {len(ss)} spans, {len(roots)} root(s), {len(orphans)} orphan(s)")

        def walk(s, depth):
            print(f"  {'  ' * depth}{s['service']}: {s['name']} [{s['kind']}] {s['span_id']}")
            for c in sorted(children.get(s["span_id"], []), key=lambda c: c["start_ns"]):
                walk(c, depth + 1)

        for r in roots + orphans:
            walk(r, 0)
        services = {s["service"] for s in ss}
        if want <= services and len(roots) == 1 and not orphans:
            ok_traces += 1
    print(f"{ok_traces} trace(s) span {sorted(want)} with a single root and no orphans")
    return 0 if ok_traces else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=4318)
    s.add_argument("--out")
    s.add_argument("--port-file")
    c = sub.add_parser("check")
    c.add_argument("file")
    c.add_argument("--services", default="")
    args = ap.parse_args()
    if args.cmd == "serve":
        serve(args)
        return 0
    return check(args)


if __name__ == "__main__":
    sys.exit(main())
