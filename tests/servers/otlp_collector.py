#!/usr/bin/env python3
"""An OTLP/HTTP trace receiver for tests, decoding with the OpenTelemetry project's own
protobuf definitions (`opentelemetry-proto`, in the venv `cargo xtask setup` makes): what a
collector's `otlp` receiver accepts, and nothing of inferscope's.

    otlp_collector.py --port 4318

POST /v1/traces (application/x-protobuf ExportTraceServiceRequest) keeps every span;
POST /v1/metrics (ExportMetricsServiceRequest) keeps the newest point of each sum, gauge and
histogram series (cumulative: the newest is the total); POST /v1/logs is accepted and dropped.
GET /spans answers the spans so far as a JSON list of {"trace_id", "span_id",
"parent_span_id" (hex, "" for a root), "name", "start_unix_nano", "end_unix_nano",
"attributes": {key: value}, "events": [name, ...]}; GET /metrics the points as a JSON list of
{"name", "kind" (sum, gauge, histogram), "attributes", "value"} ("count" and "sum" for a
histogram); GET /health answers 200.
"""

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

SPANS = []
# (name, attributes as sorted pairs) -> the newest point.
POINTS = {}
LOCK = threading.Lock()


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


def spans_of(body):
    req = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for s in ss.spans:
                yield {
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_span_id": s.parent_span_id.hex(),
                    "name": s.name,
                    "start_unix_nano": s.start_time_unix_nano,
                    "end_unix_nano": s.end_time_unix_nano,
                    "attributes": {a.key: value(a.value) for a in s.attributes},
                    "events": [e.name for e in s.events],
                }


def points_of(body):
    req = metrics_service_pb2.ExportMetricsServiceRequest.FromString(body)
    for rm in req.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                kind = m.WhichOneof("data")
                if kind not in ("sum", "gauge", "histogram"):
                    continue
                for p in getattr(m, kind).data_points:
                    point = {
                        "name": m.name,
                        "kind": kind,
                        "attributes": {a.key: value(a.value) for a in p.attributes},
                    }
                    if kind == "histogram":
                        point["count"] = p.count
                        point["sum"] = p.sum
                    else:
                        point["value"] = getattr(p, p.WhichOneof("value"))
                    yield point


def keep_points(points):
    for p in points:
        POINTS[(p["name"], tuple(sorted(p["attributes"].items())))] = p


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def answer(self, status, body, kind):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        decode, keep = {
            "/v1/traces": (spans_of, SPANS.extend),
            "/v1/metrics": (points_of, keep_points),
            "/v1/logs": (lambda _: [], lambda _: None),
        }.get(self.path, (None, None))
        if decode is None:
            self.answer(404, b"", "text/plain")
            return
        try:
            got = list(decode(body))
        except Exception as e:  # a body that is not such an export
            self.answer(400, str(e).encode(), "text/plain")
            return
        with LOCK:
            keep(got)
        # An empty Export*ServiceResponse: full success.
        self.answer(200, b"", "application/x-protobuf")

    def do_GET(self):
        if self.path == "/health":
            self.answer(200, b"ok", "text/plain")
        elif self.path == "/spans":
            with LOCK:
                body = json.dumps(SPANS).encode()
            self.answer(200, body, "application/json")
        elif self.path == "/metrics":
            with LOCK:
                body = json.dumps(list(POINTS.values())).encode()
            self.answer(200, body, "application/json")
        else:
            self.answer(404, b"", "text/plain")

    def log_message(self, *_):
        pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    args = p.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
