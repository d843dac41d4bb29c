"""An external load generator for the node daemon's e2e test: plain `http.client` streams chat
completions (OpenAI API, `stream: true`) open-loop at a fixed rate per phase and marks each phase
on the daemon's control API (POST /api/v1/marks), as a k6 or guidellm run would. With --vector it
sends vector searches (POST /v1/vector/search) instead, and --event PHASE:SECONDS:PATH posts to
PATH that many seconds into the phase (an operator's index rebuild).

The stream is read in large chunks and not parsed: a client that spends its CPU decoding
thousands of events per second on a small machine reads its sockets late, and the server's
side then (rightly) sees the delay in the TCP round-trip time.

usage: stream_marks.py TARGET_URL API_URL PHASE:SECONDS:RATE [PHASE:SECONDS:RATE ...]
       [--input-words N] [--output-tokens N] [--vector] [--event PHASE:SECONDS:PATH]

Prints one line per phase: `phase NAME sent N ok N failed N`. Exits 1 when a mark is refused
or when no request of a phase succeeded.
"""

import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
import urllib.request


def mark(api_url, phase):
    body = json.dumps({"phase": phase, "source": "python-http-client"}).encode()
    req = urllib.request.Request(
        api_url.rstrip("/") + "/api/v1/marks",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        if resp.status != 201:
            sys.exit(f"mark {phase}: HTTP {resp.status}")


def post(target, path):
    u = urllib.parse.urlsplit(target)
    conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=30)
    conn.request("POST", path, body=b"{}", headers={"Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    print(f"event POST {path}: HTTP {status}", flush=True)


def search(target, text, counts, lock):
    ok = False
    try:
        u = urllib.parse.urlsplit(target)
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
        conn.request("POST", "/v1/vector/search", body=json.dumps({"text": text, "top_k": 10}),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        ok = resp.status == 200 and b"results" in resp.read()
        conn.close()
    except Exception as e:
        print(f"search failed: {e}", file=sys.stderr)
    with lock:
        counts["ok" if ok else "failed"] += 1


def one(target, prompt, output_tokens, counts, lock):
    ok = False
    try:
        u = urllib.parse.urlsplit(target)
        conn = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
        body = json.dumps({
            "model": "inferscope-sim",
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": output_tokens,
            "stream": True,
        })
        conn.request("POST", "/v1/chat/completions", body=body,
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        tail = b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            tail = (tail + chunk)[-64:]
        ok = resp.status == 200 and b"[DONE]" in tail
        conn.close()
    except Exception as e:  # counted, and the run goes on: a load generator under pressure
        print(f"request failed: {e}", file=sys.stderr)
    with lock:
        counts["ok" if ok else "failed"] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("api")
    ap.add_argument("phases", nargs="+")
    ap.add_argument("--input-words", type=int, default=128)
    ap.add_argument("--output-tokens", type=int, default=384)
    ap.add_argument("--vector", action="store_true")
    ap.add_argument("--event", action="append", default=[])
    a = ap.parse_args()
    events = [e.split(":", 2) for e in a.event]
    words = "kernel queue cache token batch stream memory scheduler".split()
    threads = []
    for spec in a.phases:
        name, secs, rate = spec.split(":")
        secs, rate = float(secs), float(rate)
        mark(a.api, name)
        counts = {"ok": 0, "failed": 0}
        lock = threading.Lock()
        start = time.monotonic()
        sent = 0
        for phase, at, path in events:
            if phase == name:
                threading.Timer(float(at), post, args=(a.target, path)).start()
        # Open loop: request n is due at start + n / rate, whatever the earlier ones do.
        while True:
            due = start + sent / rate
            if due >= start + secs:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            prompt = " ".join(words[(sent + i) % len(words)] for i in range(a.input_words))
            if a.vector:
                job = (search, (a.target, f"{prompt[:40]} {sent}", counts, lock))
            else:
                job = (one, (a.target, prompt, a.output_tokens, counts, lock))
            t = threading.Thread(target=job[0], args=job[1], daemon=True)
            t.start()
            threads.append((name, counts, t))
            sent += 1
        print(f"phase {name} sent {sent}", flush=True)
    for _, _, t in threads:
        t.join(timeout=90)
    seen = set()
    for name, counts, _ in threads:
        if name in seen:
            continue
        seen.add(name)
        print(f"phase {name} ok {counts['ok']} failed {counts['failed']}", flush=True)
        if counts["ok"] == 0:
            sys.exit(f"phase {name}: no request succeeded")


if __name__ == "__main__":
    main()
