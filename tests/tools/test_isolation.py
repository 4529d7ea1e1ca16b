"""Agent B's memory-tool server cannot view, edit, rename into or delete agent A's files, whatever
paths it sends; and deleting a directory of 1,000 files is one commit that erases every one of them.
On both backends."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from helpers.backends import commits, entries, is_pg, stored

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer

A_FILES = {"/memories/notes.md": "A-SECRET-NOTES", "/memories/deep/plan.md": "A-SECRET-PLAN"}

PATHS = [
    "/memories", "/memories/", "/memories/notes.md", "/memories/deep", "/memories/deep/plan.md",
    "/memories/../memories/notes.md", "/memories/./notes.md", "/memories//notes.md",
    "/memories/%2e%2e/agent:a/notes.md", "/memories/..%2fnotes.md", "/memories\\notes.md",
    "/memories/agent:a/notes.md", "/agent:a/memories/notes.md", "/memories/notes.md\x00",
    "../memories/notes.md", "/memoriesX/notes.md", "/memories/deep/../notes.md",
]


def test_another_agents_server_reaches_nothing_of_a(db: str) -> None:
    with MnemoClient(db, "owner", durability="none"):
        pass  # the owner (admin on *) is someone else: a and b are plain agents
    with MnemoClient(db, "a", durability="none") as a, MnemoClient(db, "b", durability="none") as b:
        server_a = MnemoMemoryToolServer(a)
        for path, text in A_FILES.items():
            assert not server_a.execute({"command": "create", "path": path, "file_text": text}).is_error
        a_view = {p: server_a.execute({"command": "view", "path": p}).text for p in A_FILES}
        # b's server in its own home scope, and b's server pointed at a's scope
        for server_b in (MnemoMemoryToolServer(b), MnemoMemoryToolServer(b, scope="agent:a")):
            attempts: list[dict[str, Any]] = []
            for p in PATHS:
                attempts += [
                    {"command": "view", "path": p},
                    {"command": "str_replace", "path": p, "old_str": "A-SECRET", "new_str": "B-WAS-HERE"},
                    {"command": "insert", "path": p, "insert_line": 0, "insert_text": "B-WAS-HERE"},
                    {"command": "delete", "path": p},
                    {"command": "rename", "old_path": p, "new_path": "/memories/stolen.md"},
                    {"command": "create", "path": p, "file_text": "B-WAS-HERE"},
                ]
            for tool_input in attempts:
                result = server_b.execute(tool_input)
                assert not any(secret in result.text for secret in A_FILES.values()), (tool_input, result.text)
            # a's files are exactly as a left them, seen through a's own server
            assert {p: server_a.execute({"command": "view", "path": p}).text for p in A_FILES} == a_view
        assert [r.id for r in a.query(tags=["memorytool"])] and all(
            r.scope == "agent:a" for r in a.query(tags=["memorytool"]))
        assert not any(r.scope == "agent:a" for r in b.query())


def test_deleting_a_directory_of_1000_files_is_one_commit_and_erases_all(db: str) -> None:
    with MnemoClient(db, "a", durability="none") as c:
        server = MnemoMemoryToolServer(c, max_files=None)  # quotas: tests/tools/test_quotas.py
        with c.transaction():  # set up quickly; the delete below is what is measured
            for i in range(1000):
                server.execute({"command": "create", "path": f"/memories/big/f{i:04}.md",
                                "file_text": f"MARKER-{i:04}-CONTENT"})
        server.execute({"command": "create", "path": "/memories/keep.md", "file_text": "KEEP-ME"})
        before = commits(db)
        result = server.execute({"command": "delete", "path": "/memories/big"})
        assert result.text == "Successfully deleted /memories/big" and not result.is_error
        assert commits(db) == before + 1  # one commit
        forget = [e for e in entries(db) if e.op == "forget"]
        assert len(forget) == 1 and len(forget[0].body["ids"]) == 1000
        assert c.verify().ok
    blob = b"".join(stored(db).values())
    assert b"MARKER-" not in blob and b"/memories/big/f" not in blob
    assert b"KEEP-ME" in blob
    if not is_pg(db):
        name = Path(db).name
        assert sorted(os.listdir(Path(db).parent)) == [name, name + ".leaves", name + ".snap"]
