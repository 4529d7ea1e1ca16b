"""The operator's commands (`forget`, `grant`, `revoke`, `permissions`) and `cat`/`history` by memory-tool
path: exact messages and exit codes, the chain entry each write makes, the ACL deciding every one, and
every refusal leaving the database as it was."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import entries, state, stored
from helpers.cli import run
from helpers.procs import subprocess_env

from mnemo import MnemoClient, audit
from mnemo.tools.server import MnemoMemoryToolServer

HASH = re.compile(r"[0-9a-f]{64}")


def last_entry(db: str) -> Any:
    return entries(db)[-1]


def files(db: str) -> Any:
    """Every file (every table) of the database, to show a refusal changed nothing."""
    return state(db)


@pytest.fixture
def cli_db(db: str) -> tuple[str, dict[str, str]]:
    """owner's database: notes tagged `trip` (one in bob's home, which owner reads too), memory-tool files
    in agent-1's home and in team:x, and grants: agent-1 may read and write team:x, bob may read it."""
    path = db
    ids: dict[str, str] = {}
    with MnemoClient(path, "owner", durability="none") as owner:
        ids["trip1"] = owner.remember("Lisbon in June", tags=["trip"]).id
        ids["trip2"] = owner.remember("night train via Madrid", tags=["trip", "train"]).id
        ids["other"] = owner.remember("unrelated", tags=["misc"]).id
        owner.grant("agent-1", "team:x", ["read", "write"])
        owner.grant("bob", "team:x", ["read"])
    with MnemoClient(path, "bob", durability="none") as bob:
        ids["bob_trip"] = bob.remember("bob's own trip", tags=["trip"]).id
    with MnemoClient(path, "agent-1", durability="none") as agent:
        home = MnemoMemoryToolServer(agent)
        team = MnemoMemoryToolServer(agent, scope="team:x")
        for server, path_, text in ((home, "/memories/people/ana.md", "Ana, vegetarian\n"),
                                    (home, "/memories/trips/lisbon.md", "June\n"),
                                    (home, "/memories/trips/porto.md", "July\n"),
                                    (team, "/memories/trips/lisbon.md", "the team's Lisbon\n")):
            assert not server.execute({"command": "create", "path": path_, "file_text": text}).is_error
        team.execute({"command": "str_replace", "path": "/memories/trips/lisbon.md", "old_str": "team's",
                      "new_str": "whole team's"})
        for info in agent.list_records(tags=["memorytool"]):
            ids[f"{info.scope}:{next(t for t in info.tags if t.startswith('path:'))[5:]}"] = info.id
    return path, ids


# -- forget by id -------------------------------------------------------------------------------------------


def test_forget_by_id(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "forget", str(path), ids["trip1"], ids["trip2"], "--reason", "user asked")
    entry = last_entry(path)
    assert (code, err) == (0, "")
    assert out == f"forgot 2 records (forget entry seq {entry.seq})\n  {ids['trip1']}\n  {ids['trip2']}\n"
    assert entry.op == "forget" and entry.agent == "owner" and entry.body == {"ids": [ids["trip1"], ids["trip2"]]}
    lines = [json.loads(line) for line in _export(path).splitlines()]
    assert lines[entry.seq]["payload"] == {"reason": "user asked"}
    with MnemoClient(path, "owner", readonly=True) as c:
        assert [r.id for r in c.query(tags=["trip"])] == [ids["bob_trip"]]
        assert c.verify().ok
    assert b"Lisbon in June" not in b"".join(stored(path).values())  # erased from every file (table)


def test_forget_by_id_json(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "forget", str(path), ids["other"], "--json")
    entry = last_entry(path)
    assert (code, err) == (0, "")
    assert json.loads(out) == {"forgotten": 1, "ids": [ids["other"]], "already_forgotten": {}, "reason": None,
                               "entry": {"seq": entry.seq, "hash": entry.hash.hex()}}


def test_forget_skips_an_id_already_forgotten_and_forgets_the_rest(
    cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    """Later forgets applied to a backup (README, "Forgetting"): an id the backup already lost is reported
    and skipped, and the others are forgotten, exit 0; an id that was never readable still stops it all."""
    path, ids = cli_db
    assert run(capsys, "forget", str(path), ids["trip1"])[0] == 0
    first = last_entry(path)
    code, out, err = run(capsys, "forget", str(path), ids["trip2"], ids["trip1"], ids["other"])
    entry = last_entry(path)
    assert code == 0
    assert err == (f"mnemo forget: {ids['trip1']} was already forgotten (forget entry seq {first.seq}); nothing "
                   "left to erase\n")
    assert out == f"forgot 2 records (forget entry seq {entry.seq})\n  {ids['trip2']}\n  {ids['other']}\n"
    assert entry.op == "forget" and entry.body == {"ids": [ids["trip2"], ids["other"]]}
    with MnemoClient(path, "owner", readonly=True) as c:
        assert [r.id for r in c.query(tags=["trip"])] == [ids["bob_trip"]] and c.verify().ok
    # every id already forgotten: nothing is written
    before = files(path)
    code, out, err = run(capsys, "forget", str(path), ids["trip1"], ids["trip2"], ids["trip1"], "--json")
    assert (code, err) == (0, "") and json.loads(out) == {
        "forgotten": 0, "ids": [], "already_forgotten": {ids["trip1"]: first.seq, ids["trip2"]: entry.seq},
        "reason": None, "entry": None}
    code, out, err = run(capsys, "forget", str(path), ids["other"])
    assert (code, out) == (0, "forgot 0 records: it was already forgotten; nothing written\n")
    assert err == f"mnemo forget: {ids['other']} was already forgotten (forget entry seq {entry.seq}); nothing " \
                  "left to erase\n"
    assert files(path) == before
    # bob never could read trip1 (the owner's home): to him it is as missing as an id never written, so
    # nothing is forgotten, his own record neither
    missing = "0" * 32
    for unknown in (ids["trip1"], missing):
        assert run(capsys, "forget", str(path), ids["bob_trip"], unknown, "--agent", "bob") == (
            1, "", f"mnemo: no record '{unknown}' that you may read\n")
    assert run(capsys, "forget", str(path), ids["other"], ids["team:x:/memories/trips/lisbon.md"], missing) == (
        1, "", f"mnemo: no record '{missing}' that you may read\n")
    assert files(path) == before


def test_forget_refusals_change_nothing(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    before = files(path)
    missing = "0" * 32
    assert run(capsys, "forget", str(path), ids["trip1"], missing) == (
        1, "", f"mnemo: no record '{missing}' that you may read\n")
    # bob may read team:x but not forget there: nothing is forgotten, not even what he could forget alone
    team_file = ids["team:x:/memories/trips/lisbon.md"]
    assert run(capsys, "forget", str(path), ids["bob_trip"], team_file, "--agent", "bob") == (
        1, "", "mnemo: bob may not forget in scope team:x\n")
    code, out, err = run(capsys, "forget", str(path), ids["trip1"], "--agent", "bob", "--json")  # unreadable
    assert (code, out) == (1, "") and json.loads(err)["error"] == {
        "message": f"no record '{ids['trip1']}' that you may read", "type": "RecordUnavailable", "exit_code": 1}
    code, _out, err = run(capsys, "forget", str(path), team_file, "--agent", "bob", "--json")
    assert code == 1 and json.loads(err)["error"]["type"] == "PermissionDenied"
    assert files(path) == before


@pytest.mark.parametrize(("argv", "message"), [
    ([], "give record IDs, or --tag TAG, or --path PATH (exactly one of them)"),
    (["{trip1}", "--tag", "trip"], "give record IDs, or --tag TAG, or --path PATH (exactly one of them)"),
    (["--tag", "trip", "--path", "/memories/x"], "give record IDs, or --tag TAG, or --path PATH (exactly one of them)"),
    (["{trip1}", "--scope", "team:x"], "--scope goes with --tag or --path, not with IDs"),
    (["--path", "/memories/../etc", "--yes"], "Path /memories/../etc would escape /memories directory"),
    (["--path", "/etc/passwd", "--yes"], "Path must start with /memories, got: /etc/passwd"),
    (["--path", "/memories/x", "--scope", "team:*", "--yes"],
     "--scope 'team:*' contains `*`, the pattern character: a name is never a pattern"),
])
def test_forget_usage_errors(argv: list[str], message: str, cli_db: tuple[str, dict[str, str]],
                             capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    before = files(path)
    args = [a.format(**ids) for a in argv]
    assert run(capsys, "forget", str(path), *args) == (2, "", f"mnemo: error: {message}\n")
    code, out, err = run(capsys, "forget", str(path), *args, "--json")
    assert (code, out) == (2, "") and json.loads(err)["error"] == {"message": message, "type": "UsageError",
                                                                   "exit_code": 2}
    assert files(path) == before


# -- forget by tag and by path ------------------------------------------------------------------------------


def test_forget_by_tag_with_yes(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    code, out, err = run(capsys, "forget", str(path), "--tag", "trip", "--agent", "bob", "--yes", "--json")
    entry = last_entry(path)
    assert (code, err) == (0, "")
    # bob reads only his own trip: owner's trip notes, which he cannot read, are not touched
    assert json.loads(out) == {"forgotten": 1, "ids": [ids["bob_trip"]], "reason": None,
                               "entry": {"seq": entry.seq, "hash": entry.hash.hex()}}
    assert entry.agent == "bob"
    code, out, _err = run(capsys, "forget", str(path), "--tag", "trip", "-y")
    assert code == 0 and out.splitlines() == [f"forgot 2 records (forget entry seq {entry.seq + 1})",
                                              f"  {ids['trip1']}", f"  {ids['trip2']}"]
    assert run(capsys, "forget", str(path), "--tag", "trip", "--yes") == (
        1, "", "mnemo: nothing to forget: no record owner may read has tag 'trip'\n")
    assert run(capsys, "forget", str(path), "--tag", "misc", "--scope", "team:*", "--yes") == (
        1, "", "mnemo: nothing to forget: no record owner may read has tag 'misc' in scope team:*\n")


def test_forget_by_path(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    lisbon, porto = ids["agent:agent-1:/memories/trips/lisbon.md"], ids["agent:agent-1:/memories/trips/porto.md"]
    code, out, err = run(capsys, "forget", str(path), "--path", "/memories/trips/", "--agent", "agent-1", "--yes")
    entry = last_entry(path)
    assert (code, err) == (0, "")
    assert out == (f"forgot 2 records (forget entry seq {entry.seq})\n  {lisbon}  /memories/trips/lisbon.md\n"
                   f"  {porto}  /memories/trips/porto.md\n")
    with MnemoClient(path, "agent-1", readonly=True) as c:
        left = {next(t for t in i.tags if t.startswith("path:")): i.scope for i in c.list_records(tags=["memorytool"])}
    # the team's file at the same path, in another scope, stays
    assert left == {"path:/memories/people/ana.md": "agent:agent-1", "path:/memories/trips/lisbon.md": "team:x"}

    team = ids["team:x:/memories/trips/lisbon.md"]
    code, out, _err = run(capsys, "forget", str(path), "--path", "/memories/trips/lisbon.md", "--scope", "team:x",
                          "--yes", "--json")  # as the owner, who may forget anywhere
    assert code == 0 and json.loads(out)["paths"] == {team: "/memories/trips/lisbon.md"}
    before = files(path)
    assert run(capsys, "forget", str(path), "--path", "/memories/trips", "--agent", "agent-1", "--yes") == (
        1, "", "mnemo: nothing to forget: no memory-tool file at or beneath /memories/trips in scope "
               "agent:agent-1 that agent-1 may read\n")
    assert files(path) == before


def test_forget_by_tag_or_path_needs_yes_without_a_terminal(
    cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ids = cli_db
    before = files(path)
    assert run(capsys, "forget", str(path), "--tag", "trip") == (
        2, "", "mnemo: error: forgetting every record owner may read with tag 'trip' (3 records) needs --yes "
               "when standard input is not a terminal\n")
    assert run(capsys, "forget", str(path), "--path", "/memories", "--agent", "agent-1") == (
        2, "", "mnemo: error: forgetting the memory-tool files at or beneath /memories in scope agent:agent-1 "
               "(3 records) needs --yes when standard input is not a terminal\n")
    assert files(path) == before


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Standard input as a terminal, answering with the given text."""
    import io

    from mnemo.cli import output as cli_output

    def answer(text: str) -> None:
        monkeypatch.setattr(cli_output, "isatty", lambda stream: stream is sys.stdin)
        monkeypatch.setattr(sys, "stdin", io.StringIO(text))

    return answer


def test_forget_asks_on_a_terminal(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str],
                                   terminal: Any) -> None:
    path, ids = cli_db
    before = files(path)
    terminal("n\n")
    code, out, err = run(capsys, "forget", str(path), "--tag", "train")
    assert (code, out) == (1, "")
    assert err == (f"This forgets every record owner may read with tag 'train': 1 record, erased for good:\n"
                   f"  {ids['trip2']}  agent:owner  train trip\n"
                   "Forget them? [y/N]: mnemo: nothing forgotten\n")
    assert files(path) == before
    terminal("\n")  # the default is no
    assert run(capsys, "forget", str(path), "--tag", "train")[0] == 1 and files(path) == before
    terminal("y\n")
    code, out, err = run(capsys, "forget", str(path), "--path", "/memories/people/ana.md", "--agent", "agent-1")
    ana = ids["agent:agent-1:/memories/people/ana.md"]
    assert code == 0 and out.startswith("forgot 1 record (forget entry seq ")
    assert err == (f"This forgets the memory-tool files at or beneath /memories/people/ana.md in scope "
                   f"agent:agent-1: 1 record, erased for good:\n  {ana}  agent:agent-1  /memories/people/ana.md\n"
                   "Forget them? [y/N]: ")


def test_forget_refuses_when_the_selection_changed_while_asking(
    cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    terminal: Any,
) -> None:
    path, ids = cli_db
    import click

    def confirm_while_another_writer_adds(*_args: Any, **_kwargs: Any) -> bool:
        with MnemoClient(path, "owner", durability="none") as other:
            other.remember("added meanwhile", tags=["train"])
        return True

    terminal("y\n")
    monkeypatch.setattr(click, "confirm", confirm_while_another_writer_adds)
    before = len(entries(path))
    code, out, err = run(capsys, "forget", str(path), "--tag", "train")
    assert (code, out) == (1, "") and err.endswith(
        "mnemo: the selection changed while you answered (another writer); nothing forgotten: run the command "
        "again\n")
    with MnemoClient(path, "owner", readonly=True) as c:
        assert len(c.query(tags=["train"])) == 2 and c.get(ids["trip2"]).content == "night train via Madrid"
    assert len(entries(path)) == before + 1 and last_entry(path).op == "put"  # only the other's


def test_forget_on_a_real_terminal(cli_db: tuple[str, dict[str, str]]) -> None:
    path, ids = cli_db
    master, slave = pty.openpty()
    try:
        child = subprocess.Popen([sys.executable, "-m", "mnemo", "forget", str(path), "--tag", "train"],
                                 stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=subprocess_env())
        os.write(master, b"y\n")
        out, err = child.communicate(timeout=60)
    finally:
        os.close(master)
        os.close(slave)
    assert child.returncode == 0, err
    assert "Forget them? [y/N]: " in err and out.startswith("forgot 1 record (forget entry seq ")
    with MnemoClient(path, "owner", readonly=True) as c:
        assert ids["trip2"] not in {r.id for r in c.list_records()}


# -- grant, revoke, permissions -----------------------------------------------------------------------------


def test_grant_revoke_permissions(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    code, out, err = run(capsys, "grant", str(path), "agent-2", "team:research*", "write", "read", "read")
    entry = last_entry(path)
    assert (code, err) == (0, "")
    assert out == f"granted read, write on team:research* to agent-2 (grant entry seq {entry.seq})\n"
    assert (entry.op, entry.agent, entry.body) == (
        "grant", "owner", {"perms": ["read", "write"], "principal": "agent-2", "scope": "team:research*"})
    assert run(capsys, "permissions", str(path), "agent-2") == (0, (
        "permissions of agent-2:\n"
        "  agent:agent-2   admin forget read write\n"
        "  team:research*  read write\n"), "")
    code, out, _err = run(capsys, "permissions", str(path), "--agent", "agent-2", "--json")
    assert code == 0 and json.loads(out) == {"agent": "agent-2", "permissions": {
        "agent:agent-2": ["admin", "forget", "read", "write"], "team:research*": ["read", "write"]}}

    code, out, _err = run(capsys, "revoke", str(path), "agent-2", "team:research*", "write", "--json")
    entry = last_entry(path)
    assert code == 0 and json.loads(out) == {"principal": "agent-2", "scope": "team:research*", "perms": ["write"],
                                             "entry": {"seq": entry.seq, "hash": entry.hash.hex()}}
    code, out, _err = run(capsys, "revoke", str(path), "agent-2", "team:research*")
    entry = last_entry(path)
    assert out == f"revoked every permission on team:research* from agent-2 (revoke entry seq {entry.seq})\n"
    assert entry.body == {"perms": ["read"], "principal": "agent-2", "scope": "team:research*"}
    assert json.loads(run(capsys, "permissions", str(path), "agent-2", "--json")[1])["permissions"] == {
        "agent:agent-2": ["admin", "forget", "read", "write"]}
    assert json.loads(run(capsys, "grant", str(path), "agent-2", "x", "admin", "--json")[1])["perms"] == ["admin"]
    with MnemoClient(path, "owner", readonly=True) as c:
        assert c.verify().ok


def test_the_acl_decides(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    before = files(path)
    assert run(capsys, "grant", str(path), "mallory", "team:x", "admin", "--agent", "bob") == (
        1, "", "mnemo: bob may not admin in scope team:x\n")
    assert run(capsys, "grant", str(path), "bob", "*", "admin", "--agent", "bob") == (
        1, "", "mnemo: bob may not admin in scope *\n")
    assert run(capsys, "revoke", str(path), "agent-1", "team:x", "--agent", "bob") == (
        1, "", "mnemo: bob may not admin in scope team:x\n")
    assert run(capsys, "permissions", str(path), "agent-1", "--agent", "bob") == (
        1, "", "mnemo: bob may not see another agent's permissions: it needs admin on *\n")
    code, out, err = run(capsys, "grant", str(path), "mallory", "team:x", "read", "--agent", "bob", "--json")
    assert (code, out) == (1, "") and json.loads(err)["error"] == {
        "message": "bob may not admin in scope team:x", "type": "PermissionDenied", "exit_code": 1}
    assert files(path) == before
    # an agent shares its own home scope without any grant
    code, out, _err = run(capsys, "grant", str(path), "carol", "agent:bob", "read", "--agent", "bob")
    assert code == 0 and out.startswith("granted read on agent:bob to carol (grant entry seq ")


@pytest.mark.parametrize(("argv", "message"), [
    (["revoke", "{db}", "agent-1", "team:y"], "mnemo: error: agent-1 holds no such grant on scope team:y\n"),
    (["revoke", "{db}", "agent-1", "team:x", "forget"], "mnemo: error: agent-1 holds no such grant on scope team:x\n"),
    (["grant", "{db}", "", "team:x", "read"], "mnemo: error: principal must be a non-empty string, got ''\n"),
    (["grant", "{db}", "agent-2", "team:*x", "read"],
     "mnemo: error: scope 'team:*x' contains `*`, the pattern character: a name is never a pattern\n"),
])
def test_grant_and_revoke_bad_arguments(argv: list[str], message: str, cli_db: tuple[str, dict[str, str]],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    before = files(path)
    assert run(capsys, *[a.format(db=path) for a in argv]) == (2, "", message)
    assert files(path) == before


def test_grant_perm_names_are_checked(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ids = cli_db
    before = files(path)
    code, out, err = run(capsys, "grant", str(path), "agent-2", "team:x", "root")
    assert (code, out) == (2, "") and "Invalid value for 'PERM...': 'root' is not one of" in err
    code, out, err = run(capsys, "grant", str(path), "agent-2", "team:x")
    assert (code, out) == (2, "") and "Missing argument 'PERM...'" in err
    assert files(path) == before


HOLD_LOCK = """
import sys
from mnemo import MnemoClient
with MnemoClient(sys.argv[1], "owner", durability="none") as c, c.transaction():
    print("LOCKED", flush=True)
    sys.stdin.readline()
"""


def test_writes_wait_for_the_lock_at_most_lock_timeout(cli_db: tuple[str, dict[str, str]],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=subprocess_env())
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "LOCKED\n"
        before = files(path)
        for argv in (["forget", str(path), ids["other"]], ["forget", str(path), "--tag", "misc", "--yes"],
                     ["grant", str(path), "agent-2", "x", "read"], ["revoke", str(path), "bob", "team:x"]):
            started = time.monotonic()
            code, out, err = run(capsys, *argv, "--lock-timeout", "0.2", "--json")
            assert (code, out) == (1, "") and json.loads(err)["error"]["type"] == "LockTimeout", argv
            assert 0.2 <= time.monotonic() - started < 5, argv
        assert files(path) == before
    finally:
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.close()
        holder.wait(timeout=30)


# -- cat and history by memory-tool path -------------------------------------------------------------------


def test_cat_and_history_by_path(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    assert run(capsys, "cat", str(path), "/memories/trips/lisbon.md", "--agent", "agent-1") == (0, "June\n", "")
    assert run(capsys, "cat", str(path), "/memories//trips/./lisbon.md", "--agent", "agent-1") == (0, "June\n", "")
    team = ["--scope", "team:x", "--agent", "bob"]
    assert run(capsys, "cat", str(path), "/memories/trips/lisbon.md", *team) == (0, "the whole team's Lisbon\n", "")
    assert run(capsys, "cat", str(path), "/memories/trips/lisbon.md", *team, "--version", "1") == (
        0, "the team's Lisbon\n", "")
    doc = json.loads(run(capsys, "cat", str(path), "/memories/trips/lisbon.md", *team, "--json")[1])
    assert (doc["id"], doc["version"], doc["scope"]) == (ids["team:x:/memories/trips/lisbon.md"], 2, "team:x")
    code, out, _err = run(capsys, "history", str(path), "/memories/trips/lisbon.md", *team, "--json")
    assert code == 0 and [json.loads(line)["content"] for line in out.splitlines()] == [
        "the team's Lisbon\n", "the whole team's Lisbon\n"]


def test_cat_by_path_refusals(cli_db: tuple[str, dict[str, str]], capsys: pytest.CaptureFixture[str]) -> None:
    path, ids = cli_db
    # bob's home holds no such file, and agent-1's home is not his to read: the same answer for both
    for argv in (["--agent", "bob"], ["--agent", "bob", "--scope", "agent:agent-1"]):
        scope = "agent:agent-1" if "--scope" in argv else "agent:bob"
        assert run(capsys, "cat", str(path), "/memories/trips/lisbon.md", *argv) == (
            1, "", f"mnemo: no memory-tool file /memories/trips/lisbon.md in scope {scope} that bob may read\n")
    code, _out, err = run(capsys, "history", str(path), "/memories/nope.md", "--json")
    assert code == 1 and json.loads(err)["error"]["type"] == "NotFound"
    assert run(capsys, "cat", str(path), "/memories/../etc/passwd") == (
        2, "", "mnemo: error: Path /memories/../etc/passwd would escape /memories directory\n")
    assert run(capsys, "cat", str(path), "/memories/trips", "--agent", "agent-1") == (
        1, "", "mnemo: no memory-tool file /memories/trips in scope agent:agent-1 that agent-1 may read\n")
    assert run(capsys, "cat", str(path), ids["trip1"], "--scope", "team:x") == (
        2, "", "mnemo: error: --scope goes with a memory-tool PATH, not with a record ID\n")


def _export(path: Path) -> str:
    import io

    buffer = io.StringIO()
    audit.export_audit(path, buffer, include_content=True)
    return buffer.getvalue()
