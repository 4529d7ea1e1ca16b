"""mnemo.transfer.import_source on both backends: files written as the memory tool's create writes them,
one transaction, idempotent, history kept, --sync, dry runs, quotas checked before anything is written,
and every bad input a clear error with the database unchanged."""

from __future__ import annotations

import os
import resource
import socket
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import snapshot
from helpers.transfer import read_tree, sdk_folder, view, write_tree

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.errors import InvalidInput, PermissionDenied
from mnemo.transfer import ImportRefused, SourceError, export_memories, import_source, open_source
from mnemo.transfer import importing as importing_module

SDK_FILES = {
    "user.md": "# User\n- prefers trains\n",
    "projects/lisbon.md": "# Trip\r\nwindows line ends kept\r\n",
    "projects/deep/er/note.txt": "",
    "unicode/café.md": "héllo wörld ✓\n",
    "node_modules/kept.md": "the SDK lists node_modules; it is a file like any other\n",
}


def _head(client: MnemoClient) -> tuple[int, str]:
    return client.head


def test_sdk_folder_import_export_round_trip_is_byte_identical(client: MnemoClient, tmp_path: Path) -> None:
    memories = sdk_folder(tmp_path / "sdk", SDK_FILES)
    server = MnemoMemoryToolServer(client)
    report = import_source(server, open_source(memories))
    assert sorted(report.created) == sorted(f"/memories/{rel}" for rel in SDK_FILES)
    assert (report.updated, report.unchanged, report.forgotten, report.skipped) == ((), (), (), ())
    assert report.entry == client.last_entry and report.entry is not None
    # each file is exactly what the tool's create writes: the two tags, the text, no metadata
    for rel, text in SDK_FILES.items():
        content, error = view(server, f"/memories/{rel}")
        assert not error and content.startswith(f"Here's the content of /memories/{rel} with line numbers:")
        (record,) = client.query(tags=["memorytool", f"path:/memories/{rel}"])
        assert (record.content, record.metadata, record.scope) == (text, {}, "agent:agent-1")
        assert set(record.tags) == {"memorytool", f"path:/memories/{rel}"}
    export_memories(client, tmp_path / "out")
    assert read_tree(tmp_path / "out" / "memories") == read_tree(memories)


def test_export_then_import_into_a_new_database_gives_the_same_files(
    client: MnemoClient, new_db: Any, tmp_path: Path
) -> None:
    server = MnemoMemoryToolServer(client)
    for rel, text in SDK_FILES.items():
        assert not server.execute({"command": "create", "path": f"/memories/{rel}", "file_text": text}).is_error
    export_memories(client, tmp_path / "first")
    with MnemoClient(new_db(), "other", durability="none") as fresh:
        import_source(MnemoMemoryToolServer(fresh), open_source(tmp_path / "first" / "memories"))
        export_memories(fresh, tmp_path / "second")
        files = {i.tags[-1]: fresh.get(i.id).content for i in fresh.list_records(tags=["memorytool"])}
    assert read_tree(tmp_path / "second" / "memories") == read_tree(tmp_path / "first" / "memories")
    assert files == {f"path:/memories/{rel}": text for rel, text in SDK_FILES.items()}


def test_a_second_import_of_an_unchanged_source_writes_no_entry(client: MnemoClient, tmp_path: Path) -> None:
    source = write_tree(tmp_path / "src", {"a.md": "a\n", "b/c.md": "c\n"})
    server = MnemoMemoryToolServer(client)
    import_source(server, open_source(source))
    head = _head(client)
    again = import_source(server, open_source(source))
    assert (again.created, again.updated, again.entry) == ((), (), None)
    assert again.unchanged == ("/memories/a.md", "/memories/b/c.md")
    assert _head(client) == head


def test_a_changed_file_becomes_a_new_version(client: MnemoClient, tmp_path: Path) -> None:
    source = write_tree(tmp_path / "src", {"a.md": "first\n", "b.md": "same\n"})
    server = MnemoMemoryToolServer(client)
    import_source(server, open_source(source))
    (source / "a.md").write_text("second, longer\n")
    (source / "b.md").write_text("SAME\n")  # the same size: told apart by its hash
    report = import_source(server, open_source(source))
    assert report.updated == ("/memories/a.md", "/memories/b.md") and report.created == ()
    assert [v.content for v in server.history("/memories/a.md")] == ["first\n", "second, longer\n"]
    assert [v.content for v in server.history("/memories/b.md")] == ["same\n", "SAME\n"]


def test_sync_forgets_what_the_source_no_longer_has_below_into_only(client: MnemoClient, tmp_path: Path) -> None:
    server = MnemoMemoryToolServer(client)
    server.execute({"command": "create", "path": "/memories/outside.md", "file_text": "kept\n"})
    source = write_tree(tmp_path / "src", {"a.md": "a\n", "b.md": "b\n"})
    import_source(server, open_source(source), into="/memories/notes")
    (source / "b.md").unlink()
    plain = import_source(server, open_source(source), into="/memories/notes")
    assert plain.forgotten == () and plain.entry is None
    dry = import_source(server, open_source(source), into="/memories/notes", sync=True, dry_run=True)
    assert dry.forgotten == ("/memories/notes/b.md",) and dry.entry is None
    report = import_source(server, open_source(source), into="/memories/notes", sync=True,
                           expect_forgotten=dry.forgotten)
    assert report.forgotten == ("/memories/notes/b.md",) and report.unchanged == ("/memories/notes/a.md",)
    assert view(server, "/memories/notes/b.md")[1]
    assert not view(server, "/memories/outside.md")[1]


def test_sync_refuses_when_what_it_forgets_changed_since_it_was_listed(
    client: MnemoClient, tmp_path: Path
) -> None:
    server = MnemoMemoryToolServer(client)
    source = write_tree(tmp_path / "src", {"a.md": "a\n"})
    import_source(server, open_source(source))
    server.execute({"command": "create", "path": "/memories/new.md", "file_text": "made meanwhile\n"})
    before = snapshot(client.path)
    with pytest.raises(ImportRefused) as refused:
        import_source(server, open_source(source), sync=True, expect_forgotten=())
    assert str(refused.value) == ("the files --sync forgets changed since they were listed (another writer): "
                                  "nothing was written; run the import again")
    assert snapshot(client.path) == before


def test_a_dry_run_writes_nothing(client: MnemoClient, tmp_path: Path) -> None:
    source = write_tree(tmp_path / "src", {"a.md": "a\n"})
    server = MnemoMemoryToolServer(client)
    client.remember("something")
    before = snapshot(client.path)
    report = import_source(server, open_source(source), dry_run=True)
    assert report.created == ("/memories/a.md",) and report.dry_run and report.entry is None
    assert snapshot(client.path) == before


def test_what_cannot_be_imported_is_skipped_with_its_reason(client: MnemoClient, tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {
        "ok.md": "fine\n", ".hidden.md": "h", ".tmp-12-34ab": "half written", ".git/config": "x",
        "binary.bin": b"\xff\xfe\x00\x01", "utf16.txt": "hi".encode("utf-16-le"),
        "big.md": "x" * (1024 + 1), "bad%41name.md": "a percent-escape", "zero\u200bwidth.md": "invisible",
    })
    (src / "empty").mkdir()
    os.symlink("/etc/passwd", src / "link.md")
    os.symlink(tmp_path, src / "dirlink")
    os.mkfifo(src / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(src / "sock"))
    try:
        server = MnemoMemoryToolServer(client, max_file_bytes=1024)
        report = import_source(server, open_source(src))
    finally:
        sock.close()
    assert report.created == ("/memories/ok.md",)
    reasons = {Path(s.origin).name: s.reason for s in report.skipped}
    hidden_file = "a hidden file: its name starts with '.', and the SDK's filesystem memory tool lists no such name"
    assert reasons == {
        ".git": "a hidden folder (nothing in it is imported): its name starts with '.', and the SDK's filesystem "
                "memory tool lists no such name",
        ".hidden.md": hidden_file,
        ".tmp-12-34ab": "a temporary file of the SDK's filesystem memory tool (.tmp-PID-UUID), left by an "
                        "unfinished write",
        "bad%41name.md": "a path the memory tool refuses: Path /memories/bad%41name.md would escape /memories "
                         "directory",
        "big.md": "1025 bytes, over the limit of 1024 bytes of a memory-tool file",
        "binary.bin": "binary: not UTF-8 text (or it holds NUL bytes), and memory-tool files are text",
        "utf16.txt": "binary: not UTF-8 text (or it holds NUL bytes), and memory-tool files are text",
        "dirlink": "a symbolic link: links are never followed out of (or within) the folder",
        "empty": "an empty folder: the memory tool's folders exist only through the files in them",
        "fifo": "a FIFO (named pipe): only regular files are imported, and this one is never opened",
        "link.md": "a symbolic link: links are never followed out of (or within) the folder",
        "sock": "a socket: only regular files are imported, and this one is never opened",
        "zero\u200bwidth.md": "a path the memory tool refuses: Invalid path: '/memories/zero\\u200bwidth.md'",
    }


def test_a_folder_nested_deeper_than_any_memory_tool_path_is_skipped(client: MnemoClient, tmp_path: Path,
                                                                     request: pytest.FixtureRequest) -> None:
    # made one level at a time below a descriptor: the whole path is longer than the OS lets a path be.
    # The walk holds a descriptor a level (513 here), and the clean-up 1,201: room for them where the
    # soft limit is lower (macOS: 256)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2_048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2_048, hard), hard))
        request.addfinalizer(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))
    src = write_tree(tmp_path / "src", {"top.md": "top\n"})
    fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1_200):  # a walk of nested generators this deep failed with RecursionError
            os.mkdir("a", dir_fd=fd)
            inner = os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("x.md", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), "w") as f:
            f.write("deep\n")
    finally:
        os.close(fd)
    report = import_source(MnemoMemoryToolServer(client), open_source(src))
    assert report.created == ("/memories/top.md",)
    assert [(s.origin, s.reason) for s in report.skipped] == [(
        os.path.join(src, *["a"] * 513) + "/",
        "a folder nested more than 512 levels deep: no memory-tool path is that deep (at most 1024 characters), so "
        "nothing in it is imported, or read")]
    _remove_chain(src, 1_200)  # shutil.rmtree, which tmp_path's clean-up uses, recurses a call a level


def _remove_chain(top: Path, depth: int) -> None:
    """Remove `top`/a/a/.../x.md, `depth` folders deep, one level at a time from the bottom."""
    fds = [os.open(top, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth):
            fds.append(os.open("a", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        os.unlink("x.md", dir_fd=fds[-1])
        while len(fds) > 1:
            os.close(fds.pop())
            os.rmdir("a", dir_fd=fds[-1])
    finally:
        for fd in fds:
            os.close(fd)


def test_two_names_that_are_one_in_nfc_import_once(client: MnemoClient, tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {"cafe\u0301.md": "decomposed\n", "caf\u00e9.md": "composed\n"})
    report = import_source(MnemoMemoryToolServer(client), open_source(src))
    assert report.created == ("/memories/caf\u00e9.md",)
    (skip,) = report.skipped
    assert skip.reason.endswith("is imported at the same path, /memories/caf\u00e9.md (the memory tool's paths are "
                                "compared in Unicode NFC)")


def test_an_unreadable_file_is_skipped(client: MnemoClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_tree(tmp_path / "src", {"a.md": "a", "secret.md": "s"})
    real_open = os.open

    def deny(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "secret.md":  # tests run as root, whom file modes do not stop
            raise PermissionError(13, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    report = import_source(MnemoMemoryToolServer(client), open_source(src))
    assert report.created == ("/memories/a.md",)
    assert [(Path(s.origin).name, s.reason) for s in report.skipped] == [("secret.md", "unreadable: Permission denied")]


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing", "cannot import {p}/missing: No such file or directory"),
    (lambda p: _fifo(p / "fifo"), "cannot import {p}/fifo: it is a FIFO (named pipe), neither a folder nor a file"),
    (lambda p: _text(p / "notes.txt", "just text\n"),
     "cannot import {p}/notes.txt: it is not a format the import reads by itself (a folder, a knowledge graph's "
     "JSON Lines, an mcp-memory-service export, mem0's get_all() JSON): name one with --format, or see "
     "docs/TRANSFER.md"),
    (lambda p: _text(p / "g.jsonl", '{"type":"entity","name":"a","entityType":"t","observations":[]}\n\n{oops\n'),
     "{p}/g.jsonl line 3: not JSON (Expecting property name enclosed in double quotes at column 2), so not a "
     "knowledge graph's line (an entity or a relation object)"),
])
def test_a_source_that_cannot_be_read_is_an_error_and_nothing_is_written(
    client: MnemoClient, tmp_path: Path, make: Any, message: str
) -> None:
    client.remember("before")
    before = snapshot(client.path)
    path = make(tmp_path)
    with pytest.raises(SourceError) as error:
        import_source(MnemoMemoryToolServer(client), open_source(path))
    assert str(error.value) == message.format(p=tmp_path)
    assert snapshot(client.path) == before


def test_a_folder_named_as_another_format_is_an_error(client: MnemoClient, tmp_path: Path) -> None:
    before = snapshot(client.path)
    with pytest.raises(SourceError, match=r"cannot import .*: it is a directory, not a regular file"):
        import_source(MnemoMemoryToolServer(client), open_source(tmp_path, "mcp-knowledge-graph"))
    with pytest.raises(SourceError, match=r"cannot import .*/x as a folder: it is a FIFO \(named pipe\)"):
        import_source(MnemoMemoryToolServer(client), open_source(_fifo(tmp_path / "x"), "folder"))
    (tmp_path / "notes.md").write_text("a file")
    with pytest.raises(SourceError) as error:
        import_source(MnemoMemoryToolServer(client), open_source(tmp_path / "notes.md", "folder"))
    assert str(error.value) == f"cannot import {tmp_path / 'notes.md'} as a folder: it is a file, not a folder"
    assert snapshot(client.path) == before


def test_quotas_refuse_the_whole_import_before_anything_is_written(client: MnemoClient, tmp_path: Path) -> None:
    server = MnemoMemoryToolServer(client, max_files=3, max_total_bytes=100)
    server.execute({"command": "create", "path": "/memories/old.md", "file_text": "x" * 10})
    before = snapshot(client.path)
    many = write_tree(tmp_path / "many", {f"f{i}.md": "y" for i in range(3)})
    with pytest.raises(ImportRefused) as refused:
        import_source(server, open_source(many))
    assert str(refused.value) == (
        "cannot import: scope agent:agent-1 would hold 4 memory-tool files, over the limit of 3 (it holds 1). "
        "Nothing was written: import less (a narrower source), delete files you no longer need, or import "
        "through the library with a server of higher limits (docs/TRANSFER.md)")
    big = write_tree(tmp_path / "big", {"a.md": "z" * 60, "b.md": "z" * 31})
    with pytest.raises(ImportRefused, match=r"would hold 101 bytes, over the limit of 100 bytes \(they hold 10\)"):
        import_source(server, open_source(big))
    assert snapshot(client.path) == before
    # a dry run says the same, and --sync's forgets make room
    with pytest.raises(ImportRefused):
        import_source(server, open_source(many), dry_run=True)
    report = import_source(server, open_source(many), sync=True)
    assert report.forgotten == ("/memories/old.md",) and len(report.created) == 3


def test_the_version_cap_refuses_an_update(client: MnemoClient, tmp_path: Path) -> None:
    server = MnemoMemoryToolServer(client, max_versions_per_file=1)
    src = write_tree(tmp_path / "src", {"a.md": "1"})
    import_source(server, open_source(src))
    (src / "a.md").write_text("2")
    with pytest.raises(ImportRefused, match=r"^cannot import: /memories/a.md already has 1 versions, the most a file "
                                           r"may keep is 1\. Nothing was written: delete it and import again$"):
        import_source(server, open_source(src))


def test_a_path_that_is_a_file_of_the_memory_fails_the_whole_import(client: MnemoClient, tmp_path: Path) -> None:
    server = MnemoMemoryToolServer(client)
    server.execute({"command": "create", "path": "/memories/x", "file_text": "a file, not a folder"})
    src = write_tree(tmp_path / "src", {"a.md": "a", "x/y.md": "y"})
    before = snapshot(client.path)
    with pytest.raises(InvalidInput) as error:
        import_source(server, open_source(src))
    assert str(error.value) == (
        "scope agent:agent-1 has a memory-tool file at /memories/x, readable by you or not, so /memories/x/y.md "
        "cannot be a file beneath it; choose another path")
    assert snapshot(client.path) == before


def test_the_agent_needs_read_and_write_in_the_scope(db: str, tmp_path: Path) -> None:
    with MnemoClient(db, "owner", durability="none") as owner:
        owner.grant("reader", "team:x", ["read"])
    src = write_tree(tmp_path / "src", {"a.md": "a"})
    with MnemoClient(db, "reader", durability="none") as reader:
        before = snapshot(db)
        with pytest.raises(PermissionDenied, match="reader may not write in scope team:x"):
            import_source(MnemoMemoryToolServer(reader, scope="team:x"), open_source(src))
        assert snapshot(db) == before


def test_a_file_that_changes_between_scan_and_write_fails_the_import(
    client: MnemoClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importing_module, "CACHE_BYTES", 0)  # nothing kept: every file is read again
    src = write_tree(tmp_path / "src", {"a.md": "a"})
    server = MnemoMemoryToolServer(client)
    real_scan = importing_module._scan

    def scan_then_change(*args: Any) -> Any:
        out = real_scan(*args)
        (src / "a.md").write_text("changed")
        return out

    monkeypatch.setattr(importing_module, "_scan", scan_then_change)
    before = snapshot(client.path)
    with pytest.raises(SourceError, match=r"a.md changed while it was imported: nothing was written; import again$"):
        import_source(server, open_source(src))
    assert snapshot(client.path) == before


def test_files_read_again_after_the_scan_are_the_scanned_ones(
    client: MnemoClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(importing_module, "CACHE_BYTES", 3)  # the first file kept, the others read again
    files = {"a.md": "abc", "d/e/f.md": "def\n", "g.md": "g"}
    src = write_tree(tmp_path / "src", files)
    server = MnemoMemoryToolServer(client)
    import_source(server, open_source(src))
    assert {rel: client.query(tags=[f"path:/memories/{rel}"])[0].content for rel in files} == files


def test_a_server_with_mounts_is_refused(client: MnemoClient, tmp_path: Path) -> None:
    server = MnemoMemoryToolServer(client, mounts={"/memories/team": "team:x"})
    with pytest.raises(InvalidInput, match="an import writes into one scope"):
        import_source(server, open_source(write_tree(tmp_path / "s", {"a": "a"})))


def test_progress_is_reported_over_the_files_read(client: MnemoClient, tmp_path: Path) -> None:
    src = write_tree(tmp_path / "src", {f"d{i % 3}/f{i}.md": str(i) for i in range(7)})
    seen: list[tuple[int, int]] = []
    import_source(MnemoMemoryToolServer(client), open_source(src), progress=lambda d, t: seen.append((d, t)))
    assert seen == [(i, 7) for i in range(1, 8)]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
