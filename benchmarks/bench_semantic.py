"""Semantic recall's speed, side by side with lexical recall on the same database (docs/RECALL.md §6):

- recall p50 in each mode over N records of the stdlib corpus (benchmarks/bench_recall.py's: the
  docstrings and comments of this Python's standard library, copied to reach N), each query two words
  of the corpus; the ratio of each mode's p50 to lexical recall's;
- the memory one vector takes (the float32 matrix and its columns, per record);
- the local embedder's throughput on the corpus's texts (texts/s, one process);
- remember's rate with an embedder against without: on a log file a write embeds nothing (the vectors
  are made when semantic recall next runs), so the rate compared is remember's plus the catch-up of
  the first semantic recall after it, per record.

With `--dsn DSN` (a PostgreSQL server; a database of its own is made there and dropped at the end), the
same records are written to PostgreSQL too, and a second table sets side by side, per mode: recall's p50
on the log file, on PostgreSQL (the client's vector cache warm: each recall reads only what changed), and
a plain numpy scan of the same vectors (one einsum and a top-10 selection, nothing read, checked or
fused: the floor); with the first recall on PostgreSQL (which reads every vector into the cache) and a
recall after another client's remember (which reads one). On each backend, `verify` with the vectors:
the default (each vector's place, length and values, and 32 embedded again) against
`verify(embeddings="recompute")` (every vector embedded again, as verify did before).

Run: `python -m benchmarks.bench_semantic [--records N] [--queries Q] [--dsn DSN]` (default 100,000
records; 1,000,000 takes about 1 GB for the vectors and some minutes to build). Needs the `semantic`
extra. Ratios, never timed assertions: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from benchmarks.bench_recall import stdlib_corpus, words_of
from mnemo import MnemoClient
from mnemo.recall.embedding import check_embedder, embed

SEED = 36
AGENT = "bench"
BATCH = 2000  # records per transaction while the database is built


def texts(n: int) -> list[str]:
    base = stdlib_corpus()
    return [base[i % len(base)] if i < len(base) else f"{base[i % len(base)]} (copy {i // len(base)})"
            for i in range(n)]


def queries(corpus: list[str], count: int) -> list[str]:
    rng = random.Random(SEED)
    out = []
    while len(out) < count:
        words = [w for w in words_of(rng.choice(corpus)) if len(w) > 3 and not w.isdigit()]
        if len(words) >= 2:
            out.append(" ".join(rng.sample(words, 2)))
    return out


@contextlib.contextmanager
def postgres_database(dsn: str) -> Iterator[str]:
    """A database of its own on the server `dsn` names, as a URI, dropped at the end."""
    import psycopg  # noqa: PLC0415 - the optional postgres extra, needed with --dsn only
    from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: PLC0415 - as above

    dbname = f"mnemo_bench_semantic_{secrets.token_hex(3)}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        params = conninfo_to_dict(dsn)
        params["dbname"] = dbname
        p = conninfo_to_dict(make_conninfo("", **params))
        auth = f"{p.get('user', '')}@" if p.get("user") else ""
        yield f"postgresql://{auth}{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{dbname}"
    finally:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def numpy_p50_ms(vectors: Any, embedder: Any, qs: list[str]) -> float:
    """The floor: the query embedded, one einsum over `vectors`, the best 10 selected and ordered."""
    times = []
    for q in qs:
        t0 = time.perf_counter()
        query = embed(embedder, [q])[0]
        cosines = np.einsum("ij,j->i", vectors, query)
        best = np.argpartition(cosines, len(cosines) - 10)[-10:]
        best[np.argsort(-cosines[best])].tolist()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def verify_seconds(client: MnemoClient) -> tuple[float, float]:
    """verify's seconds by default and with every vector embedded again."""
    t0 = time.perf_counter()
    assert client.verify().ok
    t1 = time.perf_counter()
    assert client.verify(embeddings="recompute").ok
    return t1 - t0, time.perf_counter() - t1


def postgres_rows(
    dsn: str, corpus: list[str], qs: list[str], embedder: Any
) -> tuple[dict[str, float], float, float, tuple[float, float]]:
    """Recall's p50 per mode on PostgreSQL (cache warm), the first recall's ms (every vector read), a
    recall's after another client's remember (one read), and verify's seconds (verify_seconds)."""
    with postgres_database(dsn) as url:
        sys.stderr.write(f"building {len(corpus):,} records on PostgreSQL...\n")
        build(url, corpus)
        with MnemoClient(url, AGENT, embedder=embedder) as client:
            client.recall(qs[0], mode="semantic")  # the catch-up: every record embedded and stored
        with MnemoClient(url, AGENT, embedder=embedder) as client, MnemoClient(url, AGENT, embedder=embedder) as other:
            t0 = time.perf_counter()
            client.recall(qs[0], mode="hybrid")
            first = (time.perf_counter() - t0) * 1000
            rows = {mode: p50_ms(client, qs, mode) for mode in ("lexical", "semantic", "hybrid")}
            after = []
            for q in qs[:20]:
                other.remember(f"{q} (a note written by another client)")
                t0 = time.perf_counter()
                client.recall(q, mode="hybrid")
                after.append(time.perf_counter() - t0)
            checked = verify_seconds(client)
    return rows, first, statistics.median(after) * 1000, checked


def build(path: str, corpus: list[str]) -> float:
    """Write the corpus (no embedder); the seconds it took."""
    t0 = time.perf_counter()
    with MnemoClient(path, AGENT, durability="none") as client:
        for start in range(0, len(corpus), BATCH):
            with client.transaction() as t:
                for text in corpus[start:start + BATCH]:
                    t.remember(text)
    return time.perf_counter() - t0


def p50_ms(client: MnemoClient, qs: list[str], mode: str) -> float:
    times = []
    for q in qs:
        t0 = time.perf_counter()
        client.recall(q, mode=mode, limit=10)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--dsn", help="a PostgreSQL server: measure recall there too, beside the file's and numpy's")
    args = parser.parse_args(argv)
    log = sys.stderr.write
    corpus = texts(args.records)
    qs = queries(corpus[: len(stdlib_corpus())], args.queries)
    embedder = check_embedder("local")
    sample = corpus[: min(20_000, len(corpus))]
    t0 = time.perf_counter()
    embed(embedder, sample)
    throughput = len(sample) / (time.perf_counter() - t0)
    with tempfile.TemporaryDirectory(dir=os.environ.get("MNEMO_BENCH_DIR")) as tmp:
        path = os.path.join(tmp, "semantic.mnemo.db")
        log(f"building {args.records:,} records...\n")
        written = build(path, corpus)
        with MnemoClient(path, AGENT, embedder=embedder) as client:
            t0 = time.perf_counter()
            client.recall(qs[0], mode="semantic")  # the catch-up: every record embedded
            catch_up = time.perf_counter() - t0
            client.recall(qs[0], mode="lexical")  # the text index too
            vectors = client._store.index.vectors  # type: ignore[attr-defined]
            per_vector = vectors.nbytes() / max(1, len(vectors.row_slot))
            rows = {mode: p50_ms(client, qs, mode) for mode in ("lexical", "semantic", "hybrid")}
            floor = numpy_p50_ms(vectors.vectors[:vectors.used].copy(), embedder, qs)
            checked = verify_seconds(client)
    pg = postgres_rows(args.dsn, corpus, qs, embedder) if args.dsn else None
    print(f"semantic recall, {args.records:,} records of the stdlib corpus, {len(qs)} two-word queries, "
          f"embedder {embedder.name} ({embedder.dimension} dimensions), Python {sys.version.split()[0]}")
    print()
    print("| measure | value | ratio to lexical recall |")
    print("|---|---|---|")
    for mode, ms in rows.items():
        print(f"| recall p50, {mode} | {ms:.1f} ms | {ms / rows['lexical']:.2f} |")
    print(f"| memory per vector | {per_vector:,.0f} bytes | |")
    print(f"| local embedder throughput | {throughput:,.0f} texts/s | |")
    without = args.records / written
    with_embedder = args.records / (written + catch_up)
    print(f"| remember, without an embedder | {without:,.0f} records/s | |")
    print(f"| remember + first semantic recall's catch-up, with the local embedder | {with_embedder:,.0f} records/s "
          f"| {with_embedder / without:.2f} of without |")
    print()
    print(f"| recall p50 at {args.records:,} records | log file | PostgreSQL | numpy scan (floor) |")
    print("|---|---|---|---|")
    for mode, ms in rows.items():
        on_pg = f"{pg[0][mode]:.1f} ms ({pg[0][mode] / ms:.2f}x file)" if pg else "(--dsn)"
        numpy_cell = f"{floor:.1f} ms" if mode != "lexical" else "—"
        print(f"| {mode} | {ms:.1f} ms | {on_pg} | {numpy_cell} |")
    if pg:
        print(f"| hybrid, the first recall of a client (every vector read into its cache) | | {pg[1]:,.0f} ms | |")
        print(f"| hybrid, after another client's remember (that one vector read) | | {pg[2]:.1f} ms | |")
    print()
    print(f"| verify at {args.records:,} records, with the vectors | default (32 embedded again) | "
          "embeddings=\"recompute\" (every one) | ratio |")
    print("|---|---|---|---|")
    for label, (check, recompute) in [("log file", checked), *([("PostgreSQL", pg[3])] if pg else [])]:
        print(f"| {label} | {check:.1f} s | {recompute:.1f} s | {recompute / check:.1f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
