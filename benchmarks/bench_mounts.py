"""Mounts: what serving three scopes in one tree costs, beside the single-scope server in the same run.

Both servers hold the same tree (`/memories/own`, `/memories/team`, `/memories/org`, the same files at the
same paths): the single-scope one in one scope, the mounted one with `/memories/team` and
`/memories/org` mounted on two scopes the agent holds grants on. Both use `durability="none"`, so what
is compared is the work of the commands (the permission checks of every mount, the listing across
scopes), not fsync. Measured, each as a rate with the single-scope server as baseline:

- a mixed run of view (file), str_replace, view (directory) and create + delete;
- a view of the whole tree (every file, three scopes).

And "scope_isolation": a `view /memories` of one scope's 100 files, in a database that holds them alone
and in one that also holds 10,000 files of another scope (every scope stores its files under
`path:/memories/...`): the ratio says whether a server pays for the files of scopes it does not serve.
On the log file, and on PostgreSQL when `MNEMO_TEST_POSTGRES` names a server (a schema of its own each).

Usage: python -m benchmarks.run --only mounts,scope_isolation
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer

from .common import Config, Result, alternate, rate_samples, timed

FOLDERS = ("own", "team", "org")
MOUNTS = {"/memories/team": "team:bench", "/memories/org": "org:bench"}
AGENT = "member"


def _text(i: int) -> str:
    return f"# note {i}\ncounter: 0\n" + "".join(f"- detail {j} of note {i}\n" for j in range(10))


class _Side:
    """One server and its files, with the operations the benchmark times."""

    def __init__(self, server: MnemoMemoryToolServer, files: int) -> None:
        self.server = server
        self.paths = [f"/memories/{FOLDERS[i % 3]}/n{i}.md" for i in range(files)]
        self.counter = 0
        for i, path in enumerate(self.paths):
            self.call({"command": "create", "path": path, "file_text": _text(i)})

    def call(self, tool_input: dict[str, object]) -> None:
        result = self.server.execute(tool_input)
        if result.is_error:
            raise RuntimeError(f"{tool_input} failed: {result.text}")

    def mixed(self, ops: int) -> None:
        for k in range(ops):
            path = self.paths[k % len(self.paths)]
            kind = k % 4
            if kind == 0:
                self.call({"command": "view", "path": path})
            elif kind == 1:
                self.counter += 1
                self.call({"command": "str_replace", "path": path, "old_str": "counter: ",
                           "new_str": f"counter: {self.counter} "})
            elif kind == 2:
                self.call({"command": "view", "path": f"/memories/{FOLDERS[k % 3]}"})
            else:
                extra = f"/memories/{FOLDERS[k % 3]}/extra.md"
                self.call({"command": "create", "path": extra, "file_text": "x"})
                self.call({"command": "delete", "path": extra})

    def view_all(self, views: int) -> None:
        for _ in range(views):
            self.call({"command": "view", "path": "/memories"})


def _timer(fn: Callable[[int], None], n: int) -> Callable[[], float]:
    """What times one call fn(n)."""
    return lambda: timed(lambda: fn(n))


def run(config: Config) -> list[Result]:
    files, ops, views = (150, 200, 50) if config.quick else (600, 600, 100)
    workdir = tempfile.mkdtemp(prefix="mounts-", dir=config.workdir)
    try:
        single_db, mounted_db = os.path.join(workdir, "single.mnemo.db"), os.path.join(workdir, "mounted.mnemo.db")
        with MnemoClient(mounted_db, "owner", durability="none") as owner:
            for scope in MOUNTS.values():
                owner.grant(AGENT, scope, ["read", "write", "forget"])
        MnemoClient(single_db, "owner", durability="none").close()
        with (MnemoClient(single_db, AGENT, durability="none") as a,
              MnemoClient(mounted_db, AGENT, durability="none") as b):
            single = _Side(MnemoMemoryToolServer(a, max_files=None), files)
            mounted = _Side(MnemoMemoryToolServer(b, mounts=MOUNTS, max_files=None), files)

            m_mixed, s_mixed = alternate(config.reps, _timer(mounted.mixed, ops), _timer(single.mixed, ops))
            m_view, s_view = alternate(config.reps, _timer(mounted.view_all, views), _timer(single.view_all, views))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    note = "durability none; baseline: the same tree in one scope, single-scope server"
    return [
        Result("mounts", f"mixed commands, 2 mounts + root ({files} files)", "ops/s", rate_samples(ops, m_mixed),
               "single-scope server", rate_samples(ops, s_mixed), None, note),
        Result("mounts", f"view /memories across 3 scopes ({files} files)", "views/s", rate_samples(views, m_view),
               "single-scope server", rate_samples(views, s_view), None, note),
    ]


OWN_FILES, OTHER_FILES = 100, 10_000


def _seed(db: str, other: int) -> None:
    """Scope agent:a's OWN_FILES files (in folders of 10) and `other` files of scope agent:b, through the
    client's transactions (what the tool stores: the memorytool and path: tags)."""
    with MnemoClient(db, "a", durability="none") as client:
        client.grant("a", "agent:b", ["write"])
        with client.transaction():
            for i in range(OWN_FILES):
                client.remember(_text(i), tags=["memorytool", f"path:/memories/d{i % 10}/n{i}.md"], scope="agent:a")
        for start in range(0, other, 1_000):
            with client.transaction():
                for i in range(start, min(start + 1_000, other)):
                    client.remember(_text(i), tags=["memorytool", f"path:/memories/b{i % 100}/n{i}.md"],
                                    scope="agent:b")


def _pg_schemas(dsn: str, names: list[str]) -> Callable[[], None]:
    """Fresh schemas `names` on `dsn`'s database; what drops them."""
    import psycopg  # noqa: PLC0415 - the postgres extra, only when a server is named

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for name in names:
                conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    drop()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(f'CREATE SCHEMA "{name}"')
    return drop


def scope_isolation(config: Config) -> list[Result]:
    views = 100 if config.quick else 300
    workdir = tempfile.mkdtemp(prefix="scopes-", dir=config.workdir)
    backends: list[tuple[str, str, str, Callable[[], None]]] = [
        ("file", os.path.join(workdir, "alone.mnemo.db"), os.path.join(workdir, "beside.mnemo.db"), lambda: None),
    ]
    dsn = os.environ.get("MNEMO_TEST_POSTGRES")
    if dsn:
        names = [f"bench_scopes_{os.getpid()}_{k}" for k in ("alone", "beside")]
        drop = _pg_schemas(dsn, names)
        sep = "&" if "?" in dsn else "?"
        backends.append(("PostgreSQL", *(f"{dsn}{sep}options=-csearch_path%3D{n}" for n in names), drop))
    out = []
    try:
        for backend, alone_db, beside_db, _drop in backends:
            _seed(alone_db, 0)
            _seed(beside_db, OTHER_FILES)
            with (MnemoClient(alone_db, "a", durability="none") as a,
                  MnemoClient(beside_db, "a", durability="none") as b):
                alone = _Side(MnemoMemoryToolServer(a, max_files=None), 0)
                beside = _Side(MnemoMemoryToolServer(b, max_files=None), 0)
                alone.view_all(3)  # the first view of each builds what the later ones use
                beside.view_all(3)
                t_beside, t_alone = alternate(config.reps, _timer(beside.view_all, views),
                                              _timer(alone.view_all, views))
            out.append(Result(
                "scope_isolation", f"{backend}: view /memories of {OWN_FILES} files, {OTHER_FILES:,} in another scope",
                "views/s", rate_samples(views, t_beside), "no other scope", rate_samples(views, t_alone), None,
                "durability none; ratio 1: the other scope's files cost the view nothing",
            ))
    finally:
        for *_, drop_schemas in backends:
            drop_schemas()
        shutil.rmtree(workdir, ignore_errors=True)
    return out


WORKLOADS = {"mounts": run, "scope_isolation": scope_isolation}
