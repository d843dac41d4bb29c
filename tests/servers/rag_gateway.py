#!/usr/bin/env python3
"""A server-orchestrated RAG gateway for tests: one client request fans out to four upstream
services in order, and the chat model's streamed answer comes back to the client unchanged (so
the client measures the pipeline's time to first token). Standard library only.

    rag_gateway.py --port 9000 --embed URL --search URL --rerank URL --chat URL \\
        [--model inferscope-sim] [--top-k 8] [--top-n 3] [--lock-ms 0]

POST /v1/rag {"query": str, "max_tokens": int (default 64)} (or POST /v1/chat/completions with
an OpenAI chat body, whose last user message is the query) calls, in order:
  1. POST {embed}/v1/embeddings   {"model", "input": query}          -> data[0].embedding
  2. POST {search}/v1/vector/search {"vector", "top_k"}               -> results[].id (the sim's
     vector API; a hit's "text" is used when it has one, else a passage made up from its id)
  3. POST {rerank}/v1/rerank      {"model", "query", "documents", "top_n"} -> results[].index
  4. POST {chat}/v1/chat/completions, stream true, the top documents in the prompt; its SSE
     answer (status 200) is relayed to the client as it arrives.
The answer carries a Server-Timing header with each stage's milliseconds (lock, embed, search,
rerank). An upstream that fails, answers non-200 or answers an unexpected body gives a 502
with an OpenAI-style error JSON naming the stage; a bad request gives a 400.

Each handler thread keeps one HTTP/1.1 connection per upstream alive and dials it again once
when the upstream closed it meanwhile. --lock-ms N (or POST /admin/lock {"ms": N} while it
runs) holds a global lock for N ms at the start of
every request: contention inside the gateway itself, a fault for tests to find.
GET /health answers 200; GET /stats the requests, errors and calls made per upstream.
"""

import argparse
import http.client
import json
import random
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STAGES = ("embed", "search", "rerank", "chat")
# Words of the passages made up for hits without text.
WORDS = ("cache", "kernel", "latency", "queue", "memory", "token", "batch", "index", "vector",
         "search", "prefill", "decode", "model", "server", "request", "stream", "retry", "load",
         "block", "eviction", "replica", "shard", "network", "thread", "scheduler", "gpu")
PASSAGE_WORDS = 48


class UpstreamError(Exception):
    """A stage's upstream failed; the message names the stage."""

    def __init__(self, stage, message):
        super().__init__("%s: %s" % (stage, message))


class Upstreams:
    """The four upstream services, their per-thread kept-alive connections and call counts."""

    def __init__(self, urls, timeout):
        self.urls = {name: urllib.parse.urlsplit(url) for name, url in urls.items()}
        self.timeout = timeout
        self.local = threading.local()
        self.lock = threading.Lock()
        self.calls = {name: 0 for name in urls}

    def _conn(self, name):
        conns = self.local.__dict__.setdefault("conns", {})
        if name in conns:
            return conns[name], True
        u = self.urls[name]
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conns[name] = cls(u.hostname, u.port, timeout=self.timeout)
        return conns[name], False

    def drop(self, name):
        """Closes this thread's connection to `name` (its state is unknown after a failure)."""
        conn = self.local.__dict__.get("conns", {}).pop(name, None)
        if conn is not None:
            conn.close()

    def post(self, name, path, body):
        """POSTs `body` as JSON; returns the unread response."""
        with self.lock:
            self.calls[name] += 1
        data = json.dumps(body).encode()
        url = self.urls[name].path.rstrip("/") + path
        for attempt in (0, 1):
            conn, reused = self._conn(name)
            try:
                conn.request("POST", url, data, {"Content-Type": "application/json"})
                return conn.getresponse()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                self.drop(name)
                if not reused or attempt:
                    raise UpstreamError(name, repr(e))
            except (OSError, http.client.HTTPException) as e:
                self.drop(name)
                raise UpstreamError(name, repr(e))

    def post_json(self, name, path, body):
        """POSTs `body`; the JSON answer of a 200, else an UpstreamError."""
        resp = self.post(name, path, body)
        try:
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.drop(name)
            raise UpstreamError(name, repr(e))
        if resp.status != 200:
            raise UpstreamError(name, "HTTP %d: %s" % (resp.status, data[:300].decode(errors="replace")))
        try:
            return json.loads(data)
        except ValueError:
            raise UpstreamError(name, "the answer is not JSON")


def passage(doc_id):
    """A made-up passage for a hit without text, the same for the same id."""
    rng = random.Random(doc_id)
    return "passage %s: %s" % (doc_id, " ".join(rng.choice(WORDS) for _ in range(PASSAGE_WORDS)))


def field(stage, get):
    """Reads an answer's field with `get`; a missing or mistyped one is the stage's error."""
    try:
        return get()
    except (AttributeError, KeyError, IndexError, TypeError, ValueError) as e:
        raise UpstreamError(stage, "unexpected answer: %r" % e)


def retrieve(up, args, query, timings):
    """Embeds, searches and re-ranks; the documents for the prompt, best first."""
    t = time.monotonic()
    emb = up.post_json("embed", "/v1/embeddings", {"model": args.model, "input": query})
    vector = field("embed", lambda: list(emb["data"][0]["embedding"]))
    timings["embed"], t = time.monotonic() - t, time.monotonic()
    found = up.post_json("search", "/v1/vector/search", {"vector": vector, "top_k": args.top_k})
    hits = field("search", lambda: list(found["results"]))
    docs = [field("search", lambda: h.get("text") or passage(h["id"])) for h in hits]
    timings["search"], t = time.monotonic() - t, time.monotonic()
    if not docs:
        return []
    ranked = up.post_json("rerank", "/v1/rerank", {"model": args.model, "query": query,
                                                   "documents": docs, "top_n": args.top_n})
    top = field("rerank", lambda: [docs[r["index"]] for r in ranked["results"]])
    timings["rerank"] = time.monotonic() - t
    return top


def chat_body(args, query, docs, max_tokens):
    context = "\n".join("[%d] %s" % (i + 1, d) for i, d in enumerate(docs))
    return {"model": args.model, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": max_tokens, "messages": [
                {"role": "system", "content": "Answer the question from the context."},
                {"role": "user", "content": "Context:\n%s\n\nQuestion: %s" % (context, query)}]}


def error_body(status, message):
    kind = "invalid_request_error" if status < 500 else "upstream_error"
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}})


# The same pipeline behind an OpenAI-compatible route, as RAG gateways serve it: the last user
# message is the query, and the answer is the chat model's stream.
CHAT_ROUTE = "/v1/chat/completions"


def make_handler(args, up, stats, stats_lock, gateway_lock):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Relayed tokens must not wait for an ACK (Nagle): the client measures their times.
        disable_nagle_algorithm = True

        def log_message(self, *_):
            pass

        def reply(self, status, body):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def count(self, key):
            with stats_lock:
                stats[key] += 1

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, json.dumps({"status": "ok"}))
            elif self.path == "/stats":
                with stats_lock, up.lock:
                    self.reply(200, json.dumps(dict(stats, calls=dict(up.calls))))
            else:
                self.reply(404, error_body(404, "no such route"))

        def body(self):
            """The request's body (empty without a valid Content-Length)."""
            n = self.headers.get("Content-Length") or "0"
            return self.rfile.read(int(n)) if n.isdigit() else b""

        def read_request(self):
            """The query and max_tokens of a /v1/rag body, or None after answering a 400."""
            try:
                req = json.loads(self.body() or b"null")
            except ValueError:
                req = None
            query = req.get("query") if isinstance(req, dict) else None
            if self.path == CHAT_ROUTE and isinstance(req, dict):
                # An OpenAI chat request: the last user message is the query.
                users = [m.get("content") for m in req.get("messages") or []
                         if isinstance(m, dict) and m.get("role") == "user"]
                query = users[-1] if users else None
            max_tokens = req.get("max_tokens", 64) if isinstance(req, dict) else None
            if not isinstance(query, str) or not query.strip():
                self.reply(400, error_body(400, "the body must be JSON with a non-empty \"query\""))
                return None
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
                self.reply(400, error_body(400, "max_tokens must be an integer >= 1"))
                return None
            return query, max_tokens

        def do_POST(self):
            if self.path == "/admin/lock":
                # {"ms": N}: from now on every request holds the global lock for N ms.
                n = int(self.headers.get("Content-Length") or 0)
                try:
                    ms = float(json.loads(self.rfile.read(n))["ms"])
                except (ValueError, KeyError, TypeError):
                    self.reply(400, error_body(400, 'give {"ms": N}'))
                    return
                args.lock_ms = max(ms, 0.0)
                self.reply(200, json.dumps({"lock_ms": args.lock_ms}))
                return
            if self.path not in ("/v1/rag", CHAT_ROUTE):
                self.body()
                self.reply(404, error_body(404, "no such route"))
                return
            parsed = self.read_request()
            if parsed is None:
                return
            self.count("requests")
            query, max_tokens = parsed
            timings = {}
            t = time.monotonic()
            if args.lock_ms > 0:
                with gateway_lock:
                    time.sleep(args.lock_ms / 1000.0)
            timings["lock"] = time.monotonic() - t
            try:
                docs = retrieve(up, args, query, timings)
                resp = up.post("chat", "/v1/chat/completions", chat_body(args, query, docs, max_tokens))
                if resp.status != 200:
                    body = resp.read()[:300].decode(errors="replace")
                    raise UpstreamError("chat", "HTTP %d: %s" % (resp.status, body))
            except UpstreamError as e:
                self.count("errors")
                self.reply(502, error_body(502, str(e)))
                return
            self.relay(resp, timings)

        def relay(self, resp, timings):
            """Sends the chat's answer on as it arrives, in chunked encoding."""
            self.send_response(200)
            self.send_header("Content-Type", resp.getheader("Content-Type", "text/event-stream"))
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Server-Timing", ", ".join(
                "%s;dur=%.3f" % (k, v * 1e3) for k, v in timings.items()))
            self.end_headers()
            try:
                while True:
                    data = resp.read1(65536)
                    if not data:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (OSError, http.client.HTTPException):
                # The client or the chat upstream went away mid-answer: end both connections
                # (the client sees a truncated body, never a clean end).
                self.count("errors")
                up.drop("chat")
                self.close_connection = True

    return Handler


def main():
    ap = argparse.ArgumentParser(description="A server-orchestrated RAG gateway for tests.")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    for stage in STAGES:
        ap.add_argument("--" + stage, required=True, metavar="URL", help="base URL of the %s service" % stage)
    ap.add_argument("--model", default="inferscope-sim")
    ap.add_argument("--top-k", type=int, default=8, help="hits asked of the vector search")
    ap.add_argument("--top-n", type=int, default=3, help="documents kept by the re-ranker")
    ap.add_argument("--lock-ms", type=float, default=0.0, help="global lock held per request, ms")
    ap.add_argument("--timeout", type=float, default=60.0, help="upstream socket timeout, s")
    args = ap.parse_args()
    up = Upstreams({s: getattr(args, s) for s in STAGES}, args.timeout)
    stats = {"requests": 0, "errors": 0}
    handler = make_handler(args, up, stats, threading.Lock(), threading.Lock())
    ThreadingHTTPServer.request_queue_size = 1024
    server = ThreadingHTTPServer((args.host, args.port), handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
