"""`ui`: the pages of `mnemo ui` rendered through the app in-process (starlette's test client: routing, the
guard, the library's reads, the templates), beside the library call each page is built on, timed side by
side, so that the ratio is the UI's own overhead.

- the `/memories` tree of 10,000 memory-tool files in 100 folders (target: under 300 ms), beside
  `MnemoClient.list_records(tags=["memorytool"])`, the listing `mnemo ls --tag memorytool` prints;
- a file's page (a 40-line file with 5 versions; target: under 100 ms), beside `MnemoClient.history`
  of its record, what `mnemo history` prints.

    python -m benchmarks.run --only ui          # in the suite
    python -m benchmarks.bench_ui [--files N]   # alone: prints the table
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile

from starlette.testclient import TestClient

from mnemo import MnemoClient
from mnemo.tools.paths import MEMORY_TAG, path_tag
from mnemo.ui import Guard, create_app

from .common import AGENT, Config, Result, Target, alternate, standalone, timed

FILES = 10_000
FOLDERS = 100
VERSIONS = 5
PAGE = "/memories/topic-000/note-000000.md"


def _text(i: int) -> str:
    return "".join(f"line {n} of note {i}: something worth remembering\n" for n in range(40))


def build(db: str, files: int) -> str:
    """`files` memory-tool files (about 2 KB each) in FOLDERS folders, the first with VERSIONS versions;
    the id of that first file."""
    with MnemoClient(db, AGENT, durability="none") as client:
        with client.transaction():
            for i in range(files):
                path = f"/memories/topic-{i % FOLDERS:03d}/note-{i:06d}.md"
                client.remember(_text(i), tags=[MEMORY_TAG, path_tag(path)])
        first = client.list_records(tags=[path_tag(PAGE)])[0].id
        for v in range(1, VERSIONS):
            client.update(first, _text(0) + f"edit {v}\n")
        client.checkpoint()  # the index snapshot, so that each opening is quick
    return first


def run(config: Config, files: int = FILES) -> list[Result]:
    workdir = tempfile.mkdtemp(prefix="ui-", dir=config.workdir)
    try:
        db = os.path.join(workdir, "ui.mnemo.db")
        first = build(db, files)
        with MnemoClient(db, AGENT) as client:
            guard = Guard()
            web = TestClient(create_app(client, guard=guard), base_url="http://testserver" + guard.prefix)
            web.get(f"/?token={guard.token}")
            tree_page = web.get("/memories")
            assert tree_page.status_code == 200 and tree_page.text.count("<tr><td class=") == files
            file_page = web.get(f"/file?path={PAGE}")
            assert file_page.status_code == 200 and file_page.text.count("<tr><td class=\"n\">") == 42

            def tree() -> float:
                return timed(lambda: web.get("/memories"))

            def listing() -> float:
                return timed(lambda: client.list_records(tags=[MEMORY_TAG]))

            def file() -> float:
                return timed(lambda: web.get(f"/file?path={PAGE}"))

            def history() -> float:
                return timed(lambda: client.history(first))

            reps = max(config.reps, 5)
            t_tree, t_list, t_file, t_hist = alternate(reps, tree, listing, file, history)
            web.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    note = f"file backend, warm; {files:,} files of ~2 KB in {FOLDERS} folders; median of {reps}"
    return [
        Result("ui", f"tree page of {files:,} files", "s", t_tree, "list_records (mnemo ls)", t_list,
               Target("<=", 0.3), note),
        Result("ui", f"file page ({VERSIONS} versions, 40 lines)", "s", t_file, "history (mnemo history)", t_hist,
               Target("<=", 0.1), note),
    ]


WORKLOADS = {"ui": run}


def main(argv: list[str] | None = None) -> int:
    return standalone(__doc__ or "", run, FILES, argv, reps=7)

if __name__ == "__main__":
    sys.exit(main())
