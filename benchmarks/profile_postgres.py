"""Where the time of a remember on PostgreSQL goes: CPU seconds per record of the writer processes and of
the server's backends, for Mnemo and for the plain table of bench_postgres.py, with 1, 4 and 16 writer
processes, beside the wall time per record and what the backends spent their time on. On a machine of
few cores, a workload whose CPU per record (client and server together) times the record rate reaches
the cores' seconds is bound by CPU, whatever the commits share: this says whether a rate is bound by the
CPU or by waiting (flushes, locks, round trips).

The writers' CPU is what each spent in its timed loop (time.process_time); the server's, what the
backends of the writers' connections spent meanwhile, read from /proc (so the server must run on this
host, its processes readable by this user: root, or the postgres user; else the column is nan).
Other work on the machine takes cores too: the load average is printed at the start.

Usage: python benchmarks/profile_postgres.py --dsn postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from bench_postgres import Bench, mnemo_writer, plain_writer, run_writers  # noqa: E402

from mnemo import MnemoClient  # noqa: E402


class WaitSampler:
    """What the busy backends of the benchmark's database are doing, sampled from pg_stat_activity every
    few milliseconds while a run goes: on the CPU (no wait event), waiting for a row or transaction lock
    (Lock:tuple, Lock:transactionid: the head row), for the WAL flush (IO:WALSync, LWLock:WALWrite), and
    so on. Idle backends (waiting for their client's next statement) are left out: the share of samples
    in which a backend was busy is `busy`."""

    def __init__(self, dsn: str, dbname: str) -> None:
        self.dsn, self.dbname = dsn, dbname
        self.counts: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> WaitSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._stop.wait(0.005):
                rows = conn.execute(
                    "SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), state FROM pg_stat_activity "
                    "WHERE datname = %s AND backend_type = 'client backend' AND pid <> pg_backend_pid()",
                    [self.dbname],
                ).fetchall()
                for event, state in rows:
                    self.counts["idle" if (state or "idle").startswith("idle") else event] += 1

    def shares(self) -> str:
        busy = Counter({event: n for event, n in self.counts.items() if event != "idle"})
        total = sum(busy.values()) or 1
        share = total / (sum(self.counts.values()) or 1)
        return f"busy {share:.0%}: " + ", ".join(f"{event} {n / total:.0%}" for event, n in busy.most_common(4))


def profile(bench: Bench, writers: int, per: int) -> list[str]:
    rows = []
    url, plain = bench.fresh()
    MnemoClient(url, "owner").close()
    for name, target, where in (("Mnemo", mnemo_writer, url), ("plain", plain_writer, plain)):
        spent: list[float] = []
        t0 = time.perf_counter()
        with WaitSampler(bench.server, bench.dbname) as waits:
            rate = run_writers(target, where, writers, per, spent)
        wall = time.perf_counter() - t0
        n = writers * per
        client, server = spent[0] / n * 1000, spent[1] / n * 1000
        rows.append(f"| {writers} | {name} | {rate:,.0f} | {1000 / rate * writers:.2f} | {client:.2f} | {server:.2f} "
                    f"| {client + server:.2f} | {(client + server) * rate / 1000:.2f} | {wall:.1f} "
                    f"| {waits.shares()} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("MNEMO_TEST_POSTGRES", "postgresql://postgres@127.0.0.1/postgres"))
    parser.add_argument("--per", type=int, default=200, help="records per writer process")
    parser.add_argument("--writers", type=int, action="append")
    args = parser.parse_args(argv)
    bench = Bench(args.dsn, quick=True)
    print(f"{os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f} at the start")
    print("| writers | system | records/s | wall ms per record per writer | client CPU ms/record "
          "| server CPU ms/record | CPU ms/record | cores busy | run s | what busy backends do |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    try:
        for writers in args.writers or [1, 4, 16]:
            for row in profile(bench, writers, max(20, args.per // max(1, writers // 4))):
                print(row, flush=True)
    finally:
        bench.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
