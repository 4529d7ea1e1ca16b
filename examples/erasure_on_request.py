"""Erasure on request: a user asks for everything about them to be deleted.

    python examples/erasure_on_request.py

`forget_where` appends one forget entry and erases the content, tags and metadata of every version of
the matching records from every file of the database before it returns. The chain still verifies: it
commits only to salted digests of what was erased, and the audit trail shows that the erasure happened,
when, by whom, and why, without holding what was erased. (`mnemo forget DB --tag user:ana --reason ...`
does the same from the shell.)
"""

from __future__ import annotations

import io
import json
import os
import tempfile

from mnemo import MnemoClient, NotFound

SECRET = b"ana@example.com"


def bytes_on_disk(db: str, needle: bytes) -> int:
    """How often `needle` occurs in the database's files: the log and every file beside it."""
    folder, base = os.path.split(db)
    found = 0
    for name in os.listdir(folder):
        if name == base or name.startswith(base + "."):
            with open(os.path.join(folder, name), "rb") as f:
                found += f.read().count(needle)
    return found


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "support.mnemo.db")
        with MnemoClient(db, "support-bot") as client:
            first = client.remember("Ana's email is ana@example.com", tags=["user:ana", "contact"],
                                    metadata={"source": "ticket 1123"})
            client.update(first.id, content="Ana's email is ana@example.com; she prefers mail to calls")
            client.remember("Ana (ana@example.com) reported a login bug", tags=["user:ana", "bug"])
            client.remember("The login bug is fixed in 2.3", tags=["bug"])
            client.close()  # the index snapshot is written too: one more file that must forget
            print(f"before: {bytes_on_disk(db, SECRET)} copies of {SECRET.decode()} in the database files")

        with MnemoClient(db, "support-bot") as client:
            n = client.forget_where(tags=["user:ana"], reason="erasure request from Ana, 2026-11-30")
            print(f"forgot {n} records")
            print(f"after: {bytes_on_disk(db, SECRET)} copies of {SECRET.decode()} in the database files")
            try:
                client.history(first.id)
            except NotFound as exc:
                print(f"history of the first record: {type(exc).__name__}")
            print(f"still there: {[r.content for r in client.query()]}")

            report = client.verify()
            print(f"chain check: {'OK' if report.ok else 'FAILED'}, {report.erased} erased versions, "
                  f"{len(report.problems)} problems")

            trail = io.StringIO()
            client.export_audit(trail, include_content=True)  # content included, wherever it still exists
            for line in trail.getvalue().splitlines():
                entry = json.loads(line)
                if entry["op"] == "forget":
                    print(f"audit: seq {entry['seq']} forget by {entry['agent']}, "
                          f"reason {entry['payload']['reason']!r}")
                elif entry.get("erased"):
                    print(f"audit: seq {entry['seq']} put v{entry['body']['ver']}: erased, "
                          f"forgotten by seq {entry['forgotten_by']['seq']}")
            print(f"the export holds the address: {SECRET.decode() in trail.getvalue()}")


if __name__ == "__main__":
    main()
