"""What the transparency tree costs: on every `remember`, and for proofs over a million entries.

    python benchmarks/bench_transparency.py [--records N] [--reps R] [--entries M] [--dir DIR]
    (defaults: N = 500 records per block, R = 20 pairs of blocks, M = 1,000,000)

1. `remember`, one at a time, `durability="none"` (so that CPU, not the disk, is measured), with and
   without the work a storage backend does per committed frame once the tree is wired in:
   `TreeState.add` (the leaf hash H(0x00 || entry), a CompactRange append, a LeafCache append, written to
   DB.leaves every 2,048 leaves), called from a wrapped `Store._commit`. One client runs R pairs of blocks
   of N records, alternately with and without (each first every other time): process CPU time per
   record, the medians, and the median difference within a pair. `TreeState.add` is also timed alone,
   on 20,000 one-entry frames.
2. Over M synthetic leaves (default 1,000,000; SHA-256 of the index, not real entries: the tree only ever
   sees 32-byte leaf hashes), in a LeafCache file: filling the cache, the first proof (which hashes the
   whole tree once and keeps its subtrees), then checked inclusion and consistency proofs from
   CacheProver at random sizes and indexes, and verifying them.
Prints a Markdown table.
"""

from __future__ import annotations

import argparse
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
from mnemo.chain.tree import CompactRange, verify_consistency, verify_inclusion  # noqa: E402
from mnemo.storage.batch import Batch  # noqa: E402
from mnemo.storage.file.leaves import LeafCache  # noqa: E402
from mnemo.storage.file.prover import CacheProver  # noqa: E402
from mnemo.storage.file.store import FileStore as Store  # noqa: E402
from mnemo.storage.file.tree_state import TreeState  # noqa: E402
from mnemo.transparency.log import read_tree  # noqa: E402

CONTENT = ("The user prefers concise answers with metric units and ISO dates; they review pull requests in the "
           "morning and asked the assistant to remember the names of the services that page them at night. ") * 2


def bench_remember(directory: Path, n: int, reps: int) -> list[tuple[str, str]]:
    """One client, `reps` pairs of blocks of n remembers, alternately with and without TreeState.add in
    the commit path (the first of each pair swapped every other time); CPU time per record per block."""
    db = directory / "remember.db"
    original = Store._commit
    client = MnemoClient(db, "bench", durability="none")
    tree = TreeState(db, client._store.db_id)
    tree.add([read_tree(db, keep=[0]).entries[0]], 0)  # the genesis, written at creation
    on = [False]

    def commit(self: Store, batch: Batch) -> int:
        end = original(self, batch)
        if on[0]:
            staged = batch.staged
            tree.add([s.entry.raw for s in staged], tree.size)  # (a tree of the timed commits only)
        return end

    Store._commit = commit  # type: ignore[method-assign]
    samples: dict[bool, list[float]] = {False: [], True: []}
    try:
        for i in range(50):  # warm-up
            client.remember(f"warm {i}", tags=["w"])
        k = 0
        for r in range(reps):
            for with_tree in (r % 2 == 1, r % 2 == 0):
                on[0] = with_tree
                t0 = time.process_time()
                for _ in range(n):
                    k += 1
                    client.remember(CONTENT, tags=[f"k{k % 7}", f"t{k % 50}"], metadata={"i": k, "src": "bench"})
                samples[with_tree].append((time.process_time() - t0) / n)
    finally:
        Store._commit = original  # type: ignore[method-assign]
        client.close()
        tree.close()
    a, b = statistics.median(samples[False]), statistics.median(samples[True])
    pairs = statistics.median(y - x for x, y in zip(samples[False], samples[True], strict=True))
    # TreeState.add alone, on entry-sized byte strings, one frame of one entry at a time
    raws = [os.urandom(170) for _ in range(20_000)]
    alone_tree = TreeState(directory / "alone.db", bytes(16))
    t0 = time.process_time()
    for i, raw in enumerate(raws):
        alone_tree.add([raw], i)
    alone = (time.process_time() - t0) / len(raws)
    alone_tree.close()
    return [
        (f"remember, CPU per record, without the tree (median of {reps} blocks of {n})", f"{a * 1e6:.1f} µs"),
        (f"remember, CPU per record, with TreeState.add per commit (median of {reps} blocks)", f"{b * 1e6:.1f} µs"),
        ("difference, median over adjacent pairs of blocks", f"{pairs * 1e6:+.1f} µs ({pairs / a * 100:+.1f}%)"),
        ("TreeState.add alone, per one-entry frame (leaf hash, range, cache)",
         f"{alone * 1e6:.2f} µs ({alone / a * 100:.1f}% of a remember)"),
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

        def fill() -> None:
            for i in range(0, m, step):
                cache.append(blob[i * 32:(i + step) * 32], at=i)

        t = _time(fill)
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
    ap.add_argument("--records", type=int, default=500)
    ap.add_argument("--reps", type=int, default=20)
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
