"""One process of a remember-and-forget race (tests/storage/file/test_reload.py): `writer DB SECONDS`
remembers a record and forgets it, over and over; `reader DB SECONDS` queries. Each prints one JSON line
at the end: how many loops it made and the errors it met."""

from __future__ import annotations

import json
import sys
import time

from mnemo import MnemoClient


def main() -> None:
    role, db, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    loops, errors = 0, []
    with MnemoClient(db, "owner", durability="none") as c:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if role == "writer":
                    c.forget(c.remember("remembered to be forgotten " * 8, tags=["t"]).id)
                else:
                    c.query(tags=["t"])
            except Exception as exc:  # every error is the finding: reported, and the loop goes on
                errors.append(f"{type(exc).__name__}: {exc}")
            loops += 1
    print(json.dumps({"role": role, "loops": loops, "errors": errors}))


if __name__ == "__main__":
    main()
