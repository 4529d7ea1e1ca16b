"""A second process editing a file that another process keeps moving between two mounts.

    python mounts_editor.py DB AGENT EDITS PATH_A PATH_B

Inserts `<i>` at the top of the file EDITS times, at whichever of the two paths the file is at, and
prints each line it inserted once the memory tool said it succeeded (then `done`). It pauses 10 ms
between edits, as an agent would, so that the other process's moves come in between."""

from __future__ import annotations

import sys
import time

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer

MOUNTS = {"/memories/team": "team:research"}


def main(db: str, agent: str, edits: int, paths: tuple[str, str]) -> None:
    with MnemoClient(db, agent, durability="none") as client:
        server = MnemoMemoryToolServer(client, mounts=MOUNTS)
        for i in range(edits):
            for attempt in range(1000):
                path = paths[attempt % 2]
                result = server.execute({"command": "insert", "path": path, "insert_line": 0, "insert_text": f"<{i}>"})
                if not result.is_error:
                    print(f"<{i}>", flush=True)
                    time.sleep(0.01)
                    break
                if "does not exist" not in result.text:
                    raise SystemExit(f"unexpected: {result.text}")
            else:
                raise SystemExit(f"edit {i} never found the file")
    print("done", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), (sys.argv[4], sys.argv[5]))
