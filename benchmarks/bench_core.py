"""Core workloads of issues 2 and 8: writes in each durability mode, group commit, transactions, opening
a large database with and without its snapshot, tag queries, verification and index memory.

Each workload runs Mnemo beside its baseline in this process, repetitions interleaved. Opening and
memory are measured in fresh subprocesses (`python -m benchmarks.bench_core --probe-open DB`), so that
neither a warm heap nor memory left over from building the database colours them.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from mnemo import MnemoClient
from mnemo._native import implementation
from mnemo.audit import read_log
from mnemo.chain.codec import decode_put_payload
from mnemo.storage.file import verify as verify_file
from mnemo.storage.file.scan import pure_scan

from .baselines import LmdbStore, RawAppendFile, SqliteStore, lmdb_available, sha256_loop
from .common import (
    AGENT,
    Config,
    RecordSpec,
    Result,
    Target,
    alternate,
    make_record,
    rate_samples,
    settled_rss_bytes,
    source_digest,
)

ROOT = Path(__file__).resolve().parents[1]
SMALL_TAG_GROUPS = 1_000
WARMUP = 20


# -- helpers -----------------------------------------------------------------------------------------


@contextlib.contextmanager
def scratch(cfg: Config) -> Iterator[str]:
    """A fresh directory for one repetition, removed afterwards."""
    path = tempfile.mkdtemp(prefix="rep-", dir=cfg.workdir)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def specs(n: int, tag_groups: int = SMALL_TAG_GROUPS, start: int = 0) -> list[RecordSpec]:
    return [make_record(i, tag_groups) for i in range(start, start + n)]


def _remember_all(client: MnemoClient, recs: list[RecordSpec]) -> None:
    for r in recs:
        client.remember(r.content, tags=r.tags, metadata=r.metadata)


# -- remember ----------------------------------------------------------------------------------------


def _seconds_after_warmup(
    store: Any, recs: list[RecordSpec], write: Callable[[list[RecordSpec]], None],
    warm: Callable[[list[RecordSpec]], None] | None = None,
) -> float:
    """Seconds `write(recs)` takes, after a warm-up of WARMUP other records written one at a time
    (`warm`, else `write`); `store` is closed after."""
    try:
        (warm or write)(specs(WARMUP, start=len(recs)))
        t0 = time.perf_counter()
        write(recs)
        return time.perf_counter() - t0
    finally:
        store.close()


def _one_at_a_time(insert: Callable[[RecordSpec], None]) -> Callable[[list[RecordSpec]], None]:
    def write(recs: list[RecordSpec]) -> None:
        for r in recs:
            insert(r)

    return write


def mnemo_remember_seconds(cfg: Config, durability: str, recs: list[RecordSpec]) -> float:
    """Seconds for len(recs) remember calls, one thread, on a fresh database (after a short warm-up)."""
    with scratch(cfg) as d:
        client = MnemoClient(os.path.join(d, "bench.mnemo.db"), AGENT, durability=durability)
        return _seconds_after_warmup(client, recs, lambda rs: _remember_all(client, rs))


def sqlite_insert_seconds(cfg: Config, synchronous: str, recs: list[RecordSpec]) -> float:
    """Seconds for len(recs) single-insert transactions in SQLite WAL."""
    with scratch(cfg) as d:
        db = SqliteStore(os.path.join(d, "bench.sqlite"), synchronous)
        return _seconds_after_warmup(db, recs, _one_at_a_time(db.insert))


def lmdb_insert_seconds(cfg: Config, sync: bool, recs: list[RecordSpec]) -> float:
    """Seconds for len(recs) single-put write transactions in LMDB (each also puts the record's tags)."""
    with scratch(cfg) as d:
        db = LmdbStore(os.path.join(d, "bench.lmdb"), sync)
        return _seconds_after_warmup(db, recs, _one_at_a_time(db.insert))


def lmdb_tx_seconds(cfg: Config, sync: bool, recs: list[RecordSpec]) -> float:
    """Seconds for one write transaction in LMDB putting all of recs."""
    with scratch(cfg) as d:
        db = LmdbStore(os.path.join(d, "bench.lmdb"), sync)
        return _seconds_after_warmup(db, recs, db.insert_many, warm=_one_at_a_time(db.insert))


def _no_lmdb() -> float:
    return float("nan")


def raw_append_seconds(cfg: Config, recs: list[RecordSpec]) -> float:
    """Seconds for len(recs) appends of a JSON line each, fsynced, to a plain file."""
    with scratch(cfg) as d:
        f = RawAppendFile(os.path.join(d, "bench.jsonl"))
        return _seconds_after_warmup(f, recs, _one_at_a_time(f.append))


def bench_remember(cfg: Config) -> list[Result]:
    fast = specs(cfg.remember_n)
    cfg.log(f"remember: {cfg.remember_n} records x {cfg.reps} reps, durability none / batch, SQLite NORMAL")
    lmdb = lmdb_available()
    none, batch, normal, lm_none = alternate(
        cfg.reps,
        lambda: mnemo_remember_seconds(cfg, "none", fast),
        lambda: mnemo_remember_seconds(cfg, "batch", fast),
        lambda: sqlite_insert_seconds(cfg, "NORMAL", fast),
        (lambda: lmdb_insert_seconds(cfg, False, fast)) if lmdb else _no_lmdb,
    )
    slow = specs(cfg.fsync_n)
    cfg.log(f"remember: {cfg.fsync_n} records x {cfg.reps} reps, durability fsync, SQLite FULL, raw append")
    fsync, full, raw, lm_sync = alternate(
        cfg.reps,
        lambda: mnemo_remember_seconds(cfg, "fsync", slow),
        lambda: sqlite_insert_seconds(cfg, "FULL", slow),
        lambda: raw_append_seconds(cfg, slow),
        (lambda: lmdb_insert_seconds(cfg, True, slow)) if lmdb else _no_lmdb,
    )

    def fast_rate(seconds: list[float]) -> list[float]:
        return rate_samples(cfg.remember_n, seconds)

    def slow_rate(seconds: list[float]) -> list[float]:
        return rate_samples(cfg.fsync_n, seconds)

    wal_normal = "SQLite WAL sync=NORMAL, 1 insert/tx"
    wal_full = "SQLite WAL sync=FULL, 1 insert/tx"
    return [
        Result("remember", "remember, durability=none", "records/s", fast_rate(none), wal_normal,
               fast_rate(normal), Target("ratio>=", 1.0), "stretch target 1.5x"),
        Result("remember", "remember, durability=batch", "records/s", fast_rate(batch), wal_normal,
               fast_rate(normal)),
        Result("remember", "remember, durability=fsync, 1 thread", "records/s", slow_rate(fsync), wal_full,
               slow_rate(full), Target("ratio>=", 1.0)),
        Result("remember", "remember, durability=fsync, 1 thread (reference)", "records/s", slow_rate(fsync),
               "raw append + fdatasync per record", slow_rate(raw)),
    ] + ([
        Result("remember", "remember, durability=none (vs LMDB)", "records/s", fast_rate(none),
               "LMDB sync=False, 1 put + tag index/txn", fast_rate(lm_none), Target("ratio>=", 0.5),
               "stretch target 1.0x"),
        Result("remember", "remember, durability=fsync, 1 thread (vs LMDB)", "records/s", slow_rate(fsync),
               "LMDB sync=True, 1 put + tag index/txn", slow_rate(lm_sync)),
    ] if lmdb else [])


# -- group commit ------------------------------------------------------------------------------------


@contextlib.contextmanager
def fsync_delay(seconds: float) -> Iterator[None]:
    """Every fdatasync of the log takes `seconds` longer (a sleep before it, which releases the GIL as
    the real call does): a busier or slower disk than this one, for both sides of a comparison alike."""
    from mnemo.storage.file import logfile

    real = logfile._sync
    if not seconds:
        yield
        return

    def slow(fd: int) -> None:
        time.sleep(seconds)
        real(fd)

    logfile._sync = slow
    try:
        yield
    finally:
        logfile._sync = real


def mnemo_threads_seconds(
    cfg: Config, threads: int, per_thread: int, durability: str = "fsync", delay: float = 0.0,
    stats: dict[str, list[float]] | None = None,
) -> float:
    """Seconds for `threads` threads each doing `per_thread` remembers on one shared client (with every
    fsync `delay` seconds slower); `stats` collects records per fsync."""
    with scratch(cfg) as d, fsync_delay(delay):
        client = MnemoClient(os.path.join(d, "bench.mnemo.db"), AGENT, durability=durability)
        try:
            _remember_all(client, specs(WARMUP, start=threads * per_thread))
            work = [specs(per_thread, start=t * per_thread) for t in range(threads)]
            barrier = threading.Barrier(threads + 1)
            errors: list[BaseException] = []

            def worker(recs: list[RecordSpec]) -> None:
                barrier.wait()
                try:
                    _remember_all(client, recs)
                except BaseException as exc:
                    errors.append(exc)

            pool = [threading.Thread(target=worker, args=(w,)) for w in work]
            for t in pool:
                t.start()
            fsyncs = getattr(client._store, "fsyncs", 0)
            barrier.wait()
            t0 = time.perf_counter()
            for t in pool:
                t.join()
            elapsed = time.perf_counter() - t0
            if errors:
                raise errors[0]
            fsyncs = getattr(client._store, "fsyncs", 0) - fsyncs
            if stats is not None and fsyncs:
                stats.setdefault("records_per_fsync", []).append(threads * per_thread / fsyncs)
            return elapsed
        finally:
            client.close()


GROUP_COMMIT_DELAYS = (0.0, 0.001, 0.003)


def bench_group_commit(cfg: Config) -> list[Result]:
    n = cfg.threads * cfg.per_thread
    results = []
    for delay in GROUP_COMMIT_DELAYS:
        disk = "real disk" if not delay else f"fsync +{delay * 1000:g} ms"
        cfg.log(f"group commit ({disk}): {cfg.threads} threads x {cfg.per_thread} vs 1 thread x {n}, "
                f"{cfg.reps} reps")
        stats: dict[str, list[float]] = {}
        many, one = alternate(
            cfg.reps,
            lambda d=delay, st=stats: mnemo_threads_seconds(cfg, cfg.threads, cfg.per_thread, delay=d, stats=st),
            lambda d=delay: mnemo_threads_seconds(cfg, 1, n, delay=d),
        )
        per_fsync = sorted(stats.get("records_per_fsync", [0.0]))
        results.append(Result(
            "group_commit", f"remember, durability=fsync, {cfg.threads} threads, {disk}", "records/s",
            rate_samples(n, many), "Mnemo fsync, 1 thread", rate_samples(n, one),
            Target("ratio>=", 4.0) if delay else None,
            f"one shared client; {per_fsync[len(per_fsync) // 2]:.1f} records per fsync (median)",
            extra=stats,
        ))
    cfg.log(f"group commit: {cfg.threads} threads with durability=none, {cfg.reps} reps")
    (ceiling,) = alternate(cfg.reps, lambda: mnemo_threads_seconds(cfg, cfg.threads, cfg.per_thread, "none"))
    results.append(Result(
        "group_commit", f"remember, durability=fsync, {cfg.threads} threads, real disk (reference)", "records/s",
        results[0].mnemo, f"Mnemo durability=none, {cfg.threads} threads", rate_samples(n, ceiling),
        note="how close group commit comes to writing without fsync: the CPU ceiling",
    ))
    return results


# -- transactions ------------------------------------------------------------------------------------


def mnemo_tx_seconds(cfg: Config, durability: str, recs: list[RecordSpec]) -> float:
    with scratch(cfg) as d:
        client = MnemoClient(os.path.join(d, "bench.mnemo.db"), AGENT, durability=durability)
        try:
            _remember_all(client, specs(WARMUP, start=len(recs)))
            t0 = time.perf_counter()
            with client.transaction():
                _remember_all(client, recs)
            return time.perf_counter() - t0
        finally:
            client.close()


def sqlite_tx_seconds(cfg: Config, synchronous: str, recs: list[RecordSpec]) -> float:
    with scratch(cfg) as d:
        db = SqliteStore(os.path.join(d, "bench.sqlite"), synchronous)
        try:
            for r in specs(WARMUP, start=len(recs)):
                db.insert(r)
            t0 = time.perf_counter()
            db.insert_many(recs)
            return time.perf_counter() - t0
        finally:
            db.close()


def bench_transaction(cfg: Config) -> list[Result]:
    recs = specs(cfg.tx_size)
    cfg.log(f"transaction: {cfg.tx_size} remember in one transaction, {cfg.reps} reps")
    lmdb = lmdb_available()
    m_sync, s_full, m_none, s_normal, l_sync, l_none = alternate(
        cfg.reps,
        lambda: mnemo_tx_seconds(cfg, "fsync", recs),
        lambda: sqlite_tx_seconds(cfg, "FULL", recs),
        lambda: mnemo_tx_seconds(cfg, "none", recs),
        lambda: sqlite_tx_seconds(cfg, "NORMAL", recs),
        (lambda: lmdb_tx_seconds(cfg, True, recs)) if lmdb else _no_lmdb,
        (lambda: lmdb_tx_seconds(cfg, False, recs)) if lmdb else _no_lmdb,
    )

    def rate(seconds: list[float]) -> list[float]:
        return rate_samples(cfg.tx_size, seconds)

    return [
        Result("transaction", f"transaction of {cfg.tx_size:,} remember, durability=fsync", "records/s",
               rate(m_sync), f"SQLite sync=FULL, {cfg.tx_size:,} inserts in 1 tx", rate(s_full),
               Target("ratio>=", 1.0)),
        Result("transaction", f"transaction of {cfg.tx_size:,} remember, durability=none", "records/s",
               rate(m_none), f"SQLite sync=NORMAL, {cfg.tx_size:,} inserts in 1 tx", rate(s_normal)),
    ] + ([
        Result("transaction", f"transaction of {cfg.tx_size:,} remember, durability=fsync (vs LMDB)",
               "records/s", rate(m_sync), f"LMDB sync=True, {cfg.tx_size:,} puts + tag index in 1 txn",
               rate(l_sync)),
        Result("transaction", f"transaction of {cfg.tx_size:,} remember, durability=none (vs LMDB)",
               "records/s", rate(m_none), f"LMDB sync=False, {cfg.tx_size:,} puts + tag index in 1 txn",
               rate(l_none)),
    ] if lmdb else [])


# -- large databases ---------------------------------------------------------------------------------


@dataclass
class Dataset:
    n: int
    tag_groups: int
    mnemo_path: str
    sqlite_path: str
    lmdb_path: str | None = None  # None without py-lmdb (the `bench` extra)

    @property
    def snap_path(self) -> str:
        return self.mnemo_path + ".snap"

    def query_tags(self, k: int) -> list[str]:
        step = max(1, self.tag_groups // k)
        return [f"t{j}" for j in range(0, self.tag_groups, step)][:k]


_DATASETS: dict[int, Dataset] = {}
_PROBES: dict[int, dict[str, list[dict[str, Any]]]] = {}


def _marker(n: int, tag_groups: int) -> dict[str, Any]:
    return {"n": n, "tag_groups": tag_groups, "content_bytes": len(make_record(0, 1).content),
            "mnemo_source": source_digest()}


def dataset(cfg: Config, n: int) -> Dataset:
    """A Mnemo database and a SQLite database holding the same n records (built once per run, or reused
    from a kept data directory when its marker matches)."""
    if n in _DATASETS:
        return _DATASETS[n]
    tag_groups = max(1, n // cfg.query_hits)
    d = os.path.join(cfg.workdir, f"data-{n}")
    ds = Dataset(n, tag_groups, os.path.join(d, "bench.mnemo.db"), os.path.join(d, "bench.sqlite"),
                 os.path.join(d, "bench.lmdb") if lmdb_available() else None)
    marker_path = os.path.join(d, "marker.json")
    keep = ds.snap_path + ".keep"
    if os.path.exists(keep):  # an interrupted no-snapshot measurement
        os.replace(keep, ds.snap_path)
    try:
        with open(marker_path) as f:
            reusable = json.load(f) == _marker(n, tag_groups) and os.path.exists(ds.snap_path)
    except (OSError, ValueError):
        reusable = False
    if reusable:
        cfg.log(f"dataset {n:,}: reusing {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        _build_mnemo(cfg, ds)
        _build_sqlite(cfg, ds)
        with open(marker_path, "w") as f:
            json.dump(_marker(n, tag_groups), f)
    if ds.lmdb_path is not None and not os.path.exists(os.path.join(ds.lmdb_path, "done")):
        shutil.rmtree(ds.lmdb_path, ignore_errors=True)
        _build_lmdb(cfg, ds, ds.lmdb_path)
    _DATASETS[n] = ds
    return ds


def _build_mnemo(cfg: Config, ds: Dataset) -> None:
    t0 = time.perf_counter()
    client = MnemoClient(ds.mnemo_path, AGENT, durability="none")
    try:
        for start in range(0, ds.n, cfg.build_tx):
            recs = specs(min(cfg.build_tx, ds.n - start), ds.tag_groups, start)
            with client.transaction():
                _remember_all(client, recs)
            if (start + cfg.build_tx) % 100_000 == 0:
                done = start + cfg.build_tx
                cfg.log(f"dataset {ds.n:,}: {done:,} records, {time.perf_counter() - t0:.0f} s")
    finally:
        client.close()
    if not os.path.exists(ds.snap_path):
        raise RuntimeError(f"closing the client wrote no snapshot beside {ds.mnemo_path}")
    cfg.log(f"dataset {ds.n:,}: Mnemo built in {time.perf_counter() - t0:.1f} s "
            f"(transactions of {cfg.build_tx:,}, durability=none)")


def _build_sqlite(cfg: Config, ds: Dataset) -> None:
    t0 = time.perf_counter()
    db = SqliteStore(ds.sqlite_path, "NORMAL")
    try:
        chunk = 100_000
        for start in range(0, ds.n, chunk):
            db.insert_many(specs(min(chunk, ds.n - start), ds.tag_groups, start))
        db.conn.execute("ANALYZE")
        db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    cfg.log(f"dataset {ds.n:,}: SQLite built in {time.perf_counter() - t0:.1f} s")


def _build_lmdb(cfg: Config, ds: Dataset, path: str) -> None:
    t0 = time.perf_counter()
    db = LmdbStore(path, sync=False)
    try:
        chunk = 100_000
        for start in range(0, ds.n, chunk):
            db.insert_many(specs(min(chunk, ds.n - start), ds.tag_groups, start))
        db.env.sync(True)
    finally:
        db.close()
    with open(os.path.join(path, "done"), "w"):
        pass
    cfg.log(f"dataset {ds.n:,}: LMDB built in {time.perf_counter() - t0:.1f} s")


def probe_open(path: str) -> dict[str, Any]:
    """Open the database in this (fresh) process: open time, snapshot use, RSS growth of the open."""
    before = settled_rss_bytes()
    t0, c0 = time.perf_counter(), time.process_time()
    client = MnemoClient(path, AGENT)
    seconds, cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    # recall's text index, which a snapshot holds in a part loaded after the open, in a thread of its own
    client._store.index.text  # type: ignore[attr-defined]  # noqa: B018
    text_ready = time.perf_counter() - t0
    after = settled_rss_bytes()
    st = client.stats()
    return {
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "text_ready_seconds": text_ready,
        "scan": implementation(),
        "store_open_seconds": st["open_seconds"],
        "snapshot_used": st["snapshot_used"],
        "entries": st["entries"],
        "records": st["records"],
        "rss_before": before,
        "rss_after": after,
        "recovery": st["recovery"],
    }


def _run_probe(path: str, pure: bool = False) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("MNEMO_PURE_PYTHON", None)
    if pure:
        env["MNEMO_PURE_PYTHON"] = "1"  # the scan core's pure-Python twin
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_core", "--probe-open", path],
        capture_output=True, text=True, cwd=str(ROOT), env=env, check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"open probe failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def open_probes(cfg: Config, ds: Dataset) -> dict[str, list[dict[str, Any]]]:
    """Fresh-process opens of the dataset, with its snapshot and without (the snapshot set aside)."""
    if ds.n in _PROBES:
        return _PROBES[ds.n]
    keep = ds.snap_path + ".keep"
    out: dict[str, list[dict[str, Any]]] = {"snapshot": [], "replay": [], "replay_pure": []}
    cfg.log(f"open {ds.n:,}: fresh-process opens, {cfg.big_reps} with the snapshot, "
            f"{cfg.replay_reps} without")
    os.replace(ds.snap_path, keep)
    try:
        for r in range(max(cfg.big_reps, cfg.replay_reps)):
            if r < cfg.big_reps:
                shutil.copyfile(keep, ds.snap_path)
                out["snapshot"].append(_run_probe(ds.mnemo_path))
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(ds.snap_path)
            if r < cfg.replay_reps:
                for kind, pure in (("replay", False), ("replay_pure", True)):
                    out[kind].append(_run_probe(ds.mnemo_path, pure))
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(ds.snap_path)  # the open may have written a new one
    finally:
        os.replace(keep, ds.snap_path)
    for p in out["snapshot"]:
        if not p["snapshot_used"]:
            raise RuntimeError(f"open of {ds.mnemo_path} did not use its snapshot: {p['recovery']}")
    for p in out["replay"] + out["replay_pure"]:
        if p["snapshot_used"]:
            raise RuntimeError("open without a snapshot reports that it used one")
    for kind in out:
        for p in out[kind]:
            if p["records"] != ds.n:
                raise RuntimeError(f"open found {p['records']} records, expected {ds.n}")
    _PROBES[ds.n] = out
    return out


def bench_open(cfg: Config) -> list[Result]:
    results = []
    for n in cfg.sizes:
        ds = dataset(cfg, n)
        probes = open_probes(cfg, ds)
        snap_s = [p["seconds"] for p in probes["snapshot"]]
        replay_s = [p["seconds"] for p in probes["replay"]]
        pure_s = [p["seconds"] for p in probes["replay_pure"]]
        entries = probes["replay"][0]["entries"]
        scan_core = probes["replay"][0]["scan"]
        results += [
            Result("open", f"open {n:,} records, with snapshot", "s", snap_s,
                   target=Target("<=", 0.5) if n >= 1_000_000 else None,
                   note="target is set at 1,000,000 records"),
            Result("open", f"open {n:,} records, no snapshot", "s", replay_s),
            Result("open", f"replay without snapshot, {n:,} records ({scan_core} scan)", "entries/s",
                   [entries / s for s in replay_s], target=Target(">=", 500_000),
                   extra={"entries": entries}),
            Result("open", f"replay without snapshot, {n:,} records, CPU time ({scan_core} scan)", "entries/s",
                   [entries / p["cpu_seconds"] for p in probes["replay"]], "the same, pure-Python twin",
                   [entries / p["cpu_seconds"] for p in probes["replay_pure"]],
                   note="process CPU time of the open: steadier than wall time on a shared machine"),
            Result("open", f"replay without snapshot, {n:,} records, wall ({scan_core} scan)", "entries/s",
                   [entries / s for s in replay_s], "the same, pure-Python twin (MNEMO_PURE_PYTHON=1)",
                   [entries / s for s in pure_s]),
        ]
    return results


def bench_index_memory(cfg: Config) -> list[Result]:
    results = []
    for n in cfg.sizes:
        probes = open_probes(cfg, dataset(cfg, n))
        for kind, label in (("snapshot", "opened from snapshot"), ("replay", "opened by replay")):
            per = [(p["rss_after"] - p["rss_before"]) / n for p in probes[kind]]
            results.append(Result(
                "index_memory", f"index memory at {n:,} records, {label}", "B/record", per,
                target=Target("<=", 300), note="RSS growth over the open, fresh process",
                extra={"rss_after": [p["rss_after"] for p in probes[kind]]},
            ))
    return results


def mnemo_query_seconds(client: MnemoClient, tags: list[str], hits: int) -> float:
    t0 = time.perf_counter()
    for tag in tags:
        got = client.query(tags=[tag])
        if len(got) != hits:
            raise RuntimeError(f"query {tag!r} found {len(got)} records, expected {hits}")
    return (time.perf_counter() - t0) / len(tags)


def sqlite_query_seconds(db: SqliteStore | LmdbStore, tags: list[str], hits: int) -> float:
    t0 = time.perf_counter()
    for tag in tags:
        got = db.query_tag(tag)
        if len(got) != hits:
            raise RuntimeError(f"SQLite query {tag!r} found {len(got)} rows, expected {hits}")
    return (time.perf_counter() - t0) / len(tags)


@contextlib.contextmanager
def _read_stores(ds: Dataset) -> Iterator[tuple[MnemoClient, SqliteStore, LmdbStore | None]]:
    """The dataset's Mnemo client, SQLite store and LMDB store (None without py-lmdb), closed after."""
    client = MnemoClient(ds.mnemo_path, AGENT, durability="none")
    db = SqliteStore(ds.sqlite_path, "NORMAL")
    lm = LmdbStore(ds.lmdb_path) if ds.lmdb_path is not None else None
    try:
        yield client, db, lm
    finally:
        client.close()
        db.close()
        if lm is not None:
            lm.close()


def _query_one(cfg: Config, n: int) -> list[Result]:
    ds = dataset(cfg, n)
    hits = n // ds.tag_groups
    with _read_stores(ds) as (client, db, lm):
        tags = ds.query_tags(20)
        cfg.log(f"query {n:,}: {len(tags)} tags x {cfg.reps} reps, {hits} hits each")
        mnemo_query_seconds(client, tags[:2], hits)
        sqlite_query_seconds(db, tags[:2], hits)
        if lm is not None:
            sqlite_query_seconds(lm, tags[:2], hits)
        m, s, lmdb = alternate(
            cfg.reps,
            lambda: mnemo_query_seconds(client, tags, hits),
            lambda: sqlite_query_seconds(db, tags, hits),
            (lambda: sqlite_query_seconds(lm, tags, hits)) if lm is not None else _no_lmdb,
        )
    case = f"query(tags=[one tag]), {hits} hits, {n:,} records"
    out = [Result(
        "query", case, "queries/s", [1 / x for x in m], "SQLite, index on tags, rows decoded", [1 / x for x in s],
        Target("ratio>=", 1.5), "target is set at 1,000,000 records",
    )]
    if lm is not None:
        out.append(Result(
            "query", f"{case} (vs LMDB)", "queries/s", [1 / x for x in m], "LMDB, tag index, records decoded",
            [1 / x for x in lmdb], note="stretch target 1.0x at 1,000,000 records",
        ))
    return out


def bench_query(cfg: Config) -> list[Result]:
    return [r for n in cfg.sizes for r in _query_one(cfg, n)]


GETS = 1_000


def _mnemo_ids(client: MnemoClient, ds: Dataset, k: int) -> list[str]:
    """k ids of the Mnemo database spread over it (each tag group gives a few), shuffled (seeded)."""
    tags = ds.query_tags(max(1, k // 10))
    ids = [r.id for tag in tags for r in client.query(tags=[tag])]
    picked = ids[:: max(1, len(ids) // k)][:k]
    random.Random(7).shuffle(picked)
    return picked


def _get_seconds(get: Callable[[str], Any], ids: list[str]) -> float:
    t0 = time.perf_counter()
    for rec_id in ids:
        get(rec_id)
    return (time.perf_counter() - t0) / len(ids)


def _get_one(cfg: Config, n: int) -> list[Result]:
    ds = dataset(cfg, n)
    with _read_stores(ds) as (client, db, lm):
        m_ids, s_ids = _mnemo_ids(client, ds, GETS), db.ids(GETS)
        l_ids = lm.ids(GETS) if lm is not None else []
        cfg.log(f"get {n:,}: {len(m_ids)} ids x {cfg.reps} reps")
        for get, ids in ((client.get, m_ids), (db.get, s_ids)) + (((lm.get, l_ids),) if lm is not None else ()):
            _get_seconds(get, ids[:50])
        m, s, lmdb = alternate(
            cfg.reps, lambda: _get_seconds(client.get, m_ids), lambda: _get_seconds(db.get, s_ids),
            (lambda: _get_seconds(lm.get, l_ids)) if lm is not None else _no_lmdb,
        )
    case = f"get(id), {n:,} records, {GETS:,} ids"
    out = [Result("get", case, "gets/s", [1 / x for x in m], "SQLite point select by primary key, row decoded",
                  [1 / x for x in s], Target("ratio>=", 1.0))]
    if lm is not None:
        out.append(Result("get", f"{case} (vs LMDB)", "gets/s", [1 / x for x in m],
                          "LMDB get by id, record decoded", [1 / x for x in lmdb]))
    return out


def bench_get(cfg: Config) -> list[Result]:
    return [r for n in cfg.sizes for r in _get_one(cfg, n)]


def verify_items(path: str) -> list[tuple[bytes, bytes | None]]:
    """The bytes verify hashes: every entry, and every put payload as salt + packed."""
    items: list[tuple[bytes, bytes | None]] = []
    for item in read_log(path, payloads=True):
        data = None
        if item.payload is not None and item.entry.op == "put":
            salt, packed = decode_put_payload(item.payload)
            data = salt + packed
        items.append((item.entry.raw, data))
    return items


def _verify_one(cfg: Config, n: int) -> Result:
    ds = dataset(cfg, n)
    cfg.log(f"verify {n:,}: reading the hashed bytes for the SHA-256 baseline")
    items = verify_items(ds.mnemo_path)
    client = MnemoClient(ds.mnemo_path, AGENT, durability="none", readonly=True)
    entries = 0

    def run_verify() -> float:
        nonlocal entries
        t0 = time.perf_counter()
        report = client.verify()
        dt = time.perf_counter() - t0
        if not report.ok:
            raise RuntimeError(f"verify found problems: {report.problems[:3]}")
        entries = report.entries
        return dt

    def run_sha() -> float:
        t0 = time.perf_counter()
        sha256_loop(items)
        return time.perf_counter() - t0

    def run_verify_pure() -> float:
        with mock.patch.object(verify_file, "scan_frames", pure_scan):
            return run_verify()

    try:
        cfg.log(f"verify {n:,}: {cfg.big_reps} reps")
        v, s, p = alternate(cfg.big_reps, run_verify, run_sha, run_verify_pure)
    finally:
        client.close()
    if entries != len(items):
        raise RuntimeError(f"verify saw {entries} entries, the log holds {len(items)}")
    sha_rate = [len(items) / x for x in s]
    return [
        Result(
            "verify", f"verify(), {n:,} records ({implementation()} scan)", "entries/s", [entries / x for x in v],
            "plain SHA-256 of entries + payloads, one loop", sha_rate, Target("ratio>=", 0.5),
        ),
        Result(
            "verify", f"verify(), {n:,} records, pure-Python twin of the scan", "entries/s",
            [entries / x for x in p], "plain SHA-256 of entries + payloads, one loop", sha_rate,
        ),
    ]


def bench_verify(cfg: Config) -> list[Result]:
    return [r for n in cfg.sizes for r in _verify_one(cfg, n)]


# -- memory-tool directory delete ------------------------------------------------------------------


DELETE_SIZES = (10_000, 100_000)


def directory_delete_seconds(cfg: Config, files: int, cpu: list[float] | None = None) -> float:
    """Seconds for the memory tool's delete of a directory of `files` files (bulk-loaded beforehand, in
    one transaction, as the tool's create would tag them), durability fsync; `cpu` collects the
    process's CPU seconds for it (on a busy machine, wall time also holds waits for a core)."""
    from mnemo.tools import MnemoMemoryToolServer

    text = "a remembered fact, one line of it\n"
    with scratch(cfg) as d:
        client = MnemoClient(os.path.join(d, "bench.mnemo.db"), AGENT)
        try:
            with client.transaction():
                for i in range(files):
                    client.remember(text, tags=("memorytool", f"path:/memories/big/f{i:06d}.md"))
            server = MnemoMemoryToolServer(client)
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            result = server.execute({"command": "delete", "path": "/memories/big"})
            elapsed = time.perf_counter() - t0
            if cpu is not None:
                cpu.append(time.process_time() - c0)
            if result.is_error:
                raise RuntimeError(result.text)
            return elapsed
        finally:
            client.close()


def bench_directory_delete(cfg: Config) -> list[Result]:
    small, big = DELETE_SIZES
    cfg.log(f"directory delete: {small:,} and {big:,} files, {cfg.reps} reps")
    cpu_s: list[float] = []
    cpu_b: list[float] = []
    s, b = alternate(
        cfg.reps,
        lambda: directory_delete_seconds(cfg, small, cpu_s),
        lambda: directory_delete_seconds(cfg, big, cpu_b),
    )
    case = f"memory tool delete of a {big:,}-file directory, per file"
    return [
        Result("directory_delete", case, "us/file", [x / big * 1e6 for x in b], f"the same for {small:,} files",
               [x / small * 1e6 for x in s], Target("ratio<=", 1.2),
               "how the per-file cost grows with the directory (ratio: big / small)"),
        Result("directory_delete", f"{case}, CPU time", "us/file", [x / big * 1e6 for x in cpu_b],
               f"the same for {small:,} files", [x / small * 1e6 for x in cpu_s], Target("ratio<=", 1.2),
               "process CPU time: leaves out waits for the disk and for a core"),
    ]


WORKLOADS: dict[str, Callable[[Config], list[Result]]] = {
    "remember": bench_remember,
    "group_commit": bench_group_commit,
    "transaction": bench_transaction,
    "open": bench_open,
    "index_memory": bench_index_memory,
    "query": bench_query,
    "get": bench_get,
    "verify": bench_verify,
    "directory_delete": bench_directory_delete,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="internal helpers of the benchmark suite")
    parser.add_argument("--probe-open", metavar="DB", required=True,
                        help="open DB in this process and print open time and RSS growth as JSON")
    args = parser.parse_args(argv)
    print(json.dumps(probe_open(args.probe_open)), flush=True)
    os._exit(0)  # leave without closing: closing could write a snapshot that is not part of the open


if __name__ == "__main__":
    sys.exit(main())
