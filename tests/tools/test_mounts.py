"""Mounts (docs/MOUNTS.md): the listing across mounts, permissions per touched scope, read-only and
unreadable mounts, moves across mounts in one commit, fixed mount points, and a second process editing a
file while it is moved between mounts. Both backends, through the `db` fixture."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.frames import read_frames
from helpers.paths import HELPERS, ROOT
from helpers.procs import subprocess_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.errors import InvalidInput, NotFound
from mnemo.tools import CommandResult, MnemoMemoryToolServer

TEAM, ORG = "team:research", "org:handbook"
MOUNTS = {"/memories": "agent:me", "/memories/team": TEAM, "/memories/org": ORG}
HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"
EDITOR = HELPERS / "mounts_editor.py"


@pytest.fixture
def admin(db: str) -> Iterator[MnemoClient]:
    with MnemoClient(db, "admin", durability="none") as c:  # the first to open owns the database
        yield c


def open_client(db: str, agent: str) -> MnemoClient:
    return MnemoClient(db, agent, durability="none")


def run(server: MnemoMemoryToolServer, command: str, **fields: Any) -> CommandResult:
    return server.execute({"command": command, **fields})


def ok(server: MnemoMemoryToolServer, command: str, **fields: Any) -> str:
    result = run(server, command, **fields)
    assert not result.is_error, result.text
    return result.text


def files_of(admin: MnemoClient) -> dict[tuple[str, str], str]:
    """(scope, stored path) -> content of every memory-tool file in the database."""
    out = {}
    for record in admin.query(tags=("memorytool",)):
        (tag,) = [t for t in record.tags if t.startswith("path:")]
        out[(record.scope, tag[5:])] = str(record.content)
    return out


def test_a_listing_spans_the_mounts(admin: MnemoClient, db: str) -> None:
    admin.grant("me", TEAM, ["read", "write", "forget"])
    admin.grant("me", ORG, ["read"])
    team = MnemoMemoryToolServer(admin, scope=TEAM)
    ok(team, "create", path="/memories/plan.md", file_text="the plan\n")  # 9 bytes
    ok(team, "create", path="/memories/notes/a.md", file_text="a" * 1024)
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=MOUNTS)
        ok(server, "create", path="/memories/mine.md", file_text="mine")
        assert ok(server, "view", path="/memories") == "\n".join([
            HEADER.format("/memories"),
            "1.0K\t/memories",  # 4 + 9 + 1024 = 1037
            "4B\t/memories/mine.md",
            "0B\t/memories/org/",  # a mount point is a directory, empty or not
            "1.0K\t/memories/team/",
            "1K\t/memories/team/notes/",
            "9B\t/memories/team/plan.md",
        ])
        assert ok(server, "view", path="/memories/team/") == "\n".join([
            HEADER.format("/memories/team/"),
            "1.0K\t/memories/team",
            "1K\t/memories/team/notes/",
            "1K\t/memories/team/notes/a.md",
            "9B\t/memories/team/plan.md",
        ])
        assert ok(server, "view", path="/memories/org") == f"{HEADER.format('/memories/org')}\n0B\t/memories/org"
        assert ok(server, "view", path="/memories/team/plan.md") == (
            "Here's the content of /memories/team/plan.md with line numbers:\n     1\tthe plan\n     2\t"
        )
        # a file is stored at its path inside its scope: the single-scope server of the team sees it
        ok(server, "create", path="/memories/team/new.md", file_text="n")
    assert files_of(admin)[(TEAM, "/memories/new.md")] == "n"
    assert server.mounts == {"/memories": "agent:me", "/memories/org": ORG, "/memories/team": TEAM}


def test_the_single_scope_form_is_one_mount_at_the_root(admin: MnemoClient, db: str) -> None:
    """With only the root mounted, every result is the single-scope server's."""
    sequence: list[dict[str, Any]] = [
        {"command": "view", "path": "/memories"},
        {"command": "create", "path": "/memories/a/b.md", "file_text": "one\ntwo\n"},
        {"command": "create", "path": "/memories/a/b.md/c", "file_text": "x"},
        {"command": "create", "path": "/memories/a", "file_text": "x"},
        {"command": "str_replace", "path": "/memories/a/b.md", "old_str": "one", "new_str": "1"},
        {"command": "str_replace", "path": "/memories/a", "old_str": "one", "new_str": "1"},
        {"command": "insert", "path": "/memories/a/b.md", "insert_line": 9, "insert_text": "x"},
        {"command": "rename", "old_path": "/memories/a", "new_path": "/memories/a/d"},
        {"command": "rename", "old_path": "/memories", "new_path": "/memories/z"},
        {"command": "rename", "old_path": "/memories/a", "new_path": "/memories/z"},
        {"command": "view", "path": "/memories/"},
        {"command": "delete", "path": "/memories/."},
        {"command": "delete", "path": "/memories/z/b.md"},
        {"command": "view", "path": "/memories/z"},
    ]
    plain, mounted = MnemoMemoryToolServer(admin), MnemoMemoryToolServer(admin, scope="team:other", mounts={})
    for tool_input in sequence:
        # the same commands on two scopes of one database: one served plainly, one as a mount table
        assert plain.execute(tool_input) == mounted.execute(tool_input), tool_input
    assert mounted.mounts == {"/memories": "team:other"}


def test_a_read_only_mount_answers_edits_with_permission_denied(admin: MnemoClient, db: str) -> None:
    admin.grant("ro", TEAM, ["read"])
    ok(MnemoMemoryToolServer(admin, scope=TEAM), "create", path="/memories/plan.md", file_text="plan\n")
    with open_client(db, "ro") as ro:
        server = MnemoMemoryToolServer(ro, mounts={"/memories/team": TEAM})
        before = files_of(admin)
        denied = {
            "write": [
                {"command": "create", "path": "/memories/team/x.md", "file_text": "x"},
                {"command": "str_replace", "path": "/memories/team/plan.md", "old_str": "plan", "new_str": "p"},
                {"command": "insert", "path": "/memories/team/plan.md", "insert_line": 0, "insert_text": "x"},
                {"command": "rename", "old_path": "/memories/team/plan.md", "new_path": "/memories/team/p.md"},
            ],
            "forget": [
                {"command": "delete", "path": "/memories/team/plan.md"},
                # out of the team's folder into its own: write on the target is there, forget on the source not
                {"command": "rename", "old_path": "/memories/team/plan.md", "new_path": "/memories/p.md"},
            ],
        }
        for perm, inputs in denied.items():
            for tool_input in inputs:
                assert server.execute(tool_input) == CommandResult(
                    f"Error: Permission denied: ro may not {perm} in scope {TEAM}", True
                ), tool_input
        assert files_of(admin) == before
        assert ok(server, "view", path="/memories/team/plan.md").endswith("     1\tplan\n     2\t")


def test_a_move_across_mounts_is_one_commit(admin: MnemoClient, db: str, backend: str) -> None:
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=MOUNTS)
        ok(server, "create", path="/memories/drafts/a.md", file_text="alpha")
        ok(server, "create", path="/memories/drafts/deep/b.md", file_text="beta")
        seq = admin.verify().head_seq
        assert ok(server, "rename", old_path="/memories/drafts", new_path="/memories/team/shared") == (
            "Successfully renamed /memories/drafts to /memories/team/shared"
        )
        assert files_of(admin) == {
            (TEAM, "/memories/shared/a.md"): "alpha",
            (TEAM, "/memories/shared/deep/b.md"): "beta",
        }
        report = admin.verify()
        assert report.ok and report.head_seq == seq + 3  # two puts in the team scope, one forget of both
        if backend == "file":  # one frame on disk: all of it or none of it after a crash
            assert [e.op for e in read_frames(db)[-1].entries] == ["put", "put", "forget"]
        # and back, a file this time, under a new name
        ok(server, "rename", old_path="/memories/team/shared/a.md", new_path="/memories/a.md")
        assert ok(server, "view", path="/memories/a.md").endswith("     1\talpha")
        assert [v.version for v in server.history("/memories/a.md")] == [1]  # a new record in its new scope


def test_a_move_across_mounts_needs_write_on_the_target_and_forget_on_the_source(admin: MnemoClient, db: str) -> None:
    admin.grant("me", TEAM, ["read", "write"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=MOUNTS)
        ok(server, "create", path="/memories/a.md", file_text="a")
        ok(server, "create", path="/memories/team/t.md", file_text="t")
        assert ok(server, "rename", old_path="/memories/a.md", new_path="/memories/team/a.md")
        ok(server, "rename", old_path="/memories/team/t.md", new_path="/memories/team/u.md")  # within: no forget
        before = files_of(admin)
        assert run(server, "rename", old_path="/memories/team/a.md", new_path="/memories/a.md") == CommandResult(
            f"Error: Permission denied: me may not forget in scope {TEAM}", True
        )
        admin.grant("me", TEAM, ["forget"])
        admin.revoke("me", TEAM, ["write"])
        assert run(server, "rename", old_path="/memories/a2.md", new_path="/memories/team/b.md") == CommandResult(
            f"Error: Permission denied: me may not write in scope {TEAM}", True
        )
        assert files_of(admin) == before
        ok(server, "rename", old_path="/memories/team/a.md", new_path="/memories/a.md")  # forget + home write


def test_mount_points_cannot_be_deleted_or_moved(admin: MnemoClient, db: str) -> None:
    admin.grant("me", "team:alpha", ["read", "write", "forget"])
    mounts = {"/memories/projects/alpha": "team:alpha"}
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=mounts)
        ok(server, "create", path="/memories/projects/alpha/x.md", file_text="x")
        ok(server, "create", path="/memories/projects/notes.md", file_text="n")
        before = files_of(admin)
        for tool_input, text in [
            ({"command": "delete", "path": "/memories/projects/alpha/"},
             "Error: Cannot delete the /memories/projects/alpha directory itself"),
            ({"command": "rename", "old_path": "/memories/projects/alpha", "new_path": "/memories/beta"},
             "Error: Cannot rename the /memories/projects/alpha directory itself"),
            ({"command": "delete", "path": "/memories/projects"},
             "Error: Cannot delete /memories/projects: it holds the mount point /memories/projects/alpha"),
            ({"command": "rename", "old_path": "/memories//projects", "new_path": "/memories/p"},
             "Error: Cannot rename /memories//projects: it holds the mount point /memories/projects/alpha"),
            ({"command": "delete", "path": "/memories"}, "Error: Cannot delete the /memories directory itself"),
            ({"command": "create", "path": "/memories/projects/alpha", "file_text": "x"},
             "Error: File /memories/projects/alpha already exists"),
            ({"command": "create", "path": "/memories/projects", "file_text": "x"},
             "Error: File /memories/projects already exists"),
            ({"command": "rename", "old_path": "/memories/projects/notes.md", "new_path": "/memories/projects/alpha"},
             "Error: The destination /memories/projects/alpha already exists"),
            ({"command": "str_replace", "path": "/memories/projects/alpha", "old_str": "x", "new_str": "y"},
             "Error: The path /memories/projects/alpha is not a file."),
        ]:
            assert server.execute(tool_input) == CommandResult(text, True), tool_input
        assert files_of(admin) == before
        ok(server, "delete", path="/memories/projects/notes.md")
        ok(server, "delete", path="/memories/projects/alpha/x.md")
        # both empty now, and still there: mount points and the directories holding them always exist
        assert ok(server, "view", path="/memories") == "\n".join([
            HEADER.format("/memories"), "0B\t/memories", "0B\t/memories/projects/", "0B\t/memories/projects/alpha/",
        ])


def test_a_mount_the_agent_cannot_read_is_not_there(admin: MnemoClient, db: str) -> None:
    """Whatever the secret scope holds, every result is what the agent would get without that mount."""
    admin.grant("me", "team:secret", ["write", "forget"])  # may write there, but not read: still invisible
    secret = MnemoMemoryToolServer(admin, scope="team:secret")
    for path, text in [("/memories/plan.md", "secret plan"), ("/memories/d/x.md", "x" * 5000)]:
        ok(secret, "create", path=path, file_text=text)
    sequence: list[dict[str, Any]] = [
        {"command": "view", "path": "/memories"},
        {"command": "view", "path": "/memories/s"},
        {"command": "view", "path": "/memories/s/plan.md"},
        {"command": "str_replace", "path": "/memories/s/plan.md", "old_str": "secret", "new_str": "x"},
        {"command": "insert", "path": "/memories/s/plan.md", "insert_line": 0, "insert_text": "x"},
        {"command": "delete", "path": "/memories/s/d"},
        {"command": "delete", "path": "/memories/s"},
        {"command": "rename", "old_path": "/memories/s/plan.md", "new_path": "/memories/p.md"},
        {"command": "rename", "old_path": "/memories/s", "new_path": "/memories/p"},
        {"command": "create", "path": "/memories/s/plan.md", "file_text": "mine"},  # lands in its own scope
        {"command": "create", "path": "/memories/s/d", "file_text": "mine"},
        {"command": "view", "path": "/memories"},
        {"command": "view", "path": "/memories/s"},
        {"command": "rename", "old_path": "/memories/s", "new_path": "/memories/t"},
        {"command": "view", "path": "/memories/t/plan.md"},
        {"command": "delete", "path": "/memories/t"},
        {"command": "view", "path": "/memories"},
    ]
    with open_client(db, "me") as me, open_client(db, "other") as other:
        hidden = MnemoMemoryToolServer(me, mounts={"/memories/s": "team:secret"})
        plain = MnemoMemoryToolServer(other)  # the same commands, no mount, another agent's own scope
        for tool_input in sequence:
            got, want = hidden.execute(tool_input), plain.execute(tool_input)
            assert got == want, tool_input
            assert "secret" not in got.text and "5000" not in got.text and "4.9K" not in got.text
    assert files_of(admin)[("team:secret", "/memories/plan.md")] == "secret plan"
    assert ("team:secret", "/memories/d/x.md") in files_of(admin)


def test_history_and_scope_of_a_mounted_path(admin: MnemoClient, db: str) -> None:
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=MOUNTS)
        ok(server, "create", path="/memories/team/a.md", file_text="1")
        ok(server, "str_replace", path="/memories/team/a.md", old_str="1", new_str="2")
        versions = server.history("/memories/team/a.md")
        assert [(v.version, v.content) for v in versions] == [(1, "1"), (2, "2")]
        assert [server.version_path(v) for v in versions] == ["/memories/team/a.md"] * 2
        assert server.scope_of("/memories/team/a.md") == TEAM
        assert server.scope_of("/memories/org/a.md") == "agent:me"  # org is not readable: not mounted for me
        assert server.scope_of("/memories/x") == "agent:me"


def test_a_version_outside_the_mounts_is_shown_at_its_stored_path(admin: MnemoClient, db: str) -> None:
    """A version in a scope this server does not mount, or stored at a path outside the root (written by
    another program), is shown at the path it was stored at, never placed under a mount point; one
    without a path at "?"."""
    admin.grant("me", TEAM, ["read", "write"])
    unmounted = admin.remember("o", tags=("memorytool", "path:/memories/o.md"), scope=ORG)
    outside = admin.remember("x", tags=("memorytool", "path:/elsewhere/x.md"), scope=TEAM)
    untagged = admin.remember("u", scope=TEAM)
    mounted = admin.remember("t", tags=("memorytool", "path:/memories/t.md"), scope=TEAM)
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts={"/memories": "agent:me", "/memories/team": TEAM})
        assert server.version_path(unmounted) == "/memories/o.md"
        assert server.version_path(outside) == "/elsewhere/x.md"
        assert server.version_path(untagged) == "?"
        assert server.version_path(mounted) == "/memories/team/t.md"


def test_a_file_beneath_a_mount_point_shown_later_is_shadowed(admin: MnemoClient, db: str) -> None:
    """A file the agent made at /memories/team/x.md in its own scope, while it could not read the team's,
    is not shown once the team's mount is (docs/MOUNTS.md, shadowed files): the listing holds the team's
    files only, and the path is the team's. It is still stored."""
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts={"/memories/team": TEAM})
        ok(server, "create", path="/memories/team/x.md", file_text="mine")
        admin.grant("me", TEAM, ["read"])
        admin.remember("theirs", tags=("memorytool", "path:/memories/t.md"), scope=TEAM)
        listing = ok(server, "view", path="/memories/team")
        assert "/memories/team/t.md" in listing and "x.md" not in listing
        assert "x.md" not in ok(server, "view", path="/memories")
        assert run(server, "view", path="/memories/team/x.md").is_error
    assert files_of(admin)[("agent:me", "/memories/team/x.md")] == "mine"


@pytest.mark.parametrize("point", ["/memories/team", "/memories/a/team"])
def test_a_file_at_a_fixed_directory_shown_later_is_shadowed_by_it(admin: MnemoClient, db: str, point: str) -> None:
    """A file the agent made where a mount point, or a directory above one, is once that mount is shown:
    the path is a fixed directory then, and a view lists it; the file stays stored."""
    directory = point.rsplit("/", 1)[0] if point.count("/") > 2 else point
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts={point: TEAM})
        ok(server, "create", path=directory, file_text="a file where a directory is")
        admin.grant("me", TEAM, ["read"])
        admin.remember("theirs", tags=("memorytool", "path:/memories/t.md"), scope=TEAM)
        listing = ok(server, "view", path=directory)
        assert listing.startswith(HEADER.format(directory)) and f"{point}/t.md" in listing
        assert "a file where" not in listing
    assert files_of(admin)[("agent:me", directory)] == "a file where a directory is"


@pytest.mark.parametrize("where", ["/memories", "/memories/team"])
def test_a_mounted_server_refuses_bad_paths_and_large_files_in_the_same_words(
    admin: MnemoClient, db: str, where: str
) -> None:
    """Paths that escape or are malformed, files over max_file_bytes (one byte over; exactly at it is
    fine), and an old_str too long to quote whole, give a mounted server, in its root and in a mount,
    the results a single-scope server gives at the same place of its tree."""
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me, open_client(db, "other") as other:
        mounted = MnemoMemoryToolServer(me, mounts={"/memories/team": TEAM}, max_file_bytes=10)
        plain = MnemoMemoryToolServer(other, max_file_bytes=10)
        for tool_input in [
            {"command": "view", "path": "/memories/../../etc/passwd"},
            {"command": "create", "path": "/memories/a\x00b", "file_text": "x"},
            {"command": "create", "path": "/memories/big", "file_text": "x" * 11},
            {"command": "create", "path": "/memories/exact", "file_text": "x" * 10},
            {"command": "str_replace", "path": "/memories/exact", "old_str": "x", "new_str": "yy"},
            {"command": "str_replace", "path": "/memories/exact", "old_str": "", "new_str": "yy"},
            {"command": "str_replace", "path": "/memories/exact", "old_str": "q" * 8000, "new_str": "y"},  # quoted cut
            {"command": "insert", "path": "/memories/exact", "insert_line": 0, "insert_text": "z"},
            {"command": "view", "path": "/memories/exact"},
        ]:
            want = plain.execute(tool_input)
            got = mounted.execute({**tool_input, "path": tool_input["path"].replace("/memories", where, 1)})
            assert got == CommandResult(want.text.replace("/memories", where, 1), want.is_error), tool_input
        with pytest.raises(NotFound) as info:
            mounted.history(f"{where}/none.md")
        assert str(info.value) == f"The path {where}/none.md does not exist"
    scope = "agent:me" if where == "/memories" else TEAM
    assert files_of(admin)[(scope, "/memories/exact")] == "x" * 10


def test_clear_all_clears_the_roots_scope_only(admin: MnemoClient, db: str) -> None:
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=MOUNTS)
        ok(server, "create", path="/memories/a.md", file_text="a")
        ok(server, "create", path="/memories/team/t.md", file_text="t")
        assert server.clear_all() == CommandResult("All memory cleared")
    assert files_of(admin) == {(TEAM, "/memories/t.md"): "t"}


@pytest.mark.parametrize(
    ("mounts", "scope", "message"),
    [
        ({"/elsewhere": TEAM}, None, "Path must start with /memories"),
        ({"/memories//team": TEAM}, None, "must be canonical"),
        ({"/memories/team": TEAM, "/memories/team/": "team:b"}, None, "is given twice"),
        ({"/memories/a": TEAM, "/memories/b": TEAM}, None, "is mounted twice"),
        ({"/memories": TEAM, "/memories/a": "agent:me"}, "agent:me", "give one"),
        ({"/memories/a": "team:*"}, None, "scope"),
        ({"/memories/a": 5}, None, "both strings"),
        ({"/memories/../x": TEAM}, None, "would escape"),
        ([("/memories/a", TEAM)], None, "^mounts must be a mapping of mount point to scope$"),
    ],
)
def test_bad_mount_tables_are_refused(db: str, mounts: Any, scope: str | None, message: str) -> None:
    with open_client(db, "me") as me, pytest.raises(InvalidInput, match=message):
        MnemoMemoryToolServer(me, scope=scope, mounts=mounts)


@pytest.mark.parametrize(("mounts", "scope", "root"), [
    ({"/memories/team": TEAM}, None, "agent:me"),
    ({"/memories/team": TEAM}, ORG, ORG),
    ({"/memories": TEAM}, None, TEAM),
    ({"/memories": TEAM}, TEAM, TEAM),
], ids=["home", "scope-given", "table", "table-and-the-same-scope"])
def test_the_roots_scope_is_the_tables_else_the_one_given_else_home(
    db: str, mounts: dict[str, str], scope: str | None, root: str
) -> None:
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, scope=scope, mounts=mounts)
        assert server.mounts == {**mounts, "/memories": root}
        assert server.scope_of("/memories/a.md") == server.scope == root


def test_moves_across_mounts_lose_no_edit_of_another_process(admin: MnemoClient, db: str) -> None:
    """Another process inserts lines into a file while this one moves it between two mounts: every insert
    the memory tool reported done is in the file, once."""
    edits = 40
    paths = ("/memories/log.md", "/memories/team/log.md")
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts={"/memories/team": TEAM})
        ok(server, "create", path=paths[0], file_text="start\n")
        editor = subprocess.Popen(
            [sys.executable, str(EDITOR), db, "me", str(edits), *paths],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=subprocess_env(),
        )
        try:
            assert editor.stdout is not None
            first = editor.stdout.readline()  # the editor is at work: move the file until it is done
            at, moves = 0, 0
            while editor.poll() is None and moves < 1000:
                ok(server, "rename", old_path=paths[at], new_path=paths[1 - at])
                at, moves = 1 - at, moves + 1
                time.sleep(0.005)  # room for the editor: the writer lock is not a fair queue
            editor.wait(timeout=120)
            out = first + editor.stdout.read()  # through the same buffer as the first line
            err = editor.stderr.read() if editor.stderr is not None else ""
        finally:
            if editor.poll() is None:
                editor.kill()
                editor.wait()
        assert editor.returncode == 0, err
        done = out.split()
        assert done[-1] == "done" and len(done) == edits + 1
        assert moves >= 10, moves  # the moves did overlap the edits
        content = ok(server, "view", path=paths[at])
    lines = [line.split("\t", 1)[1] for line in content.split("\n")[1:]]
    assert sorted(lines) == sorted([*done[:-1], "start", ""])
    assert len(files_of(admin)) == 1  # one file, in one scope


def test_docs_state_the_texts_of_mounts() -> None:
    from mnemo.tools import mounts

    doc = (ROOT / "docs" / "MOUNTS.md").read_text(encoding="utf-8")
    for verb, path in (("delete", "{path}"), ("rename", "{old_path}")):
        assert mounts.FIXED_TEXT.format(verb=verb, point="{mount point}") in doc
        assert mounts.HOLDS_TEXT.format(verb=verb, path=path, point="{mount point}") in doc


# -- what an unreadable mount holds never shows ---------------------------------------------------------

_SEGMENTS = st.sampled_from(("s", "t", "a.md", "b"))
_PATHS = st.lists(_SEGMENTS, max_size=3).map(lambda parts: "/".join(["/memories", *parts]))
_TEXTS = st.sampled_from(("x\n", "one two\n", ""))
_COMMANDS = st.one_of(
    st.builds(lambda p: {"command": "view", "path": p}, _PATHS),
    st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, _PATHS, _TEXTS),
    st.builds(lambda p: {"command": "str_replace", "path": p, "old_str": "x", "new_str": "y"}, _PATHS),
    st.builds(lambda p: {"command": "insert", "path": p, "insert_line": 0, "insert_text": "i"}, _PATHS),
    st.builds(lambda p: {"command": "delete", "path": p}, _PATHS),
    st.builds(lambda a, b: {"command": "rename", "old_path": a, "new_path": b}, _PATHS, _PATHS),
)
_SECRETS = st.lists(st.tuples(_PATHS.filter(lambda p: p != "/memories"), st.sampled_from(("SECRET", "S" * 3000))),
                    max_size=5)


@given(
    perms=st.sets(st.sampled_from(("write", "forget"))),
    secrets=_SECRETS,
    commands=st.lists(_COMMANDS, max_size=25),
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_no_command_tells_anything_of_an_unreadable_mount(
    tmp_path: Path, perms: set[str], secrets: list[tuple[str, str]], commands: list[dict[str, Any]]
) -> None:
    """Three databases: the secret scope mounted and full, mounted and empty, not mounted at all. The
    agent, which may not read it (whatever else it may do there), gets the same result from each."""
    base = Path(tempfile.mkdtemp(dir=tmp_path))
    servers = []
    clients = []
    for name, fill, mounts in (("full", True, {"/memories/s": "team:secret"}),
                               ("empty", False, {"/memories/s": "team:secret"}), ("none", False, None)):
        db = str(base / f"{name}.mnemo.db")
        with MnemoClient(db, "admin", durability="none") as admin:
            if perms:
                admin.grant("me", "team:secret", sorted(perms))
            if fill:
                secret = MnemoMemoryToolServer(admin, scope="team:secret")
                for path, text in secrets:
                    secret.execute({"command": "create", "path": path, "file_text": text})
        client = open_client(db, "me")
        clients.append(client)
        servers.append(MnemoMemoryToolServer(client, mounts=mounts) if mounts else MnemoMemoryToolServer(client))
    try:
        for tool_input in commands:
            full, empty, none = (server.execute(tool_input) for server in servers)
            assert full == empty == none, tool_input
            assert "SECRET" not in full.text and "SSS" not in full.text and "secret" not in full.text
    finally:
        for client in clients:
            client.close()


def test_a_mounted_edit_shows_the_snippet_the_single_scope_server_shows(admin: MnemoClient, db: str) -> None:
    """Line numbers of the edited snippet count every newline before the edit, the file's first too."""
    admin.grant("me", TEAM, ["read", "write"])
    text = "\nfirst\nsecond\nthird\n"
    with open_client(db, "me") as me:
        mounted = MnemoMemoryToolServer(me, mounts=MOUNTS)
        single = MnemoMemoryToolServer(me)
        ok(mounted, "create", path="/memories/team/f.md", file_text=text)
        ok(single, "create", path="/memories/f.md", file_text=text)
        for path_m, path_s in (("/memories/team/f.md", "/memories/f.md"),):
            got = ok(mounted, "str_replace", path=path_m, old_str="third", new_str="3rd")
            assert got == ok(single, "str_replace", path=path_s, old_str="third", new_str="3rd")
            assert "     4\t3rd" in got


@pytest.mark.parametrize("overwrites", [False, True])
def test_create_overwrites_holds_in_every_mount(admin: MnemoClient, db: str, overwrites: bool) -> None:
    """A mounted server creates over an existing file, in its root and in a mount, exactly when it was
    made with create_overwrites (else the single-scope server's refusal)."""
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts={"/memories/team": TEAM}, create_overwrites=overwrites)
        assert server.create_overwrites is overwrites
        for path in ("/memories/a.md", "/memories/team/a.md"):
            ok(server, "create", path=path, file_text="first")
            again = run(server, "create", path=path, file_text="second")
            assert again == (CommandResult(f"File created successfully at: {path}") if overwrites
                             else CommandResult(f"Error: File {path} already exists", True))
    want = "second" if overwrites else "first"
    assert files_of(admin) == {("agent:me", "/memories/a.md"): want, (TEAM, "/memories/a.md"): want}


def test_the_path_limit_bounds_the_stored_path_so_every_listed_file_can_be_addressed(admin: MnemoClient,
                                                                                    db: str) -> None:
    # max_path_length bounds the path a file has in its scope; through /memories/team (5 characters more
    # than the root) its tree path may be 5 characters longer, so a file stored at the limit is listed,
    # viewed, edited, renamed and deleted through the mount (docs/MOUNTS.md §1)
    limit = 40
    at_limit = "/memories/" + "n" * (limit - len("/memories/"))  # 40 characters as stored
    over = at_limit + "x"
    make = MnemoMemoryToolServer(admin, scope=TEAM, max_path_length=limit)
    ok(make, "create", path=at_limit, file_text="hello")
    assert run(make, "create", path=over, file_text="no") == CommandResult(f"Error: Invalid path: {over!r}", True)
    admin.grant("me", TEAM, ["read", "write", "forget"])
    with open_client(db, "me") as me:
        server = MnemoMemoryToolServer(me, mounts=MOUNTS, max_path_length=limit)
        tree = "/memories/team" + at_limit[len("/memories"):]  # 45 characters
        assert ok(server, "view", path="/memories").split("\n")[1:] == [
            "5B\t/memories", "5B\t/memories/team/", f"5B\t{tree}",  # (org: no grant, not shown)
        ]
        assert ok(server, "view", path=tree) == f"Here's the content of {tree} with line numbers:\n     1\thello"
        ok(server, "str_replace", path=tree, old_str="hello", new_str="hi")
        assert files_of(admin) == {(TEAM, at_limit): "hi"}
        # one character more is over the limit as stored: refused, nothing written
        tree_over = tree + "x"
        for command, fields in (("create", {"path": tree_over, "file_text": "x"}), ("view", {"path": tree_over}),
                                ("rename", {"old_path": tree, "new_path": tree_over})):
            shown = fields.get("new_path", fields.get("path"))
            assert run(server, command, **fields) == CommandResult(f"Error: Invalid path: {shown!r}", True)
        assert files_of(admin) == {(TEAM, at_limit): "hi"}
        # measured in NFC too, against what the mount serving it adds (not the deepest mount's 13): U+0958
        # is two characters in NFC, so this path of 45 as sent is 46 and refused
        deeper = MnemoMemoryToolServer(me, mounts={"/memories/team": TEAM, "/memories/organisation": ORG},
                                       max_path_length=limit)
        composed = "/memories/team/" + "n" * (limit + 5 - len("/memories/team/") - 1) + "\u0958"
        assert len(composed) == limit + 5
        assert run(deeper, "create", path=composed, file_text="x") == CommandResult(
            f"Error: Invalid path: {composed!r}", True
        )
        # the root's scope keeps the limit: a 45-character path there is refused
        mine = "/memories/" + "m" * (limit + 5 - len("/memories/"))
        assert run(server, "create", path=mine, file_text="x") == CommandResult(f"Error: Invalid path: {mine!r}", True)
        # so is the tree path of the team's file where the mount is not shown (no read on it): the root's
        admin.revoke("me", TEAM)
        assert run(server, "view", path=tree) == CommandResult(f"Error: Invalid path: {tree!r}", True)
        admin.grant("me", TEAM, ["read", "write", "forget"])
        ok(server, "rename", old_path=tree, new_path="/memories/team/short.md")
        ok(server, "delete", path="/memories/team/short.md")
        assert files_of(admin) == {}
