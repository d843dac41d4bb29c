#!/usr/bin/env python3
"""A minimal OpenAI-compatible chat server that exports no /metrics, for tests that must not
depend on the project's own simulator or on vLLM's metric names.

It admits at most --slots requests at a time (a semaphore, the way a small worker pool or an
admission limit does); the others wait inside the server, after their request was read, with
no CPU spent. With --sync it serves one connection at a time over HTTP/1.0 (a synchronous
worker): the other requests wait unread, in the listen backlog. An admitted request "generates" its tokens with --token-ms of sleep each, so
latency rises with queueing and not with CPU. Streams are Server-Sent Events over HTTP/1.1
chunked encoding, one write per token, keep-alive. Like Python's http.server it leaves Nagle's
algorithm on (a small write waits for the ACK of the one before: with the client's delayed ACK
the first token can wait ~40 ms); --nodelay sets TCP_NODELAY, as asyncio servers (uvicorn, so
vLLM) do.

With --cuda LIB the engine holds device memory through a CUDA driver library (the tests give it
a stand-in of --device-mib, tests/engine/libcuda_standin.c): --weights-mib once at start, then each request's KV
for its prompt and answer, --kib-per-token a token. --alloc as-you-go allocates per request as
an eager PyTorch engine's caching allocator does (free blocks are kept and reused; on
out-of-memory it synchronizes, frees every kept block and retries once, and fails the request
with a 500 when that fails too); --alloc up-front reserves the rest of the device as one pool at
start, as vLLM and SGLang do, and a request waits until the pool has room for it.

    openai_nometrics.py --listen 127.0.0.1:8000 --slots 2 --token-ms 4
"""

import argparse
import ctypes
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--listen", default="127.0.0.1:8000")
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--token-ms", type=float, default=4.0)
    ap.add_argument("--model", default="nometrics")
    ap.add_argument("--sync", action="store_true")
    ap.add_argument("--nodelay", action="store_true")
    ap.add_argument("--cuda")
    ap.add_argument("--alloc", choices=["as-you-go", "up-front"], default="as-you-go")
    ap.add_argument("--device-mib", type=int, default=1024)
    ap.add_argument("--weights-mib", type=int, default=0)
    ap.add_argument("--kib-per-token", type=int, default=0)
    args = ap.parse_args()
    slots = threading.Semaphore(args.slots)
    device = Device(args) if args.cuda else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0" if args.sync else "HTTP/1.1"
        disable_nagle_algorithm = args.nodelay

        def log_message(self, *_):
            pass

        def reply(self, status, body, ctype="application/json"):
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/v1/models":
                self.reply(200, json.dumps({"object": "list", "data": [{"id": args.model, "object": "model"}]}))
            else:
                # No /metrics: the point of this server.
                self.reply(404, json.dumps({"error": {"message": "not found"}}))

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            try:
                req = json.loads(self.rfile.read(n) or b"{}")
            except ValueError:
                self.reply(400, json.dumps({"error": {"message": "bad json"}}))
                return
            if self.path != "/v1/chat/completions":
                self.reply(404, json.dumps({"error": {"message": "not found"}}))
                return
            tokens = max(1, min(int(req.get("max_tokens") or 16), 4096))
            with slots:
                kv = device.take(prompt_tokens(req) + tokens) if device else ()
                if kv is None:
                    self.reply(500, json.dumps({"error": {"message": "CUDA out of memory"}}))
                    return
                try:
                    self.answer(req, tokens)
                finally:
                    if kv:
                        device.give(kv)

        def answer(self, req, tokens):
            if req.get("stream"):
                self.stream(tokens)
            else:
                time.sleep(tokens * args.token_ms / 1000.0)
                self.reply(200, json.dumps(completion(args.model, tokens)))

        def chunk(self, text):
            data = text.encode()
            if args.sync:
                # HTTP/1.0: the body ends when the connection closes.
                self.wfile.write(data)
            else:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

        def stream(self, tokens):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            if not args.sync:
                self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(tokens):
                time.sleep(args.token_ms / 1000.0)
                delta = {"content": "tok "}
                ev = {"id": "c", "object": "chat.completion.chunk", "model": args.model,
                      "choices": [{"index": 0, "delta": delta,
                                   "finish_reason": "length" if i == tokens - 1 else None}]}
                self.chunk("data: %s\n\n" % json.dumps(ev))
            usage = {"id": "c", "object": "chat.completion.chunk", "model": args.model, "choices": [],
                     "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}}
            self.chunk("data: %s\n\ndata: [DONE]\n\n" % json.dumps(usage))
            if not args.sync:
                self.wfile.write(b"0\r\n\r\n")

    host, port = args.listen.rsplit(":", 1)
    base = HTTPServer if args.sync else ThreadingHTTPServer

    class Server(base):
        request_queue_size = 1024
        daemon_threads = True

        def handle_error(self, request, client_address):
            # A client that hangs up mid-answer (a timeout, a fault that drops its segments,
            # a run that ends) is the test's doing: only other errors print a traceback.
            if not isinstance(sys.exc_info()[1], ConnectionError):
                super().handle_error(request, client_address)

    Server((host, int(port)), Handler).serve_forever()


def prompt_tokens(req):
    """The prompt's tokens, a word each."""
    return sum(len(str(m.get("content") or "").split()) for m in req.get("messages") or [])


class Device:
    """Device memory through the CUDA driver API: the weights, then KV per request (see the
    module doc for the two ways of holding it)."""

    def __init__(self, args):
        os.environ["INFERSCOPE_STANDIN_DEVICE_MIB"] = str(args.device_mib)
        self.cu = ctypes.CDLL(args.cuda)
        self.per_token = args.kib_per_token << 10
        self.up_front = args.alloc == "up-front"
        self.lock = threading.Condition()
        self.kept = []  # (bytes, pointer): freed blocks the caching allocator keeps
        if self.alloc(args.weights_mib << 20) is None:
            sys.exit("--weights-mib does not fit the device")
        if self.up_front:
            free, total = ctypes.c_size_t(), ctypes.c_size_t()
            self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
            self.room = free.value
            if self.alloc(self.room) is None:
                sys.exit("the KV pool does not fit the device")

    def alloc(self, n):
        p = ctypes.c_uint64()
        return p.value if self.cu.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(n)) == 0 else None

    def take(self, tokens):
        """A block for `tokens` of KV, (bytes, pointer); None when the device is out of memory."""
        n = tokens * self.per_token
        with self.lock:
            if self.up_front:
                # The pool was reserved at start: wait for a finished request's room.
                self.lock.wait_for(lambda: self.room >= n)
                self.room -= n
                return (n, None)
            fits = [b for b in self.kept if b[0] >= n]
            if fits:
                block = min(fits)
                self.kept.remove(block)
                return block
            p = self.alloc(n)
            if p is None:
                # As PyTorch does on out-of-memory: synchronize, release every kept block, retry.
                self.cu.cuCtxSynchronize_v2(None)
                for _, q in self.kept:
                    self.cu.cuMemFree_v2(ctypes.c_uint64(q))
                self.kept.clear()
                p = self.alloc(n)
            return None if p is None else (n, p)

    def give(self, block):
        with self.lock:
            if self.up_front:
                self.room += block[0]
                self.lock.notify_all()
            else:
                self.kept.append(block)


def completion(model, tokens):
    return {"id": "c", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "tok " * tokens},
                         "finish_reason": "length"}],
            "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}}


if __name__ == "__main__":
    main()
