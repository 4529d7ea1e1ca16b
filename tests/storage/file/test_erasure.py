"""Deleting a memory-tool directory forgets its files in one entry and erases them in a few writes: the
slots of one frame lie back to back and are zeroed as runs, and nothing but those slots changes."""

from __future__ import annotations

import os
import random
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.storage.file.compaction import _runs
from mnemo.tools import MnemoMemoryToolServer

AGENT = "agent-1"


def test_runs_merge_only_regions_that_touch() -> None:
    assert _runs([]) == []
    assert _runs([(10, 5), (15, 5), (20, 1)]) == [(10, 11)]
    assert _runs([(20, 1), (10, 5), (15, 5)]) == [(10, 11)]  # in any order
    assert _runs([(10, 5), (16, 4), (20, 2)]) == [(10, 5), (16, 6)]  # a one-byte gap stays
    assert _runs([(0, 3), (100, 3)]) == [(0, 3), (100, 3)]
    # Regions whose offsets happen to equal a sum of the last run's start or length, or twice either,
    # but do not touch it: each stays a run of its own (else the gap, which holds entries, is zeroed).
    assert _runs([(100, 50), (200, 30)]) == [(100, 50), (200, 30)]  # 200 = 2 * 100
    assert _runs([(10, 40), (80, 5)]) == [(10, 40), (80, 5)]  # 80 = 2 * 40
    assert _runs([(0, 100), (200, 10), (300, 5)]) == [(0, 100), (200, 10), (300, 5)]  # 300 = 200 + 100


@given(st.lists(st.tuples(st.integers(0, 20), st.integers(1, 20)), max_size=12), st.randoms())
def test_runs_cover_exactly_the_regions_and_merge_every_touching_pair(
    gaps_and_lengths: list[tuple[int, int]], rng: random.Random
) -> None:
    """Disjoint regions (slots never overlap), in any order: the runs cover exactly their bytes, in
    order, and no two runs touch (each is as long as it can be)."""
    regions, offset = [], 0
    for gap, length in gaps_and_lengths:
        offset += gap
        regions.append((offset, length))
        offset += length
    rng.shuffle(regions)
    runs = _runs(regions)

    def covered(spans: list[tuple[int, int]]) -> set[int]:
        return {b for off, length in spans for b in range(off, off + length)}

    assert covered(runs) == covered(regions)
    assert sum(length for _o, length in runs) == sum(length for _o, length in regions)
    assert all(a[0] + a[1] < b[0] for a, b in pairwise(runs))


def _slots(client: MnemoClient, rec_ids: list[str]) -> list[tuple[int, int]]:
    index = client._store.index  # type: ignore[attr-defined]
    out = []
    for rec_id in rec_ids:
        rec = index.get_rec(rec_id)
        assert rec is not None
        out.extend((v.slot_off, v.slot_len) for v in rec.versions)
    return out


def test_a_directory_delete_zeroes_exactly_its_files_slots(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with MnemoClient(db_path, AGENT) as client:
        with client.transaction():  # one frame: the files' slots back to back
            many = [client.remember(f"fact {i}\n", tags=("memorytool", f"path:/memories/dir/f{i:04d}.md")).id
                    for i in range(300)]
        server = MnemoMemoryToolServer(client)
        for i in range(3):  # frames of their own, one of them edited (two versions)
            assert not server.execute({"command": "create", "path": f"/memories/dir/sub/g{i}.md",
                                       "file_text": f"own frame {i}\n"}).is_error
        assert not server.execute({"command": "str_replace", "path": "/memories/dir/sub/g1.md",
                                   "old_str": "own", "new_str": "edited"}).is_error
        assert not server.execute({"command": "create", "path": "/memories/kept.md", "file_text": "kept\n"}).is_error
        others = [r.id for r in client.query(tag_prefix="path:/memories/dir/sub/")]
        gone = _slots(client, many + others)
        before = db_path.read_bytes()

        zero_writes: list[int] = []
        real = os.pwrite

        def counting(fd: int, data: bytes, offset: int) -> int:
            if os.readlink(f"/proc/self/fd/{fd}") == str(db_path) and data and not any(data):
                zero_writes.append(len(data))
            return real(fd, data, offset)

        monkeypatch.setattr(os, "pwrite", counting)
        result = server.execute({"command": "delete", "path": "/memories/dir"})
        monkeypatch.undo()
        assert result.text == "Successfully deleted /memories/dir" and not result.is_error
        # 300 adjacent slots in one write, and one per slot of the three files of their own frames
        assert len(zero_writes) == 1 + 4
        after = db_path.read_bytes()
        erased = bytearray(before)
        for off, length in gone:
            erased[off : off + length] = bytes(length)
        assert after[: len(before)] == bytes(erased)  # the slots zeroed, every other byte as it was
        assert "1\tkept\n" in server.execute({"command": "view", "path": "/memories/kept.md"}).text
        assert client.query(tag_prefix="path:/memories/dir") == []
        assert client.verify().ok
