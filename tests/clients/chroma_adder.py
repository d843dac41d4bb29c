"""Adds vectors to a Chroma collection in batches, as an ingest job would while searches run
(Chroma updates its HNSW index as they arrive): the index work a vector service does under
its searches, on a server that exports no metric of it.

usage: chroma_adder.py URL COLLECTION DIMENSIONS COUNT [--seeded N] [--after SECONDS]

With --seeded N it first waits until the collection exists with N vectors (a load generator
seeding it), then --after SECONDS more.

Prints `added N in S s` when done.
"""

import argparse
import random
import sys
import time
from urllib.parse import urlparse

import chromadb


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("collection")
    p.add_argument("dimensions", type=int)
    p.add_argument("count", type=int)
    p.add_argument("--seeded", type=int, default=0)
    p.add_argument("--after", type=float, default=0.0)
    a = p.parse_args()
    u = urlparse(a.url)
    client = chromadb.HttpClient(host=u.hostname, port=u.port)
    deadline = time.time() + 120
    while True:
        try:
            col = client.get_collection(a.collection)
            if col.count() >= a.seeded:
                break
        except Exception:  # not created yet
            pass
        if time.time() > deadline:
            sys.exit(f"{a.collection} never held {a.seeded} vectors")
        time.sleep(0.2)
    time.sleep(a.after)
    rng = random.Random(7)
    t0 = time.time()
    for b in range(0, a.count, 1000):
        ids = [f"ingest-{b + i}" for i in range(1000)]
        col.add(
            ids=ids,
            embeddings=[[rng.random() for _ in range(a.dimensions)] for _ in ids],
        )
    print(f"added {a.count} in {time.time() - t0:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
