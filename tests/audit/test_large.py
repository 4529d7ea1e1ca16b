"""A clean database of 100,000 entries verifies (benchmarks/bench_verify.py times it against SHA-256)."""

from __future__ import annotations

import hashlib
import importlib.util
import time
from pathlib import Path

from helpers.paths import ROOT

from mnemo.audit import load_private_key, public_key_bytes, verify_db

BENCH = ROOT / "benchmarks" / "bench_verify.py"


def test_100k_entries_verify(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_verify", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    db = tmp_path / "big.mnemo.db"
    n = 100_000
    raws, _digests = bench.build_log(db, n)
    head = (n - 1, hashlib.sha256(raws[-1]).hexdigest())
    seen: list[int] = []
    t0 = time.perf_counter()
    report = verify_db(db, pubkey=public_key_bytes(load_private_key(bench.SEED)), expect_head=head,
                       progress=lambda done, total: seen.append(done))
    elapsed = time.perf_counter() - t0
    assert report.ok, report.problems[:5]
    assert (report.entries, report.head_seq, report.head_hash) == (n, head[0], head[1])
    assert report.checkpoints == 100
    assert seen[-1] == db.stat().st_size and len(seen) > 10  # read in chunks, with progress
    print(f"verified {n:,} entries in {elapsed:.2f} s ({n / elapsed:,.0f} entries/s)")
