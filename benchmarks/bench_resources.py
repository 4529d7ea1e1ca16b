"""Resource bounds of large databases: peak memory and wall time of open, query and verify.

    python benchmarks/bench_resources.py [--records 1000000] [--gib 1.0] [--workdir DIR] [--json FILE]

Builds two databases through the public client (durability="none", transactions of 1,000 records):
  - RECORDS small records (about 100 bytes of content, two tags each), and
  - about GIB GiB of 8 KiB records;
then measures, each in a fresh Python process so that peak RSS belongs to that one operation:
  - open with the index snapshot (writer and read-only),
  - open without it (read-only: replays the whole log; writer: replays it and writes a new snapshot),
  - a tag query returning about 0.1% of the records with their content, and an index-only listing of 10%,
  - verify_db over the whole file (what `mnemo verify` runs).
Peak RSS is read two ways: resource.getrusage(RUSAGE_SELF).ru_maxrss and VmHWM in /proc/self/status;
"base" is VmRSS after the imports, before the operation, and "end" VmRSS once it is done (what stays
resident, e.g. the open index). Linux carries ru_maxrss over from the forking
parent across exec, so the building is done in a child as well and this parent stays small. Databases
are kept in WORKDIR and reused by later runs (delete the directory to rebuild).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
AGENT = "bench-agent"
TX = 1_000
TOPICS = 1_000  # tag topic:N on every record: a topic query hits 0.1% of them
KINDS = 10  # tag kind:N: a kind listing hits 10%
BIG_CONTENT = 8 << 10


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


# -- building ------------------------------------------------------------------------------------------


def build(path: Path, records: int, content_bytes: int, label: str) -> float:
    from mnemo import MnemoClient

    if path.exists() and Path(str(path) + ".done").exists():
        return 0.0
    for p in path.parent.glob(path.name + "*"):
        p.unlink()
    rng = random.Random(7)
    block = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789 ") for _ in range(64 << 10))
    start = time.perf_counter()
    with MnemoClient(path, AGENT, durability="none") as c:
        done = 0
        while done < records:
            n = min(TX, records - done)
            with c.transaction():
                for i in range(done, done + n):
                    off = (i * 7919) % (len(block) - content_bytes)
                    c.remember(f"{i:09d} " + block[off : off + content_bytes - 10],
                               tags=(f"topic:{i % TOPICS}", f"kind:{i % KINDS}"))
            done += n
            if done % 50_000 < TX or done == records:
                rate = done / (time.perf_counter() - start)
                print(f"  {label}: {done:,}/{records:,} records, {path.stat().st_size / 2**20:,.0f} MiB, "
                      f"{rate:,.0f} records/s", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - start
    Path(str(path) + ".done").write_text(f"{records} {content_bytes} {seconds:.1f}\n")
    return seconds


# -- measuring (in a child process) --------------------------------------------------------------------


def measure(op: str, db: str) -> dict[str, Any]:
    from mnemo import MnemoClient
    from mnemo.audit import verify_db

    base = _status_kib("VmRSS")
    result: Any = None
    client: MnemoClient | None = None
    start = time.perf_counter()
    if op in ("open-snap", "open-nosnap-writer", "open-snap-ro", "open-nosnap-ro"):
        client = MnemoClient(db, AGENT, durability="none", readonly=op.endswith("-ro"))
        seconds = time.perf_counter() - start
        stats = client.stats()
        result = {"snapshot_used": stats["snapshot_used"], "records": stats["records"]}
    elif op in ("query", "list"):
        client = MnemoClient(db, AGENT, readonly=True)
        start = time.perf_counter()
        if op == "query":
            found = client.query(tags=["topic:7"])
            result = {"hits": len(found), "content_bytes": sum(len(r.content) for r in found)}
        else:
            result = {"hits": len(client.list_records(tags=["kind:3"]))}
        seconds = time.perf_counter() - start
    elif op == "verify":
        report = verify_db(db)
        seconds = time.perf_counter() - start
        result = {"ok": report.ok, "entries": report.entries}
    else:
        raise SystemExit(f"unknown op {op}")
    end = _status_kib("VmRSS")  # with the client still open: the index stays resident
    if client is not None:
        client.close()  # a writer that replayed the log writes a fresh snapshot here: not timed
    return {
        "op": op, "seconds": seconds, "result": result, "base_kib": base, "end_kib": end,
        "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "vmhwm_kib": _status_kib("VmHWM"),
    }  # fmt: skip


def run_child(op: str, db: Path) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    out = subprocess.run([sys.executable, __file__, "--measure", op, "--db", str(db)], check=True,
                         capture_output=True, text=True, env=env)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def measure_db(db: Path) -> list[dict[str, Any]]:
    snap = Path(str(db) + ".snap")
    hidden = Path(str(db) + ".snap.kept")
    rows = [run_child("open-snap", db), run_child("open-snap-ro", db)]
    shutil.copyfile(snap, hidden)
    try:
        snap.unlink()
        rows.append(run_child("open-nosnap-ro", db))
        rows.append(run_child("open-nosnap-writer", db))
    finally:
        os.replace(hidden, snap)
    rows += [run_child("query", db), run_child("list", db), run_child("verify", db)]
    return rows


def mib(kib: int) -> str:
    return f"{kib / 1024:,.0f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--workdir", default=str(ROOT / "benchmarks" / "results" / "resources"))
    p.add_argument("--json", default="")
    p.add_argument("--measure", default="", help=argparse.SUPPRESS)
    p.add_argument("--db", default="", help=argparse.SUPPRESS)
    p.add_argument("--build", default="", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--size", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--label", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure, a.db)))
        return
    if a.build:
        print(build(Path(a.build), a.n, a.size, a.label))
        return
    sys.path.insert(0, str(ROOT))
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    big_records = int(a.gib * 2**30 / (BIG_CONTENT + 90))
    dbs = [
        (f"{a.records:,} records", work / f"records-{a.records}.mnemo.db", a.records, 100),
        (f"{a.gib:g} GiB", work / f"gib-{a.gib:g}.mnemo.db", big_records, BIG_CONTENT),
    ]
    report: list[dict[str, Any]] = []
    for label, path, n, size in dbs:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
        out = subprocess.run([sys.executable, __file__, "--build", str(path), "--n", str(n), "--size", str(size),
                              "--label", label], check=True, stdout=subprocess.PIPE, text=True, env=env)
        seconds = float(out.stdout.strip() or 0)
        if seconds:
            print(f"built {label}: {n:,} records in {seconds:,.0f}s", file=sys.stderr, flush=True)
        info = {"db": label, "records": n, "log_bytes": path.stat().st_size,
                "snapshot_bytes": Path(str(path) + ".snap").stat().st_size, "rows": measure_db(path)}
        report.append(info)
    print()
    print(f"Python {sys.version.split()[0]} on {os.uname().sysname} {os.uname().machine}, "
          f"{os.cpu_count()} CPUs; peak RSS per operation in a fresh process (MiB)")
    head = f"{'db':<18} {'log MiB':>8} {'snap MiB':>8}  {'operation':<22} {'wall s':>8} {'maxrss':>7} " \
           f"{'VmHWM':>7} {'base':>6} {'end':>6}  result"
    print(head)
    print("-" * len(head))
    for info in report:
        for row in info["rows"]:
            print(f"{info['db']:<18} {info['log_bytes'] / 2**20:>8,.0f} {info['snapshot_bytes'] / 2**20:>8,.1f}  "
                  f"{row['op']:<22} {row['seconds']:>8.2f} {mib(row['maxrss_kib']):>7} {mib(row['vmhwm_kib']):>7} "
                  f"{mib(row['base_kib']):>6} {mib(row.get('end_kib', 0)):>6}  {json.dumps(row['result'])}")
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
