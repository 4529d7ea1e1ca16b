"""Mounts: what serving three scopes in one tree costs, beside the single-scope server in the same run.

Both servers hold the same tree (`/memories/own`, `/memories/team`, `/memories/org`, the same files at the
same paths): the single-scope one in one scope, the mounted one with `/memories/team` and
`/memories/org` mounted on two scopes the agent holds grants on. Both use `durability="none"`, so what
is compared is the work of the commands (the permission checks of every mount, the listing across
scopes), not fsync. Measured, each as a rate with the single-scope server as baseline:

- a mixed run of view (file), str_replace, view (directory) and create + delete;
- a view of the whole tree (every file, three scopes).

Usage: python -m benchmarks.run --only mounts
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

            def timer(fn: Callable[[int], None], n: int) -> Callable[[], float]:
                return lambda: timed(lambda: fn(n))

            m_mixed, s_mixed = alternate(config.reps, timer(mounted.mixed, ops), timer(single.mixed, ops))
            m_view, s_view = alternate(config.reps, timer(mounted.view_all, views), timer(single.view_all, views))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    note = "durability none; baseline: the same tree in one scope, single-scope server"
    return [
        Result("mounts", f"mixed commands, 2 mounts + root ({files} files)", "ops/s", rate_samples(ops, m_mixed),
               "single-scope server", rate_samples(ops, s_mixed), None, note),
        Result("mounts", f"view /memories across 3 scopes ({files} files)", "views/s", rate_samples(views, m_view),
               "single-scope server", rate_samples(views, s_view), None, note),
    ]


WORKLOADS = {"mounts": run}
