"""A folder of 100,000 files: read with bounded memory (names and hashes, not a copy of every file's
bytes beyond the scan's cache), with progress, and refused whole by the quotas before anything is
written. The file backend only: what is measured is the scan, which is the same on both."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest
from helpers.backends import snapshot

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.transfer import ImportRefused, import_source, open_source

FILES = 100_000
FILE_BYTES = 1000


# `slow`: left out of the default run (.ci/run runs it with -m slow). The count is the point: 100 MB of
# files, three times the scan's cache, are read within a bound that does not grow with them.
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_folder_of_100000_files(tmp_path: Path) -> None:
    src = tmp_path / "src"
    body = b"x" * (FILE_BYTES - 1) + b"\n"
    for i in range(FILES):
        folder = src / f"d{i % 100:02d}"
        if i < 100:
            folder.mkdir(parents=True)
        fd = os.open(folder / f"f{i}.md", os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, body)
        os.close(fd)
    db = str(tmp_path / "m.mnemo.db")
    with MnemoClient(db, "agent-1", durability="none") as client:
        client.remember("before")
        before = snapshot(db)
        seen: list[tuple[int, int]] = []
        tracemalloc.start()
        try:
            with pytest.raises(ImportRefused) as refused:
                import_source(MnemoMemoryToolServer(client), open_source(src),
                              progress=lambda done, total: seen.append((done, total)))
            _now, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert str(refused.value) == (
            "cannot import: scope agent:agent-1 would hold 100000 memory-tool files, over the limit of 1000 (it "
            "holds 0). Nothing was written: import less (a narrower source), delete files you no longer need, or "
            "import through the library with a server of higher limits (docs/TRANSFER.md)")
        assert snapshot(db) == before
    assert seen[0] == (1, FILES) and seen[-1] == (FILES, FILES) and len(seen) == FILES
    # 100 MB of files: the scan keeps at most 32 MiB of them, and a few hundred bytes a file besides
    assert peak < (32 << 20) + FILES * 800, peak
