"""Recall benchmark: `MnemoClient.recall` on PostgreSQL (the text index in mnemo_docs and mnemo_terms)
beside a plain PostgreSQL full-text query over the same texts, in one run, on one server; and recall on a
log file for reference.

The plain baseline is what an application would write without Mnemo: a table of the texts with a stored
`tsvector` (the `simple` configuration: no stemming, as Mnemo has none) and a GIN index, queried with an
OR of the words (Mnemo's words are alternatives too), ranked by `ts_rank`, the best 10 with their
content. It computes no BM25 statistics over a caller's scopes and checks nothing against a chain, so it
is the floor, not an equivalent. Before the timing, both systems' tables are vacuumed and analysed alike
(VACUUM ANALYZE, what autovacuum does in time): the vacuum sets the visibility map, which lets Mnemo read a
term's postings from its index alone (docs/POSTGRES.md, "Recall"; a page written since costs a row fetch
per posting until then). Each query is timed as the median of its repetitions, the three systems
interleaved; the statements each Mnemo recall sends are counted. Beside the wall times, the CPU time of
each call of Mnemo on PostgreSQL and of the plain query, the client's and its server backend's summed
(read from /proc on the server's machine), which the other work of a loaded machine does not inflate.

With `--writes`, the cost of writing the texts instead (what the text index adds to a commit: the terms,
their positions and their rows): `--records` single `remember`s, then as many records in transactions of
500, on a fresh database, durability none; per record, the wall time and the CPU time of the client and of
the server's backends of that database (read from /proc), each the median of `--reps` rounds.

With `--corpus stdlib|synthetic`, the recall workload of bench_recall.py instead, on PostgreSQL: that
module's records (the stdlib corpus's docstrings and comments, repeated to `--records`, or its synthetic
records) in four scopes, and its queries (`--queries` of 1 to 3 words, each word from a band of document
frequency: common, middle, rare; a query's kind is its most frequent word's band), top 10. Mnemo's
`recall(words)` against the plain table's OR of the words ranked by `ts_rank`, for the owner (every scope)
and for a reader of one scope (the plain query filtered on it). The two systems take turns, a repetition
of every query at a time (the order swapped each time); each query is timed alone, in wall time and in
CPU time (this process's and its server backend's), and the rows give queries/s over all the queries and
over each kind: the median of the repetitions, and the ratio Mnemo / plain.

Usage: python benchmarks/bench_recall_postgres.py --dsn postgresql://postgres@127.0.0.1:5432/postgres [--records N]
       [--writes | --corpus stdlib|synthetic [--queries Q] [--keep-db]]
The script creates a database of its own on that server and drops it at the end (with `--keep-db`, a
database named for the corpus and size, kept and used again by the next run with the same arguments).
"""

from __future__ import annotations

import argparse
import random
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg  # noqa: E402
from psycopg.conninfo import conninfo_to_dict, make_conninfo  # noqa: E402

from mnemo import MnemoClient  # noqa: E402

SCOPES = ["team:a", "team:b", "team:c", "team:d"]
READER = "reader"  # may read team:a only
# (label, Mnemo query, tsquery in the simple configuration)
QUERIES = [
    ("rare word", "w4711", "w4711"),
    ("common word", "w3", "w3"),
    ("two words", "w12 w345", "w12 | w345"),
    ("prefix", "w47*", "w47:*"),
    ("phrase", '"w1 w2"', "w1 <-> w2"),
]


def with_db(dsn: str, dbname: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return make_conninfo("", **params)


def as_uri(conninfo: str) -> str:
    p = conninfo_to_dict(conninfo)
    auth = f"{p.get('user', '')}@" if p.get("user") else ""
    return f"postgresql://{auth}{p.get('host', '127.0.0.1')}:{p.get('port', 5432)}/{p['dbname']}"


def texts(n: int, seed: int = 7) -> list[str]:
    """n texts of 40 to 80 words from a vocabulary of 5,000 words with a Zipf-like frequency (w1 the most
    common), lines of 10 words."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(1, 5001)]
    weights = [1 / i for i in range(1, 5001)]
    out = []
    for _ in range(n):
        words = rng.choices(vocab, weights, k=rng.randint(40, 80))
        out.append("\n".join(" ".join(words[i:i + 10]) for i in range(0, len(words), 10)))
    return out


def timed(fn: Callable[[], Any], reps: int) -> tuple[float, Any]:
    """The median seconds of `reps` calls of fn, and its last result."""
    samples = []
    result = None
    for _ in range(reps):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), result


def server_cpu(pid: int) -> float | None:
    """Seconds of CPU the server process `pid` has used (/proc/PID/schedstat, when this user may read it
    on the server's machine), else None."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def cpu(fn: Callable[[], Any], reps: int, backend: int | None) -> float | None:
    """The mean CPU seconds of a call of fn: this process's, and the server backend's of pid `backend`
    (None: no server), or None when the server's cannot be read. Unlike the wall time, the time other
    processes take the cores for does not count in it: what a query costs on a quiet machine, round trips
    aside."""
    before = server_cpu(backend) if backend is not None else 0.0
    t0 = time.process_time()
    for _ in range(reps):
        fn()
    mine = time.process_time() - t0
    after = server_cpu(backend) if backend is not None else 0.0
    if before is None or after is None:
        return None
    return (mine + after - before) / reps


def ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:.1f}"


def statements(client: MnemoClient, query: str) -> int:
    """How many statements one recall of `query` sends on the store's read connection (each one round
    trip)."""
    conn: Any = client._store._reads()
    real = conn.execute
    count = [0]

    def counting(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        return real(*args, **kwargs)

    conn.execute = counting
    try:
        client.recall(query)
    finally:
        del conn.execute
    return count[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--records", type=int, default=10_000)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--writes", action="store_true", help="time the writes of the texts (see above)")
    parser.add_argument("--corpus", choices=("stdlib", "synthetic"),
                        help="bench_recall.py's records and queries instead (see above)")
    parser.add_argument("--queries", type=int, default=60, help="queries of the --corpus workload")
    parser.add_argument("--keep-db", action="store_true", help="keep the --corpus database and use it again")
    args = parser.parse_args(argv)
    if args.corpus:
        return workload(args.dsn, args.corpus, args.records, args.queries, args.reps, args.keep_db)
    dbname = f"mnemo_bench_recall_{secrets.token_hex(3)}"
    with psycopg.connect(args.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    conninfo = with_db(args.dsn, dbname)
    corpus = texts(args.records)
    try:
        if args.writes:
            writes(conninfo, corpus, args.reps)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                run(conninfo, corpus, Path(tmp) / "recall.db", args.reps)
    finally:
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return 0


def writes(conninfo: str, corpus: list[str], reps: int) -> None:
    """The writes' rows (--writes): per record, wall µs, the client's CPU µs and the server's, for single
    remembers and for transactions of 500, each the median of `reps` rounds of the whole corpus."""
    url = as_uri(conninfo)
    dbname = conninfo_to_dict(conninfo)["dbname"]
    admin = psycopg.connect(conninfo, autocommit=True)

    def server() -> float:
        pids = admin.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                             [dbname]).fetchall()
        return sum(server_cpu(pid) or 0.0 for (pid,) in pids)

    def single(c: MnemoClient, scope: str) -> None:
        for i, text in enumerate(corpus):
            c.remember(text, scope=scope, tags=[f"k{i % 7}"])

    def batched(c: MnemoClient, scope: str) -> None:
        for start in range(0, len(corpus), 500):
            with c.transaction():
                for i in range(start, min(start + 500, len(corpus))):
                    c.remember(corpus[i], scope=scope, tags=[f"k{i % 7}"])

    print(f"| writes ({len(corpus):,} texts, durability none) | wall µs / record | client CPU µs | server CPU µs |"
          "\n|---|---|---|---|")
    with MnemoClient(url, "owner", durability="none") as c:
        for label, fn in (("remember, one at a time", single), ("transactions of 500", batched)):
            samples = []
            for k in range(reps):
                scope = f"w{k}:{label[:3]}"  # (each round in a scope of its own: no record is replaced)
                before, t0, w0 = server(), time.process_time(), time.perf_counter()
                fn(c, scope)
                wall, mine, theirs = time.perf_counter() - w0, time.process_time() - t0, server() - before
                samples.append((wall, mine, theirs))
            wall, mine, theirs = (statistics.median(x[j] for x in samples) * 1e6 / len(corpus) for j in range(3))
            print(f"| {label} | {wall:.0f} | {mine:.0f} | {theirs:.0f} |", flush=True)
    admin.close()


def _load_plain(conn: psycopg.Connection[Any], texts: Iterable[str]) -> None:
    """The baseline's table: the texts, each in its scope in turn (SCOPES), their stored `tsvector` and a
    GIN index on it, made after the copy."""
    conn.execute("CREATE TABLE plain (id bigint PRIMARY KEY, scope text NOT NULL, content text NOT NULL, "
                 "tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple', content)) STORED)")
    t0 = time.perf_counter()
    n = 0
    with conn.cursor() as cur, cur.copy("COPY plain (id, scope, content) FROM STDIN") as copy:
        for n, text in enumerate(texts, start=1):
            copy.write_row((n - 1, SCOPES[(n - 1) % len(SCOPES)], text))
    conn.execute("CREATE INDEX plain_tsv ON plain USING gin (tsv)")
    print(f"plain: {n:,} rows copied and indexed in {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def _print_sizes(conn: psycopg.Connection[Any]) -> None:
    sizes = conn.execute(
        "SELECT t, pg_size_pretty(pg_total_relation_size(t::regclass)) FROM unnest(ARRAY['mnemo_payloads', "
        "'mnemo_docs', 'mnemo_terms', 'plain']) t").fetchall()
    print("table sizes (with indexes): " + ", ".join(f"{t} {s}" for t, s in sizes), file=sys.stderr)


def run(conninfo: str, corpus: list[str], file_db: Path, reps: int) -> None:
    url = as_uri(conninfo)
    clients = {"postgresql": MnemoClient(url, "owner", durability="none"),
               "file": MnemoClient(str(file_db), "owner", durability="none")}
    for name, c in clients.items():
        c.grant(READER, "team:a", ["read"])
        t0 = time.perf_counter()
        for start in range(0, len(corpus), 500):
            with c.transaction():
                for i in range(start, min(start + 500, len(corpus))):
                    c.remember(corpus[i], scope=SCOPES[i % len(SCOPES)], tags=[f"k{i % 7}"])
        print(f"{name}: {len(corpus)} records written in {time.perf_counter() - t0:.1f} s "
              "(transactions of 500, durability none)", file=sys.stderr)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        _load_plain(conn, corpus)
        conn.execute("VACUUM ANALYZE plain")
        conn.execute("VACUUM ANALYZE mnemo_docs")
        conn.execute("VACUUM ANALYZE mnemo_terms")
        _print_sizes(conn)
    readers = {"postgresql": MnemoClient(url, READER), "file": MnemoClient(str(file_db), READER)}
    plain = psycopg.connect(conninfo, autocommit=True)
    plain.execute("SET jit = off")
    for phase in ("as written", "after compact"):
        if phase == "after compact":
            # compact's rewrite of the terms (CLUSTER, each term's rows together), without its wait for
            # the snapshots of other databases of the server, which the benchmark has no reason to make
            t0 = time.perf_counter()
            plain.execute("CLUSTER mnemo_terms USING mnemo_terms_term")
            plain.execute("VACUUM ANALYZE mnemo_terms")
            print(f"CLUSTER of mnemo_terms: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        print(f"\n{phase}:\n\n| query ({len(corpus):,} records) | hits | Mnemo PostgreSQL ms | statements | "
              "tsvector/GIN ms | Mnemo file ms | CPU ms, Mnemo PostgreSQL / tsvector/GIN (client + server) |"
              "\n|---|---|---|---|---|---|---|")
        for label, query, tsquery in QUERIES:
            for who, scope_sql, scope_args in (("owner", "", []), ("reader of 1 scope", "AND scope = %s", ["team:a"])):
                owner = who == "owner"
                pg_client = clients["postgresql"] if owner else readers["postgresql"]
                file_client = clients["file"] if owner else readers["file"]

                def plain_query(tsquery: str = tsquery, scope_sql: str = scope_sql,
                                scope_args: list[str] = scope_args) -> list[Any]:
                    return plain.execute(
                        "SELECT id, content, ts_rank(tsv, q) r FROM plain, to_tsquery('simple', %s) q "
                        f"WHERE tsv @@ q {scope_sql} ORDER BY r DESC LIMIT 10", [tsquery, *scope_args]).fetchall()

                pg_ms, hits = timed(lambda c=pg_client, q=query: c.recall(q), reps)
                base_ms, _ = timed(plain_query, reps)
                file_ms, _ = timed(lambda c=file_client, q=query: c.recall(q), reps)
                pg_backend = pg_client._store._reads().info.backend_pid  # the connection recall reads on
                pg_cpu = cpu(lambda c=pg_client, q=query: c.recall(q), reps, pg_backend)
                base_cpu = cpu(plain_query, reps, plain.info.backend_pid)
                print(f"| {label} `{query}`, {who} | {len(hits)} | {pg_ms * 1000:.1f} | "
                      f"{statements(pg_client, query)} | {base_ms * 1000:.1f} | {file_ms * 1000:.1f} | "
                      f"{ms(pg_cpu)} / {ms(base_cpu)} |", flush=True)
    plain.close()
    for c in (*clients.values(), *readers.values()):
        c.close()


def _build_workload(conninfo: str, name: str, n: int) -> None:
    """The --corpus database: Mnemo's records in transactions of 1,000 (durability none), the plain table
    of the same texts and scopes, then what compact does to the terms (CLUSTER) and VACUUM ANALYZE of both."""
    from benchmarks.bench_recall import corpus as make_corpus
    from benchmarks.common import Config

    c = make_corpus(Config.make(True, tempfile.gettempdir()), name, n)
    client = MnemoClient(as_uri(conninfo), "owner", durability="none")
    t0 = time.perf_counter()
    try:
        client.grant(READER, "team:a", ["read"])
        for start in range(0, n, 1000):
            with client.transaction():
                for i in range(start, min(start + 1000, n)):
                    r = c.record(i)
                    client.remember(r.content, scope=SCOPES[i % len(SCOPES)], tags=list(r.tags),
                                    metadata={**r.metadata, "i": i})
            if start % 100_000 == 0:
                print(f"  {start:,} records, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    finally:
        client.close()
    print(f"Mnemo: {n:,} records ({c.label}) written in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        _load_plain(conn, (c.text(i) for i in range(n)))
        t0 = time.perf_counter()
        conn.execute("CLUSTER mnemo_terms USING mnemo_terms_term")
        for table in ("plain", "mnemo_docs", "mnemo_terms", "mnemo_records", "mnemo_versions", "mnemo_payloads"):
            conn.execute(f"VACUUM ANALYZE {table}")
        print(f"CLUSTER and VACUUM ANALYZE: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        _print_sizes(conn)
        conn.execute("CREATE TABLE bench_built (corpus text, n bigint)")
        conn.execute("INSERT INTO bench_built VALUES (%s, %s)", [name, n])


def _timed_queries(fn: Callable[[list[str]], Any], queries: list[list[str]],
                   backend: int) -> list[tuple[float, float]]:
    """Each query run once by fn: its wall seconds, and its CPU seconds (this process's and the server
    backend's)."""
    out = []
    for words in queries:
        s0 = server_cpu(backend) or 0.0
        c0, t0 = time.process_time(), time.perf_counter()
        fn(words)
        t1, c1 = time.perf_counter(), time.process_time()
        s1 = server_cpu(backend) or 0.0
        out.append((t1 - t0, c1 - c0 + s1 - s0))
    return out


def _rate(reps: list[list[tuple[float, float]]], picked: list[int], part: int) -> float:
    """Queries/s over the queries `picked`, by their wall (part 0) or CPU (1) seconds: the median of the
    repetitions."""
    return statistics.median(len(picked) / sum(rep[k][part] for k in picked) for rep in reps)


def _qps(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def workload(dsn: str, name: str, n: int, count: int, reps: int, keep: bool) -> int:
    """--corpus: bench_recall.py's workload on PostgreSQL, Mnemo against tsvector/GIN (see the docstring)."""
    from benchmarks.bench_recall import KINDS, doc_freqs, make_queries
    from benchmarks.bench_recall import corpus as make_corpus
    from benchmarks.common import Config

    dbname = f"mnemo_bench_workload_{name}_{n}" if keep else f"mnemo_bench_recall_{secrets.token_hex(3)}"
    conninfo = with_db(dsn, dbname)
    with psycopg.connect(dsn, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [dbname]).fetchone()
        if exists:
            with psycopg.connect(conninfo, autocommit=True) as conn:
                built = conn.execute("SELECT to_regclass('bench_built') IS NOT NULL").fetchone()
            if not (built and built[0]):
                admin.execute(f'DROP DATABASE "{dbname}" WITH (FORCE)')
                exists = None
        if not exists:
            admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        if not exists:
            _build_workload(conninfo, name, n)
        c = make_corpus(Config.make(True, tempfile.gettempdir()), name, n)
        qs = make_queries(doc_freqs(c.base_texts()), count)
        url = as_uri(conninfo)
        plain = psycopg.connect(conninfo, autocommit=True)
        plain.execute("SET jit = off")
        print(f"\n{c.label} in 4 scopes, {count} queries of 1-3 words, top 10, {reps} repetitions; queries/s "
              "(median), Mnemo PostgreSQL / tsvector+GIN ranked by ts_rank\n\n"
              "| who | queries | wall | ratio | CPU (client + server) | ratio |\n|---|---|---|---|---|---|")
        for who, agent, scope_sql, scope_args in (("owner", "owner", "", []),
                                                  ("reader of 1 scope", READER, "AND scope = %s", ["team:a"])):
            client = MnemoClient(url, agent)

            def mnemo(words: list[str], client: MnemoClient = client) -> Any:
                return client.recall(" ".join(words), limit=10)

            def gin(words: list[str], scope_sql: str = scope_sql, scope_args: list[str] = scope_args) -> Any:
                return plain.execute(
                    "SELECT id, content, ts_rank(tsv, q) r FROM plain, to_tsquery('simple', %s) q "
                    f"WHERE tsv @@ q {scope_sql} ORDER BY r DESC LIMIT 10",
                    [" | ".join(words), *scope_args]).fetchall()

            backends = (client._store._reads().info.backend_pid, plain.info.backend_pid)
            for fn in (mnemo, gin):  # warm: caches, prepared statements
                for words in qs.queries:
                    fn(words)
            per: list[list[list[tuple[float, float]]]] = [[], []]
            for r in range(reps):
                for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                    per[k].append(_timed_queries((mnemo, gin)[k], qs.queries, backends[k]))
            client.close()
            groups = [("all", list(range(len(qs.queries))))] + [
                (kind, [k for k, q in enumerate(qs.kinds) if q == kind]) for kind in KINDS]
            for kind, picked in groups:
                if not picked:
                    continue

                wall = (_rate(per[0], picked, 0), _rate(per[1], picked, 0))
                cpu_ = (_rate(per[0], picked, 1), _rate(per[1], picked, 1))
                print(f"| {who} | {kind} ({len(picked)}) | {_qps(wall[0])} / {_qps(wall[1])} | "
                      f"{wall[0] / wall[1]:.2f}x | {_qps(cpu_[0])} / {_qps(cpu_[1])} | {cpu_[0] / cpu_[1]:.2f}x |",
                      flush=True)
        plain.close()
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
