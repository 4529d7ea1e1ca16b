"""Two agents sharing one scope: a researcher writes, a reviewer reads, everyone else sees nothing.

    python examples/shared_scope.py

The database's owner grants `team:research` to both agents (the researcher may write, the reviewer
only read). Each agent works through its own memory-tool server on that scope, and the ACL decides
every command; grants and revokes are chain entries, so who could do what, and since when, is on record.
"""

from __future__ import annotations

import os
import tempfile

from mnemo import MnemoClient, NotFound
from mnemo.audit import read_log
from mnemo.tools.server import MnemoMemoryToolServer

TEAM = "team:research"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "team.mnemo.db")
        with MnemoClient(db, "owner") as owner:  # the agent that creates the database holds admin on *
            owner.grant("researcher", TEAM, ["read", "write"])
            owner.grant("reviewer", TEAM, ["read"])
            print(f"granted: researcher {owner.permissions('researcher')[TEAM]}, "
                  f"reviewer {owner.permissions('reviewer')[TEAM]}")

        with MnemoClient(db, "researcher") as researcher, MnemoClient(db, "reviewer") as reviewer, \
                MnemoClient(db, "outsider") as outsider:
            writes = MnemoMemoryToolServer(researcher, scope=TEAM)
            reads = MnemoMemoryToolServer(reviewer, scope=TEAM)
            print("researcher:", writes.execute({
                "command": "create", "path": "/memories/findings.md",
                "file_text": "- the cache halves read latency\n"}).text)
            print("reviewer sees:", reads.execute({"command": "view", "path": "/memories/findings.md"}).text
                  .splitlines()[1].strip())
            print("reviewer writes:", reads.execute({
                "command": "str_replace", "path": "/memories/findings.md",
                "old_str": "halves", "new_str": "removes"}).text)
            # another agent's client finds nothing: a record it cannot read does not exist for it
            print(f"outsider finds {len(outsider.query(scope=TEAM))} records in {TEAM}")
            findings = researcher.query(scope=TEAM)[0]
            try:
                outsider.get(findings.id)
            except NotFound as exc:
                print(f"outsider get: {type(exc).__name__}: {exc}")

            with MnemoClient(db, "owner") as owner:
                owner.revoke("reviewer", TEAM)
            print("after the revoke, reviewer sees:",
                  reads.execute({"command": "view", "path": "/memories/findings.md"}).text)

        # the chain itself, as an auditor reads it: who was allowed what, in order
        acl = [f"{e.op} {e.body['principal']} {e.body['perms']}"
               for e in (item.entry for item in read_log(db)) if e.op in ("grant", "revoke")]
        print("on the chain:", "; ".join(acl))
        with MnemoClient(db, "owner", readonly=True) as owner:
            print(f"chain check: {'OK' if owner.verify().ok else 'FAILED'}")


if __name__ == "__main__":
    main()
