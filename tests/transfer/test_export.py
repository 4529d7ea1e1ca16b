"""mnemo.transfer.export_memories on both backends: the files at their paths, other scopes and records
beside them, a manifest whose hashes and head check out, only what the agent may read, and a folder
that must be new or empty, never written through a link."""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from helpers.transfer import read_tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.transfer import ExportError, export_memories, import_source, open_source
from mnemo.transfer.export import scope_folder


def _create(server: MnemoMemoryToolServer, path: str, text: str) -> None:
    assert not server.execute({"command": "create", "path": path, "file_text": text}).is_error


@pytest.fixture
def shared(db: str) -> str:
    """agent-1's files and a note; a team scope it may read; a scope it may not."""
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant("agent-1", "team:research", ["read", "write"])
        team = MnemoMemoryToolServer(owner, scope="team:research")
        _create(team, "/memories/plan.md", "team plan\n")
        secret = MnemoMemoryToolServer(owner, scope="team:secret")
        _create(secret, "/memories/secret.md", "not for agent-1\n")
        owner.remember("a secret note", scope="team:secret")
    with MnemoClient(db, "agent-1", durability="none") as agent:
        mine = MnemoMemoryToolServer(agent)
        _create(mine, "/memories/user.md", "prefers trains\n")
        _create(mine, "/memories/trips/lisbon.md", "June\n")
        note = agent.remember("a plain note", tags=["note"], metadata={"k": 1})
        agent.update(note.id, content="a plain note, edited")
        agent.remember(b"\x00\xffbinary", tags=["blob"])
    return db


def _manifest(out: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((out / "manifest.json").read_text())
    return doc


def test_files_records_and_manifest(shared: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    with MnemoClient(shared, "agent-1", durability="none") as agent:
        report = export_memories(agent, out)
    assert read_tree(out) .keys() == {
        "memories/user.md", "memories/trips/lisbon.md", "scopes/team:research/memories/plan.md",
        "records.jsonl", "manifest.json"}
    assert (out / "memories/user.md").read_text() == "prefers trains\n"
    assert (report.files, report.records, report.head) == (3, 2, None)  # agent-1 may not see the head
    manifest = _manifest(out)
    assert manifest["head"] is None and manifest["root_scope"] == "agent:agent-1" and manifest["agent"] == "agent-1"
    for entry in manifest["files"]:
        assert hashlib.sha256((out / entry["path"]).read_bytes()).hexdigest() == entry["sha256"]
    records = (out / "records.jsonl").read_bytes()
    assert hashlib.sha256(records).hexdigest() == manifest["records"]["sha256"]
    lines = [json.loads(line) for line in records.decode().splitlines()]
    assert sorted(d.get("content", d.get("content_base64")) for d in lines) == ["AP9iaW5hcnk=", "a plain note, edited"]
    assert "secret" not in records.decode() and not any("secret" in p for p in read_tree(out))
    # private, as the SDK's tool makes them
    assert stat.S_IMODE(os.stat(out / "memories/user.md").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out / "memories/trips").st_mode) == 0o700


def test_the_owner_sees_the_head_and_it_checks_out(shared: str, tmp_path: Path) -> None:
    with MnemoClient(shared, "owner", durability="none") as owner:
        report = export_memories(owner, tmp_path / "out", scope="team:*")
        head = owner.head
        assert owner.verify(expect_head=tuple(_manifest(tmp_path / "out")["head"].values())).ok  # type: ignore[arg-type]
    assert report.head == head
    assert set(read_tree(tmp_path / "out")) == {
        "scopes/team:research/memories/plan.md", "scopes/team:secret/memories/secret.md", "records.jsonl",
        "manifest.json"}


def test_jsonl_format_and_versions(shared: str, tmp_path: Path) -> None:
    with MnemoClient(shared, "agent-1", durability="none") as agent:
        export_memories(agent, tmp_path / "out", scope="agent:agent-1", format="jsonl", versions=True)
    assert set(read_tree(tmp_path / "out")) == {"records.jsonl", "manifest.json"}
    lines = [json.loads(line) for line in (tmp_path / "out/records.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and all(d["scope"] == "agent:agent-1" for d in lines)
    note = next(d for d in lines if d["tags"] == ["note"])
    assert [v["content"] for v in note["versions"]] == ["a plain note", "a plain note, edited"]
    assert note["metadata"] == {"k": 1} and note["version"] == 2


def test_an_export_without_files_holds_an_empty_memories_folder_that_imports(
        client: MnemoClient, tmp_path: Path) -> None:
    client.remember("a note, no file", tags=["note"])
    report = export_memories(client, tmp_path / "out")
    out = tmp_path / "out"
    assert (report.files, report.records) == (0, 1)
    assert (out / "memories").is_dir() and list((out / "memories").iterdir()) == []
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["folders"] == [{"path": "memories", "scope": client.home_scope}] and manifest["files"] == []
    assert set(read_tree(out)) == {"records.jsonl", "manifest.json"}
    before = client.list_records()
    imported = import_source(MnemoMemoryToolServer(client), open_source(out / "memories"))
    assert (imported.created, imported.updated, imported.skipped) == ((), (), ())
    assert client.list_records() == before
    export_memories(client, tmp_path / "lines", format="jsonl")
    assert not (tmp_path / "lines" / "memories").exists()  # a jsonl export holds no files, no folder


@pytest.mark.parametrize("kind", ["file", "not-empty", "symlink"])
def test_the_folder_must_be_new_or_empty(client: MnemoClient, tmp_path: Path, kind: str) -> None:
    target = tmp_path / "out"
    if kind == "file":
        target.write_text("x")
    elif kind == "not-empty":
        target.mkdir()
        (target / "keep.txt").write_text("mine")
    else:
        (tmp_path / "elsewhere").mkdir()
        os.symlink(tmp_path / "elsewhere", target)
    messages = {
        "file": f"cannot export into {target}: it exists and is not a folder; give a new or empty folder",
        "not-empty": f"cannot export into {target}: it is not empty; give a new or empty folder (an export never "
                     "writes beside other files)",
        "symlink": f"cannot export into {target}: it is a symbolic link; give a new or empty folder",
    }
    with pytest.raises(ExportError) as error:
        export_memories(client, target)
    assert str(error.value) == messages[kind]
    assert not (tmp_path / "elsewhere").exists() or not list((tmp_path / "elsewhere").iterdir())


def test_an_empty_folder_is_used_and_a_missing_parent_is_an_error(client: MnemoClient, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert export_memories(client, tmp_path / "empty").files == 0
    with pytest.raises(ExportError, match="No such file or directory"):
        export_memories(client, tmp_path / "no" / "parent")


def test_scope_folders_are_one_visible_name_each() -> None:
    assert scope_folder("team:research") == "team:research"
    assert scope_folder("a/b%c") == "a%2Fb%25c"
    assert scope_folder("..") == "%2E."


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(
    st.lists(st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=6), min_size=1,
             max_size=3).map(lambda parts: "/".join(parts)),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=40), max_size=8))
def test_random_trees_round_trip(tmp_path_factory: pytest.TempPathFactory, files: dict[str, str]) -> None:
    import unicodedata

    # A tree a filesystem can hold: names in NFC (the memory tool's form), no name both a file and a folder.
    files = {unicodedata.normalize("NFC", k): v for k, v in files.items()}
    names = set(files)
    files = {k: v for k, v in files.items() if not any(other.startswith(k + "/") for other in names)}
    base = tmp_path_factory.mktemp("tree")
    for rel, text in files.items():
        path = base / "src" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    (base / "src").mkdir(exist_ok=True)
    with MnemoClient(str(base / "m.db"), "a", durability="none") as client:
        report = import_source(MnemoMemoryToolServer(client), open_source(base / "src"))
        assert report.skipped == ()
        export_memories(client, base / "out")
    assert read_tree(base / "out" / "memories") == read_tree(base / "src")
