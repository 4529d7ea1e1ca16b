"""What the transparency tree costs: on every `remember`, and for proofs over a million entries.

    python benchmarks/bench_transparency.py [--records N] [--reps R] [--entries M] [--dir DIR]

1. `remember`, one at a time, `durability="none"` (so that CPU, not the disk, is measured), on a fresh
   database, with and without the work a storage backend does per committed frame once the tree is
   wired in: `TreeState.add` (the leaf hash H(0x00 || entry), a CompactRange append, a LeafCache append,
   written to DB.leaves every 2,048 leaves), called from a wrapped `Store._commit`. Both variants run
   interleaved, R times; medians of process CPU time per record.
2. Over M synthetic leaves (default 1,000,000; SHA-256 of the index, not real entries: the tree only ever
   sees 32-byte leaf hashes), in a LeafCache file: filling the cache, the first proof (which hashes the
   whole tree once and keeps its subtrees), then checked inclusion and consistency proofs from
   CacheProver at random sizes and indexes, and verifying them.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mnemo import MnemoClient  # noqa: E402
from mnemo.storage.engine import Batch, Store  # noqa: E402
from mnemo.transparency.backend import TreeState  # noqa: E402
from mnemo.transparency.leaves import LeafCache  # noqa: E402
from mnemo.transparency.log import read_tree  # noqa: E402
from mnemo.transparency.prover import CacheProver  # noqa: E402
from mnemo.transparency.tree import CompactRange, verify_consistency, verify_inclusion  # noqa: E402

CONTENT = ("The user prefers concise answers with metric units and ISO dates; they review pull requests in the "
           "morning and asked the assistant to remember the names of the services that page them at night. ") * 2


def _remember_cpu(directory: Path, n: int, with_tree: bool, tag: str) -> float:
    """CPU seconds per remember over n records on a fresh database."""
    db = directory / f"{tag}.db"
    original = Store._commit
    client = MnemoClient(db, "bench", durability="none")
    tree: TreeState | None = None
    try:
        if with_tree:
            tree = TreeState(db, client._store.db_id)
            tree.add([read_tree(db, keep=[0]).entries[0]], 0)  # the genesis, written at creation
            t = tree

            def commit(self: Store, batch: Batch) -> int:
                end = original(self, batch)
                staged = batch.staged
                t.add([s.entry.raw for s in staged], staged[0].entry.seq)
                return end

            Store._commit = commit  # type: ignore[method-assign]
        for i in range(20):  # warm-up
            client.remember(f"warm {i}", tags=["w"])
        t0 = time.process_time()
        for i in range(n):
            client.remember(CONTENT, tags=[f"k{i % 7}", f"t{i % 50}"], metadata={"i": i, "src": "bench"})
        cpu = time.process_time() - t0
        if tree is not None:
            assert tree.size == client._store.index.head_seq + 1 and tree.cache_ok
    finally:
        Store._commit = original  # type: ignore[method-assign]
        client.close()
        if tree is not None:
            tree.close()
    for suffix in ("", ".snap", ".lock", ".leaves"):
        with contextlib.suppress(OSError):
            os.unlink(str(db) + suffix)
    return cpu / n


def bench_remember(directory: Path, n: int, reps: int) -> list[tuple[str, str]]:
    without, with_tree = [], []
    for r in range(reps):
        without.append(_remember_cpu(directory, n, False, f"plain{r}"))
        with_tree.append(_remember_cpu(directory, n, True, f"tree{r}"))
    a, b = statistics.median(without), statistics.median(with_tree)
    # the tree work alone, on entry-sized byte strings, one frame of one entry at a time
    raws = [os.urandom(170) for _ in range(20_000)]
    tree = TreeState(directory / "alone.db", bytes(16))
    t0 = time.process_time()
    for i, raw in enumerate(raws):
        tree.add([raw], i)
    alone = (time.process_time() - t0) / len(raws)
    tree.close()
    return [
        ("remember, CPU per record, without the tree", f"{a * 1e6:.1f} µs"),
        ("remember, CPU per record, with leaf hash + compact range + cache append", f"{b * 1e6:.1f} µs"),
        ("difference (median of medians)", f"{(b - a) * 1e6:+.1f} µs ({(b - a) / a * 100:+.1f}%)"),
        ("TreeState.add alone, per one-entry frame (leaf hash, range, cache)", f"{alone * 1e6:.2f} µs "
         f"({alone / a * 100:.1f}% of a remember)"),
    ]


def _time(fn: Callable[[], Any], k: int = 1) -> float:
    t0 = time.perf_counter()
    for _ in range(k):
        fn()
    return (time.perf_counter() - t0) / k


def bench_million(directory: Path, m: int, seed: int = 1) -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    leaves = [hashlib.sha256(i.to_bytes(8, "big")).digest() for i in range(m)]
    cr = CompactRange()
    t = _time(lambda: cr.extend(leaves))
    rows.append((f"compact range: {m:,} appends", f"{t:.2f} s ({t / m * 1e6:.2f} µs each)"))
    path = directory / "million.leaves"
    with LeafCache.open(path, bytes(16)) as cache:
        blob = b"".join(leaves)
        step = 1000
        t = _time(lambda: [cache.append(blob[i * 32:(i + step) * 32], at=i) for i in range(0, m, step)])
        size_mb = os.path.getsize(path) / 1e6
        rows.append((f"cache: {m:,} leaves appended in frames of {step:,}", f"{t:.2f} s ({size_mb:.0f} MB)"))
        head = cr.head()
        t = _time(lambda: cache.validate(head))
        rows.append(("cache: validate against the head (first use: hashes the whole tree once)", f"{t:.2f} s"))
        prover = CacheProver(cache, head)
        rng = random.Random(seed)
        k = 200
        idx = [rng.randrange(m) for _ in range(k)]
        sizes = [rng.randrange(i + 1, m + 1) for i in idx]
        # CacheProver.inclusion takes the entry's bytes; the leaves are synthetic, so the paths are taken
        # from the cache directly and checked against roots the prover proved consistent with the head
        paths: list[tuple[bytes, ...]] = []

        def make_paths() -> None:
            for i, s in zip(idx, sizes, strict=True):
                paths.append(tuple(cache.inclusion_path(i, s)))

        t = _time(make_paths) / k
        rows.append((f"inclusion path at a random size and index (warm), {k} proofs", f"{t * 1e6:.0f} µs each"))
        roots = {s: prover.root_at(s) for s in sizes}
        t = _time(lambda: [prover.root_at(s) for s in sizes]) / k
        rows.append(("root at a random size, checked by a consistency proof to the head", f"{t * 1e6:.0f} µs each"))
        t = _time(lambda: [verify_inclusion(leaves[i], i, s, p, roots[s])
                           for i, s, p in zip(idx, sizes, paths, strict=True)]) / k
        ok = all(verify_inclusion(leaves[i], i, s, p, roots[s]) for i, s, p in zip(idx, sizes, paths, strict=True))
        rows.append(("verify an inclusion path", f"{t * 1e6:.0f} µs each (all ok: {ok})"))
        olds = [rng.randrange(1, s + 1) for s in sizes]
        proofs = []

        def make_consistency() -> None:
            for o, s in zip(olds, sizes, strict=True):
                proofs.append(prover.consistency(o, s))

        t = _time(make_consistency) / k
        rows.append((f"checked consistency proof between random sizes, {k} proofs", f"{t * 1e6:.0f} µs each"))
        t = _time(lambda: [verify_consistency(c.old_size, c.new_size, c.old_root, c.new_root, c.proof)
                           for c in proofs]) / k
        rows.append(("verify a consistency proof", f"{t * 1e6:.0f} µs each"))
        kept = sum(len(level) for level in cache._levels)
        rows.append(("subtree hashes kept in memory after that", f"{kept / 1e6:.1f} MB ({kept / m:.1f} B per leaf)"))
    # the same first proof on a fresh handle: what `mnemo prove` pays after its one pass over the log
    with LeafCache.open(path, bytes(16), readonly=True) as cold:
        t = _time(lambda: cold.inclusion_path(m // 3, m))
        rows.append(("first inclusion path on a fresh handle (hashes the tree)", f"{t:.2f} s"))
    os.unlink(path)
    return rows


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=3000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        directory = Path(d)
        rows = bench_remember(directory, args.records, args.reps)
        rows += bench_million(directory, args.entries)
    print("| measurement | result |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
