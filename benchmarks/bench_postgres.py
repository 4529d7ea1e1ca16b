"""PostgreSQL benchmark: Mnemo on PostgreSQL beside a plain PostgreSQL schema holding the same data, in
one run, on one server.

The plain baseline is what an application would write without Mnemo: a records table and an indexed tag
table, one transaction per insert, `synchronous_commit = on` (every commit waits for its WAL flush).
Mnemo runs with durability="fsync" (a write returns once its commit is flushed). Measured, as rates
(higher is better) with the ratio Mnemo / baseline:

- remember: one writer, then 1, 4 and 16 writer processes at once (total records per second);
- query(tags=[one tag]) with 100 hits among N records, against a SELECT through the tag index, and
  list_records (no content returned) against the same SELECT without the content column; get(id) of 5
  records a call, against a SELECT of each by its key;
- forget(id) one record a call, and forget_where of 1,000 records, against DELETEs of the same rows;
- the memory tool's mixed workload (benchmarks/bench_memory_tool.py) on PostgreSQL and on a log file.

Usage: python benchmarks/bench_postgres.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--quick]
The script creates a database of its own on that server and drops it at the end.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from mnemo import MnemoClient  # noqa: E402

TEXT = ("The user prefers concise answers with metric units and ISO dates; they work on a distributed "
        "storage engine and asked the assistant to remember the names of three services. ") * 3
PLAIN = """
CREATE TABLE plain_records (id text PRIMARY KEY, scope text NOT NULL, content text NOT NULL,
                            metadata jsonb NOT NULL, created_ns bigint NOT NULL);
CREATE TABLE plain_tags (tag text NOT NULL, id text NOT NULL, PRIMARY KEY (tag, id));
"""


def with_db(dsn: str, dbname: str, schema: str | None = None) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    if schema is not None:
        params["options"] = f"-csearch_path={schema}"
    return make_conninfo("", **params)


def as_uri(conninfo: str) -> str:
    p = conninfo_to_dict(conninfo)
    auth = f"{p.get('user', '')}@" if p.get("user") else ""
    opts = p.get("options")
    query = f"?options={opts.replace(' ', '%20').replace('=', '%3D')}" if opts else ""
    return f"postgresql://{auth}{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{p['dbname']}{query}"


# -- one writer's work (run in a process of its own for the multi-writer runs) ---------------------------


def backend_cpu(conns: list[Any]) -> float:
    """CPU seconds the server processes of these connections have used (nan where /proc does not show
    them: a server on another host, or not readable by this user)."""
    total = 0.0
    for conn in conns:
        if conn is None or conn.closed:
            continue
        try:
            stat = Path(f"/proc/{conn.info.backend_pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return float("nan")
        total += (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def mnemo_writer(url: str, agent: str, n: int, start: Any, out: Any) -> None:
    with MnemoClient(url, agent, durability="fsync") as c:
        c.remember("warm-up", tags=["warm"])
        store = c._store
        conns = lambda: [store._read, store._write, store._sync]  # noqa: E731
        out.put(None)  # ready
        start.wait()
        t0, cpu0, server0 = time.perf_counter(), time.process_time(), backend_cpu(conns())
        for i in range(n):
            c.remember(TEXT, tags=["bench", f"t{i % 50}"], metadata={"i": i})
        out.put((time.perf_counter() - t0, time.process_time() - cpu0, backend_cpu(conns()) - server0))


def plain_writer(conninfo: str, agent: str, n: int, start: Any, out: Any) -> None:
    with psycopg.connect(conninfo, autocommit=False) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.commit()
        out.put(None)  # ready
        start.wait()
        t0, cpu0, server0 = time.perf_counter(), time.process_time(), backend_cpu([conn])
        for i in range(n):
            rid = secrets.token_hex(16)
            with conn.cursor() as cur:
                cur.execute("INSERT INTO plain_records VALUES (%s, %s, %s, %s, %s)",
                            [rid, f"agent:{agent}", TEXT, json.dumps({"i": i}), time.time_ns()])
                cur.executemany("INSERT INTO plain_tags VALUES (%s, %s)", [("bench", rid), (f"t{i % 50}", rid)])
            conn.commit()
        out.put((time.perf_counter() - t0, time.process_time() - cpu0, backend_cpu([conn]) - server0))


def run_writers(
    target: Callable[..., None], where: str, writers: int, per: int, cpu: list[float] | None = None
) -> float:
    """Records per second of `writers` processes writing `per` records each, started together (and, in
    `cpu`, the CPU seconds the processes, then their server backends, spent writing them)."""
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(where, f"w{k}", per, start, out)) for k in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:  # every process has started, connected and written once: none is timed starting
        out.get(timeout=600)
    t0 = time.perf_counter()
    start.set()
    spent = [out.get(timeout=600) for _ in procs]
    elapsed = time.perf_counter() - t0
    if cpu is not None:
        cpu += [sum(s[1] for s in spent), sum(s[2] for s in spent)]
    for p in procs:
        p.join()
    return writers * per / elapsed


# -- the suite ---------------------------------------------------------------------------------------------


class Bench:
    def __init__(self, server: str, quick: bool) -> None:
        self.server = server
        self.quick = quick
        self.dbname = f"mnemo_bench_{os.getpid()}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}"')
            conn.execute(f'CREATE DATABASE "{self.dbname}"')
        self.n = 0

    def fresh(self) -> tuple[str, str]:
        """(Mnemo URI, plain conninfo) of two fresh schemas."""
        self.n += 1
        mnemo_schema, plain_schema = f"m{self.n}", f"p{self.n}"
        with psycopg.connect(with_db(self.server, self.dbname), autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {mnemo_schema}")
            conn.execute(f"CREATE SCHEMA {plain_schema}")
        plain = with_db(self.server, self.dbname, plain_schema)
        with psycopg.connect(plain, autocommit=True) as conn:
            conn.execute(PLAIN)
        return as_uri(with_db(self.server, self.dbname, mnemo_schema)), plain

    def close(self) -> None:
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.dbname}" WITH (FORCE)')

    def remember(self, writers: int, reps: int) -> dict[str, Any]:
        per = (150 if self.quick else 400) // max(1, writers // 4)
        ours, theirs = [], []
        for _ in range(reps):
            url, plain = self.fresh()
            MnemoClient(url, "owner").close()
            ours.append(run_writers(mnemo_writer, url, writers, per))
            theirs.append(run_writers(plain_writer, plain, writers, per))
        return _result(f"remember, {writers} writer process{'es' if writers > 1 else ''}", ours, theirs, "records/s")

    def query(self, reps: int, only: set[str] | None = None) -> list[dict[str, Any]]:
        """`query` and `list_records` by one tag, and `get` of 5 records a call, each beside its plain
        SELECT (`only`: "query", "get" or both, the default), with the CPU per call of the client and of
        its server backend."""
        only = only or {"query", "get"}
        n = 20_000 if self.quick else 100_000
        url, plain = self.fresh()
        hot, step = 100, n // 100  # every step-th record holds the tag: 100 hits
        with MnemoClient(url, "owner", durability="none") as c:
            for start in range(0, n, 1000):
                with c.transaction():
                    for i in range(start, min(n, start + 1000)):
                        c.remember(TEXT, tags=["hot" if i % step == 0 else f"t{i % 97}"], metadata={"i": i})
        with psycopg.connect(plain, autocommit=False) as conn, conn.cursor() as cur:
            rows = [(secrets.token_hex(16), i) for i in range(n)]
            with cur.copy("COPY plain_records FROM STDIN") as copy:
                for rid, i in rows:
                    copy.write_row((rid, "agent:owner", TEXT, json.dumps({"i": i}), time.time_ns()))
            with cur.copy("COPY plain_tags FROM STDIN") as copy:
                for rid, i in rows:
                    copy.write_row(("hot" if i % step == 0 else f"t{i % 97}", rid))
            conn.commit()
            conn.execute("ANALYZE plain_records")
            conn.execute("ANALYZE plain_tags")
            conn.commit()
        queries = 200 if self.quick else 500
        rates: dict[str, list[float]] = {"query": [], "plain": [], "list": [], "plain ids": [], "get": [],
                                         "plain get": []}
        with MnemoClient(url, "owner") as c, psycopg.connect(plain, autocommit=True) as conn:
            assert len(c.query(tags=["hot"])) == len(c.list_records(tags=["hot"])) == hot
            # get(id) of records spread over the table, against the SELECT of one row by its key
            ids = [r.id for r in c.query(tags=["t0"], limit=hot)]
            plain_ids = [row[0] for row in conn.execute(
                "SELECT id FROM plain_tags WHERE tag = 't0' ORDER BY id LIMIT %s", [hot]).fetchall()]
            get_sql = "SELECT id, scope, content, metadata, created_ns FROM plain_records WHERE id = %s"
            assert len(ids) == len(plain_ids) == hot
            sql = ("SELECT r.id, r.scope, r.content, r.metadata, r.created_ns FROM plain_records r "
                   "JOIN plain_tags t ON t.id = r.id WHERE t.tag = %s ORDER BY r.id")
            ids_sql = ("SELECT r.id, r.scope, r.created_ns FROM plain_records r "
                       "JOIN plain_tags t ON t.id = r.id WHERE t.tag = %s ORDER BY r.id")
            assert len(conn.execute(sql, ["hot"]).fetchall()) == len(conn.execute(ids_sql, ["hot"]).fetchall()) == hot
            runs: dict[str, Callable[[], Any]] = {}
            if "query" in only:
                runs.update({
                    "query": lambda: c.query(tags=["hot"]), "plain": lambda: conn.execute(sql, ["hot"]).fetchall(),
                    "list": lambda: c.list_records(tags=["hot"]),
                    "plain ids": lambda: conn.execute(ids_sql, ["hot"]).fetchall(),
                })
            if "get" in only:
                runs.update({
                    "get": lambda: [c.get(i) for i in ids[:5]],
                    "plain get": lambda: [conn.execute(get_sql, [i]).fetchall() for i in plain_ids[:5]],
                })
            # the CPU of this process and of the backend each system's reads run on
            backends = {name: [conn] if name.startswith("plain") else [c._store._read] for name in runs}
            cpu: dict[str, list[float]] = {name: [0.0, 0.0] for name in runs}
            for _ in range(reps):  # in alternating blocks of 20, so that a change of load hits all alike
                spent = dict.fromkeys(runs, 0.0)
                for _ in range(queries // 20):
                    for name, run in runs.items():
                        t0, cpu0, server0 = time.perf_counter(), time.process_time(), backend_cpu(backends[name])
                        for _ in range(20):
                            run()
                        spent[name] += time.perf_counter() - t0
                        cpu[name][0] += time.process_time() - cpu0
                        cpu[name][1] += backend_cpu(backends[name]) - server0
                for name in runs:
                    rates[name].append(queries // 20 * 20 / spent[name])
        calls = reps * (queries // 20 * 20)
        pairs = [("query", "plain", f"query(tags=[one tag]), {hot} hits among {n:,} records", "queries/s"),
                 ("list", "plain ids", f"list_records(tags=[one tag]), {hot} hits among {n:,} records "
                  "(baseline: no content)", "queries/s"),
                 ("get", "plain get", f"get(id), 5 records a call among {n:,} records", "calls/s")]
        out = []
        for ours, theirs, title, unit in pairs:
            if ours in runs:
                result = _result(title, rates[ours], rates[theirs], unit)
                # CPU ms per call: (client, backend) of Mnemo, then of the plain SELECTs
                result["cpu_ms"] = [round(x / calls * 1000, 3) for x in (*cpu[ours], *cpu[theirs])]
                out.append(result)
        return out

    def forget(self, reps: int) -> list[dict[str, Any]]:
        """forget(id) one record a call, and one forget_where of 1,000 records, against DELETEs of the
        same rows (a record and its tags, one transaction a record; by tag, one transaction)."""
        n, bulk = (100 if self.quick else 300), 1000
        rates: dict[str, list[float]] = {"one": [], "plain one": [], "bulk": [], "plain bulk": []}
        for _ in range(reps):
            url, plain = self.fresh()
            with MnemoClient(url, "owner") as c, psycopg.connect(plain, autocommit=True) as conn:
                with c.transaction():
                    ids = [c.remember(TEXT, tags=["one"]).id for _ in range(n)]
                    for _ in range(bulk):
                        c.remember(TEXT, tags=["bulk"])
                rows = [(secrets.token_hex(16), "one" if i < n else "bulk") for i in range(n + bulk)]
                with conn.transaction(), conn.cursor() as cur:
                    with cur.copy("COPY plain_records FROM STDIN") as copy:
                        for rid, _tag in rows:
                            copy.write_row((rid, "agent:owner", TEXT, "{}", time.time_ns()))
                    with cur.copy("COPY plain_tags FROM STDIN") as copy:
                        for rid, tag in rows:
                            copy.write_row((tag, rid))
                t0 = time.perf_counter()
                for rec_id in ids:
                    c.forget(rec_id)
                rates["one"].append(n / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                for rid, _tag in rows[:n]:
                    with conn.transaction():
                        conn.execute("DELETE FROM plain_tags WHERE id = %s", [rid])
                        conn.execute("DELETE FROM plain_records WHERE id = %s", [rid])
                rates["plain one"].append(n / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                assert c.forget_where(tags=["bulk"]) == bulk
                rates["bulk"].append(bulk / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                with conn.transaction():
                    conn.execute("DELETE FROM plain_records WHERE id IN (SELECT id FROM plain_tags WHERE tag = 'bulk')")
                    conn.execute("DELETE FROM plain_tags WHERE tag = 'bulk'")
                rates["plain bulk"].append(bulk / (time.perf_counter() - t0))
        return [
            _result("forget(id), one record a call", rates["one"], rates["plain one"], "records/s"),
            _result(f"forget_where(tags=[one tag]), {bulk:,} records in one call", rates["bulk"], rates["plain bulk"],
                    "records/s"),
        ]

    def memory_tool(self, reps: int) -> dict[str, Any]:
        from bench_memory_tool import MIX, Workload

        from mnemo.tools.anthropic import MnemoMemoryTool

        ops = 300 if self.quick else 1000
        pg_rates, file_rates = [], []
        for rep in range(reps):
            url, _plain = self.fresh()
            with tempfile.TemporaryDirectory() as tmp, MnemoClient(url, "owner") as pgc, \
                    MnemoClient(os.path.join(tmp, "m.db"), "owner") as fc:
                systems = [Workload("pg", MnemoMemoryTool(pgc), random.Random(rep)),
                           Workload("file", MnemoMemoryTool(fc), random.Random(rep))]
                plan = random.Random(rep).choices(list(MIX), weights=list(MIX.values()), k=ops)
                for system in systems:
                    system.seed(40)
                for system, rates in zip(systems, (pg_rates, file_rates), strict=True):
                    t0 = time.perf_counter()
                    for command in plan:
                        system.op(command)()
                    rates.append(ops / (time.perf_counter() - t0))
        return _result("memory tool, mixed workload: PostgreSQL vs the log file", pg_rates, file_rates, "ops/s")


def _result(name: str, ours: list[float], theirs: list[float], unit: str) -> dict[str, Any]:
    m, b = statistics.median(ours), statistics.median(theirs)
    return {"workload": name, "unit": unit, "mnemo": m, "baseline": b, "ratio": m / b,
            "mnemo_samples": ours, "baseline_samples": theirs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("MNEMO_TEST_POSTGRES", "postgresql://postgres@127.0.0.1/postgres"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    parser.add_argument("--only", choices=["remember", "query", "get", "forget", "memory"], nargs="+",
                        action="extend", help="the workloads to run (get: get(id) alone; query: query and "
                        "list_records)")
    parser.add_argument("--json", metavar="FILE")
    args = parser.parse_args(argv)
    reps = args.reps or (2 if args.quick else 3)
    bench = Bench(args.dsn, args.quick)
    print(f"load average {os.getloadavg()[0]:.1f} at the start", file=sys.stderr, flush=True)
    results = []
    try:
        only = set(args.only or ["remember", "query", "get", "forget", "memory"])
        if "remember" in only:
            for writers in (1, 4, 16):
                results.append(bench.remember(writers, reps))
                print(_row(results[-1]), file=sys.stderr, flush=True)
        if only & {"query", "get"}:
            for result in bench.query(reps, only & {"query", "get"}):
                results.append(result)
                print(_row(result), file=sys.stderr, flush=True)
        if "forget" in only:
            for result in bench.forget(reps):
                results.append(result)
                print(_row(result), file=sys.stderr, flush=True)
        if "memory" in only:
            results.append(bench.memory_tool(reps))
            print(_row(results[-1]), file=sys.stderr, flush=True)
    finally:
        bench.close()
    print(f"load average {os.getloadavg()[0]:.1f} at the end; CPU ms per call: client + backend, Mnemo / plain")
    print("| workload | Mnemo | baseline | ratio | CPU ms per call |\n|---|---|---|---|---|")
    for r in results:
        print(_row(r))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


def _row(r: dict[str, Any]) -> str:
    cpu = r.get("cpu_ms")
    spent = "" if cpu is None else f" {cpu[0]:.2f} + {cpu[1]:.2f} / {cpu[2]:.2f} + {cpu[3]:.2f} |"
    return f"| {r['workload']} | {r['mnemo']:,.0f} {r['unit']} | {r['baseline']:,.0f} | {r['ratio']:.2f}x |{spent}"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    raise SystemExit(main())
