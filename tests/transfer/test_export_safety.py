"""mnemo.transfer.export_memories against what a writer of a scope may store, on both backends: a file
whose path is not below /memories cannot pose as another scope's file nor land on the export's own
files; every name fits in 255 bytes; an export that fails leaves the folder as it found it. Each case
round-trips: its folders imported back and its lines remembered give every record as it was."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.transfer import read_tree, records_state, restore

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.transfer import ExportError, export_memories
from mnemo.transfer import export as export_module
from mnemo.transfer.export import STAGING, scope_folder

LINE_KEYS = {"id", "scope", "version", "tags", "metadata", "content", "agent_id", "created_at", "updated_at", "seq",
             "hash"}


def _create(server: MnemoMemoryToolServer, path: str, text: str) -> None:
    assert not server.execute({"command": "create", "path": path, "file_text": text}).is_error


def _manifest(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    return doc


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text(encoding="utf-8").splitlines()]


def _round_trips(out: Path, before: list[Any]) -> None:
    """The export written back into a new database (a file one: the export is the same from both
    backends) holds every record as it was."""
    with MnemoClient(str(out.parent / "restored.mnemo.db"), "owner", durability="none") as fresh:
        restore(out, fresh)
        assert records_state(fresh) == before


def test_a_file_of_another_root_cannot_pose_as_a_scopes_file(db: str,
                                                              tmp_path: Path) -> None:
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant("agent-1", "team:y", ["read"])
        _create(MnemoMemoryToolServer(owner, scope="team:y"), "/memories/plan.md", "the real plan\n")
    with MnemoClient(db, "agent-1", durability="none") as agent:
        _create(MnemoMemoryToolServer(agent), "/memories/user.md", "mine\n")
        spoof = agent.remember("a false plan\n", tags=["memorytool", "path:/scopes/team:y/memories/plan.md"])
        before = records_state(agent)
        report = export_memories(agent, tmp_path / "out")
    out = tmp_path / "out"
    tree = read_tree(out)
    assert set(tree) == {"memories/user.md", "scopes/team:y/memories/plan.md", "records.jsonl", "manifest.json"}
    assert tree["scopes/team:y/memories/plan.md"] == b"the real plan\n"
    assert (report.files, report.records) == (2, 1)
    [line] = _lines(out)
    assert set(line) == LINE_KEYS
    assert {k: line[k] for k in ("id", "scope", "version", "tags", "metadata", "content", "agent_id", "seq")} == {
        "id": spoof.id, "scope": "agent:agent-1", "version": 1,
        "tags": ["memorytool", "path:/scopes/team:y/memories/plan.md"], "metadata": {}, "content": "a false plan\n",
        "agent_id": "agent-1", "seq": spoof.seq}
    manifest = _manifest(out)
    assert manifest["format"] == "mnemo-export/2"
    assert manifest["folders"] == [{"path": "memories", "scope": "agent:agent-1"},
                                   {"path": "scopes/team:y/memories", "scope": "team:y"}]
    assert [(f["path"], f["scope"]) for f in manifest["files"]] == [
        ("memories/user.md", "agent:agent-1"), ("scopes/team:y/memories/plan.md", "team:y")]
    _round_trips(out, before)


OWN_NAMES = ["/manifest.json/pwn", "/records.jsonl/x", f"/{STAGING}/manifest.json", "/scopes/team:z/memories/a.md",
             "/notes/agent-1/kept.md"]


def test_a_writer_cannot_abort_the_export_with_a_path_on_its_own_files(db: str,
                                                                        tmp_path: Path) -> None:
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant("writer", "team:x", ["write"])
        _create(MnemoMemoryToolServer(owner, scope="team:x"), "/memories/plan.md", "plan\n")
    with MnemoClient(db, "writer", durability="none") as writer:
        for path in OWN_NAMES:
            writer.remember("x", tags=["memorytool", f"path:{path}"], scope="team:x")
    with MnemoClient(db, "owner", durability="none") as owner:
        before = records_state(owner)
        report = export_memories(owner, tmp_path / "out", scope="team:x")
    out = tmp_path / "out"
    assert set(read_tree(out)) == {"memories/plan.md", "records.jsonl", "manifest.json"}
    assert (report.files, report.records) == (1, len(OWN_NAMES))
    assert sorted(line["tags"][1] for line in _lines(out)) == sorted(f"path:{p}" for p in OWN_NAMES)
    manifest = _manifest(out)
    assert (manifest["root_scope"], manifest["folders"]) == ("team:x", [{"path": "memories", "scope": "team:x"}])
    assert manifest["records"]["count"] == len(OWN_NAMES)
    assert hashlib.sha256((out / "records.jsonl").read_bytes()).hexdigest() == manifest["records"]["sha256"]
    _round_trips(out, before)


def _sha(scope: str) -> str:
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()


LONG_SCOPES = {
    # an agent id of 250 ASCII characters, the longest: its home scope is 256 bytes
    "ascii agent": ("a" * 250, "agent:" + "a" * 154 + "%23" + _sha("agent:" + "a" * 250)),
    # 140 Cyrillic letters: 286 bytes
    "cyrillic agent": ("д" * 140, "agent:" + "д" * 77 + "%23" + _sha("agent:" + "д" * 140)),
    # each `/` is `%2F`: 403 bytes, cut before the escape that would straddle the 160th byte
    "slashes": (None, "tea" + "%2Fx" * 39 + "%23" + _sha("tea" + "/x" * 100)),
}


@pytest.mark.parametrize("case", sorted(LONG_SCOPES))
def test_a_long_scope_name_gets_a_bounded_folder_name(db: str, tmp_path: Path,
                                                       case: str) -> None:
    agent_id, folder = LONG_SCOPES[case]
    with MnemoClient(db, "owner", durability="none") as owner:
        if agent_id is None:
            scope = "tea" + "/x" * 100
            _create(MnemoMemoryToolServer(owner, scope=scope), "/memories/deep/note.md", "long\n")
    if agent_id is not None:
        with MnemoClient(db, agent_id, durability="none") as agent:
            scope = agent.home_scope
            _create(MnemoMemoryToolServer(agent), "/memories/deep/note.md", "long\n")
    assert len(scope_folder(scope).encode("utf-8")) > 200 or scope_folder(scope) == folder
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.remember("a note", scope=scope)
        before = records_state(owner)
        report = export_memories(owner, tmp_path / "out")
    out = tmp_path / "out"
    assert scope_folder(scope) == folder and len(folder.encode("utf-8")) <= 227
    assert set(read_tree(out)) == {f"scopes/{folder}/memories/deep/note.md", "records.jsonl", "manifest.json"}
    assert (out / "scopes" / folder / "memories/deep/note.md").read_text() == "long\n"
    assert (report.files, report.records) == (1, 1)
    assert _manifest(out)["folders"] == [{"path": "memories", "scope": "agent:owner"},
                                         {"path": f"scopes/{folder}/memories", "scope": scope}]
    assert list((out / "memories").iterdir()) == []  # the root scope's folder, empty
    _round_trips(out, before)


def test_scope_folder_names_are_bounded_and_distinct() -> None:
    assert scope_folder("team:research") == "team:research"
    assert scope_folder("x" * 255) == "x" * 255  # at the limit: as it is
    assert scope_folder("x" * 256) == "x" * 160 + "%23" + _sha("x" * 256)
    # scopes sharing their first 160 bytes differ in their hash
    assert scope_folder("x" * 256) != scope_folder("x" * 255 + "y")
    # a plain name never holds the mark of a hashed one: `%` is always escaped
    assert scope_folder("x%23" + "0" * 64) == "x%2523" + "0" * 64
    assert scope_folder("." + "/" * 120) == "%2E" + "%2F" * 52 + "%23" + _sha("." + "/" * 120)


def _failing_write(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    real = export_module._Tree.write
    calls = [0]

    def write(self: Any, parts: tuple[str, ...], data: bytes) -> None:
        calls[0] += 1
        if calls[0] > after:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, parts, data)

    monkeypatch.setattr(export_module._Tree, "write", write)


@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_export_leaves_the_folder_as_it_was(client: MnemoClient, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, existing: bool) -> None:
    server = MnemoMemoryToolServer(client)
    for name in ("a", "b", "c"):
        _create(server, f"/memories/{name}.md", name)
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    head = client.head
    _failing_write(monkeypatch, after=2)
    with pytest.raises(OSError) as error:
        export_memories(client, out)
    assert str(error.value) == "[Errno 28] No space left on device"
    assert (out.exists(), list(out.iterdir()) if existing else None) == (existing, [] if existing else None)
    assert client.head == head
    monkeypatch.undo()
    assert export_memories(client, out).files == 3  # the same folder, again
    assert set(read_tree(out)) == {"memories/a.md", "memories/b.md", "memories/c.md", "records.jsonl",
                                   "manifest.json"}


def test_a_failure_while_moving_into_place_removes_what_was_moved(client: MnemoClient, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _create(MnemoMemoryToolServer(client), "/memories/a.md", "a")
    real = os.rename

    def rename(src: Any, dst: Any, **kwargs: Any) -> None:
        if src == "manifest.json":
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst, **kwargs)

    monkeypatch.setattr(os, "rename", rename)
    (tmp_path / "out").mkdir()
    with pytest.raises(OSError, match=r"^\[Errno 5\] Input/output error$"):
        export_memories(client, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_a_staging_folder_left_by_a_killed_export_is_named(client: MnemoClient, tmp_path: Path) -> None:
    (tmp_path / "out" / STAGING / "memories").mkdir(parents=True)
    with pytest.raises(ExportError) as error:
        export_memories(client, tmp_path / "out")
    assert str(error.value) == (
        f"cannot export into {tmp_path / 'out'}: it holds only {STAGING}, left by an export that did not finish; "
        f"remove it ({tmp_path / 'out' / STAGING}) and export again")
    assert set(os.listdir(tmp_path / "out")) == {STAGING}
