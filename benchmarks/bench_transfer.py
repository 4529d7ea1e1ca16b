"""`transfer`: `mnemo import` and `mnemo export` of a folder of 10,000 small files, beside copying the same
folder with `cp -r` followed by `sync` (the floor for putting the files somewhere durable).

The import is `import_source` of the folder into a fresh database (`durability="fsync"`: one commit,
fsynced, as `mnemo import` writes it; quotas off, since 10,000 files are over the default of 1,000); the
export is `export_memories` of those files into a new folder (which ends with `sync`). Each side runs on
the same warm folder (the page cache holds it for both), interleaved, `config.reps` times.

    python -m benchmarks.run --only transfer            # in the suite
    python -m benchmarks.bench_transfer [--files N]     # alone: prints the table
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.transfer import FolderSource, export_memories, import_source

from .common import AGENT, Config, Result, Target, alternate, rate_samples, standalone, timed

FILES = 10_000
FOLDERS = 100
BASELINE = "cp -r + sync"


def _text(i: int) -> str:
    return f"# note {i}\n- something worth remembering, number {i}\n- kept as a small markdown file\n" * 2


def make_folder(root: str, files: int) -> None:
    """`files` small markdown files (about 200 bytes) spread over FOLDERS folders."""
    for i in range(files):
        folder = os.path.join(root, f"topic-{i % FOLDERS:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"note-{i:06d}.md"), "w", encoding="utf-8") as f:
            f.write(_text(i))


def _server(client: MnemoClient) -> MnemoMemoryToolServer:
    return MnemoMemoryToolServer(client, max_files=None, max_total_bytes=None, max_history_bytes=None)


def run(config: Config, files: int = FILES) -> list[Result]:
    workdir = tempfile.mkdtemp(prefix="transfer-", dir=config.workdir)
    counter = iter(range(1 << 30))
    try:
        source = os.path.join(workdir, "src")
        make_folder(source, files)
        exported_db = os.path.join(workdir, "exported.mnemo.db")
        with MnemoClient(exported_db, AGENT) as client:
            report = import_source(_server(client), FolderSource(source))
            assert len(report.created) == files, report.skipped[:3]

        def fresh(what: str) -> str:
            return os.path.join(workdir, f"{what}-{next(counter)}")

        def copy() -> float:
            target = fresh("copy")
            seconds = timed(lambda: (subprocess.run(["cp", "-r", source, target], check=True), os.sync()))
            shutil.rmtree(target)
            return seconds

        def imported() -> float:
            db = fresh("import") + ".mnemo.db"

            def once() -> None:
                with MnemoClient(db, AGENT) as client:
                    import_source(_server(client), FolderSource(source))

            seconds = timed(once)
            for name in os.listdir(workdir):
                if name.startswith(os.path.basename(db)):
                    os.remove(os.path.join(workdir, name))
            return seconds

        def exported() -> float:
            target = fresh("export")

            def once() -> None:
                with MnemoClient(exported_db, AGENT) as client:
                    export_memories(client, target)

            seconds = timed(once)
            shutil.rmtree(target)
            return seconds

        m_import, c_import, m_export, c_export = alternate(config.reps, imported, copy, exported, copy)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    note = (f"{files:,} files of ~200 B in {FOLDERS} folders, warm page cache; import: one fsynced commit, "
            "export: ends with sync")
    return [
        Result("transfer", f"import a folder of {files:,} files", "files/s", rate_samples(files, m_import),
               BASELINE, rate_samples(files, c_import), Target("ratio>=", 0.5), note),
        Result("transfer", f"export {files:,} memory-tool files", "files/s", rate_samples(files, m_export),
               BASELINE, rate_samples(files, c_export), Target("ratio>=", 0.5), note),
    ]


WORKLOADS = {"transfer": run}


def main(argv: list[str] | None = None) -> int:
    return standalone(__doc__ or "", run, FILES, argv)

if __name__ == "__main__":
    sys.exit(main())
