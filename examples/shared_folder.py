"""A team folder inside each agent's own memory: mounts (docs/MOUNTS.md).

    python examples/shared_folder.py

Each agent sees one tree: its own memory at /memories and the scope `team:research` at /memories/team.
The researcher may write the team's folder, the reviewer only read it; moving a note from one's own
memory into the team's folder is one atomic commit. Once the reviewer's grant is revoked, the folder is
simply not there for it any more.
"""

from __future__ import annotations

import os
import tempfile

from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer

TEAM = "team:research"
MOUNTS = {"/memories/team": TEAM}


def listing(server: MnemoMemoryToolServer) -> str:
    lines = server.execute({"command": "view", "path": "/memories"}).text.splitlines()[1:]
    return ", ".join(line.split("\t")[1] for line in lines)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "team.mnemo.db")
        with MnemoClient(db, "owner") as owner:
            owner.grant("researcher", TEAM, ["read", "write", "forget"])
            owner.grant("reviewer", TEAM, ["read"])
        with MnemoClient(db, "researcher") as researcher, MnemoClient(db, "reviewer") as reviewer:
            writes = MnemoMemoryToolServer(researcher, mounts=MOUNTS)
            reads = MnemoMemoryToolServer(reviewer, mounts=MOUNTS)
            writes.execute({"command": "create", "path": "/memories/draft.md", "file_text": "- cache: 2x faster\n"})
            print("researcher:", writes.execute(
                {"command": "rename", "old_path": "/memories/draft.md", "new_path": "/memories/team/cache.md"}
            ).text)
            print("researcher sees:", listing(writes))
            print("reviewer sees:", listing(reads))
            print("reviewer writes:", reads.execute(
                {"command": "str_replace", "path": "/memories/team/cache.md", "old_str": "2x", "new_str": "3x"}
            ).text)
            with MnemoClient(db, "owner") as owner:
                owner.revoke("reviewer", TEAM)
            print("after the revoke, reviewer sees:", listing(reads))
            print("and reads:", reads.execute({"command": "view", "path": "/memories/team/cache.md"}).text)


if __name__ == "__main__":
    main()
