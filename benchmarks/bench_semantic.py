"""Semantic recall's speed, side by side with lexical recall on the same database (docs/RECALL.md §6):

- recall p50 in each mode over N records of the stdlib corpus (benchmarks/bench_recall.py's: the
  docstrings and comments of this Python's standard library, copied to reach N), each query two words
  of the corpus; the ratio of each mode's p50 to lexical recall's;
- the memory one vector takes (the float32 matrix and its columns, per record);
- the local embedder's throughput on the corpus's texts (texts/s, one process);
- remember's rate with an embedder against without: on a log file a write embeds nothing (the vectors
  are made when semantic recall next runs), so the rate compared is remember's plus the catch-up of
  the first semantic recall after it, per record.

Run: `python -m benchmarks.bench_semantic [--records N] [--queries Q]` (default 100,000 records; 1,000,000
takes about 1 GB for the vectors and some minutes to build). Needs the `semantic` extra. Ratios, never
timed assertions: nothing here fails on a slow machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
