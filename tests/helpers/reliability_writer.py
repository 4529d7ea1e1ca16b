"""Crash-matrix writer: a child process that runs a random mix of operations on a db until it is killed.

    python -m helpers.reliability_writer DB --seed S [--ops N] [--durability MODE]
                                            [--fault AT:ACTION:WHEN[:TORN[:KINDS]]] [--short N]

Operations: remember, update (with expected_version), forget, a transaction mixing creates, an update
and a forget, and through the memory tool: create, insert / str_replace, rename of a directory, delete
of a directory; and compact. Before each operation it prints an intent line (what the operation will
set, drop and create); after the operation returned, an ack line with the ids it created. Every line is
JSON, flushed at once. `--fault` installs helpers.reliability_faults with that fault (before the db is
opened, so recovery on open is exposed too); `--short N` makes every write a short write.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable

from helpers.reliability_faults import Injector, parse_fault
from helpers.reliability_model import Intent, Value, value
from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer

AGENT = "writer"
ROOT = "/memories"
PADS = (0, 0, 10, 100, 700, 3000, 9000)
MAX_PLAIN = 60
MAX_FILES = 30

Live = dict[str, tuple[int, str, tuple[str, ...]]]  # id -> (version, content, tags)


def emit(obj: dict[str, object] | str) -> None:
    sys.stdout.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
    sys.stdout.flush()


class Writer:
    def __init__(self, client: MnemoClient, seed: int, compact: bool = True) -> None:
        self.c = client
        self.compact = compact
        self.tool = MnemoMemoryToolServer(client)
        self.rng = random.Random(seed)
        self.seed = seed
        self.live: Live = {r.id: (r.version, str(r.content), r.tags) for r in client.query()}
        self.i = 0

    # -- helpers ---------------------------------------------------------------------------------------
    def tok(self) -> str:
        return f"s{self.seed}o{self.i}"

    def pad(self) -> str:
        return "x" * self.rng.choice(PADS)

    def plain(self) -> list[str]:
        return sorted(k for k, v in self.live.items() if "plain" in v[2])

    def files(self) -> dict[str, str]:
        """path -> id of every memory-tool file."""
        out = {}
        for rid, (_v, _c, tags) in self.live.items():
            for t in tags:
                if t.startswith("path:"):
                    out[t[5:]] = rid
        return out

    def dirs(self) -> list[str]:
        return sorted({"/".join(p.split("/")[:3]) for p in self.files()})

    def val(self, rid: str) -> Value:
        ver, content, tags = self.live[rid]
        return value(ver, content, tags)

    def call(self, command: str, **fields: object) -> str:
        block = self.tool.handle({"type": "tool_use", "id": self.tok(), "name": "memory",
                                  "input": {"command": command, **fields}})
        assert not block.get("is_error"), (command, fields, block)
        return str(block["content"])

    def file_id(self, path: str) -> str:
        found = self.c.list_records(tags=["memorytool", f"path:{path}"])
        assert len(found) == 1, (path, found)
        return found[0].id

    # -- operations: each returns (intent, run), run() returning the ids it created ----------------------
    def op_remember(self) -> tuple[Intent, Callable[[], list[str]]]:
        content = f"rem {self.tok()} {self.pad()}"
        tags = sorted({"plain", f"n{self.rng.randrange(5)}"})
        intent = Intent(self.i, "remember", new=[value(1, content, tags)])

        def run() -> list[str]:
            rec = self.c.remember(content, tags=tags)
            assert (rec.version, rec.content, rec.tags) == (1, content, tuple(tags))
            self.live[rec.id] = (1, content, tuple(tags))
            return [rec.id]

        return intent, run

    def op_update(self) -> tuple[Intent, Callable[[], list[str]]] | None:
        ids = self.plain()
        if not ids:
            return None
        rid = self.rng.choice(ids)
        ver, _content, tags = self.live[rid]
        content = f"upd {self.tok()} {self.pad()}"
        new_tags = tuple(sorted({"plain", f"n{self.rng.randrange(5)}"})) if self.rng.random() < 0.5 else None
        final_tags = tags if new_tags is None else new_tags
        intent = Intent(self.i, "update", set={rid: value(ver + 1, content, final_tags)})

        def run() -> list[str]:
            rec = self.c.update(rid, content=content, tags=new_tags, expected_version=ver)
            assert (rec.version, rec.content, rec.tags) == (ver + 1, content, final_tags)
            self.live[rid] = (ver + 1, content, final_tags)
            return []

        return intent, run

    def op_forget(self) -> tuple[Intent, Callable[[], list[str]]] | None:
        if not self.live:
            return None
        ids = self.rng.sample(sorted(self.live), min(len(self.live), self.rng.randint(1, 2)))
        intent = Intent(self.i, "forget", drop=ids)

        def run() -> list[str]:
            assert self.c.forget(ids, reason=f"crash test {self.tok()}") == len(ids)
            for rid in ids:
                del self.live[rid]
            return []

        return intent, run

    def op_transaction(self) -> tuple[Intent, Callable[[], list[str]]]:
        group = f"tx{self.tok()}"
        creates = [(f"txn {group} {k} {self.pad()}", ["plain", group]) for k in range(self.rng.randint(2, 5))]
        plain = self.plain()
        upd = fgt = None
        if len(plain) >= 2:
            upd, fgt = self.rng.sample(plain, 2)
        intent = Intent(self.i, "transaction", new=[value(1, c, t) for c, t in creates])
        upd_content = f"txu {group} {self.pad()}"
        if upd is not None and fgt is not None:
            ver, _c, tags = self.live[upd]
            intent.set[upd] = value(ver + 1, upd_content, tags)
            intent.drop.append(fgt)

        def run() -> list[str]:
            with self.c.transaction():
                recs = [self.c.remember(c, tags=t) for c, t in creates]
                if upd is not None and fgt is not None:
                    ver = self.live[upd][0]
                    self.c.update(upd, content=upd_content, expected_version=ver)
                    self.c.forget([fgt])
            for rec, (c, t) in zip(recs, creates, strict=True):
                self.live[rec.id] = (1, c, tuple(sorted(t)))
            if upd is not None and fgt is not None:
                ver, _c, tags = self.live[upd]
                self.live[upd] = (ver + 1, upd_content, tags)
                del self.live[fgt]
            return [r.id for r in recs]

        return intent, run

    def op_tool_create(self) -> tuple[Intent, Callable[[], list[str]]]:
        dirs = self.dirs()
        d = self.rng.choice(dirs) if dirs and self.rng.random() < 0.6 else f"{ROOT}/d{self.tok()}"
        if self.rng.random() < 0.3:
            d += "/sub"
        path = f"{d}/f{self.tok()}.txt"
        text = "".join(f"<{self.tok()}-{j}>\n" for j in range(self.rng.randint(1, 6)))
        tags = ("memorytool", f"path:{path}")
        intent = Intent(self.i, "tool-create", new=[value(1, text, tags)])

        def run() -> list[str]:
            self.call("create", path=path, file_text=text)
            rid = self.file_id(path)
            self.live[rid] = (1, text, tags)
            return [rid]

        return intent, run

    def op_tool_edit(self) -> tuple[Intent, Callable[[], list[str]]] | None:
        files = self.files()
        if not files:
            return None
        path = self.rng.choice(sorted(files))
        rid = files[path]
        ver, content, tags = self.live[rid]
        line = f"<{self.tok()}>"
        if self.rng.random() < 0.5:
            new_content = content + line + "\n"
            command: dict[str, object] = {"command": "insert", "path": path,
                                          "insert_line": content.count("\n"), "insert_text": line}
        else:
            last = content.splitlines()[-1]
            new_content = content.replace(last, f"{last}\n{line}")
            command = {"command": "str_replace", "path": path, "old_str": last, "new_str": f"{last}\n{line}"}
        intent = Intent(self.i, "tool-edit", set={rid: value(ver + 1, new_content, tags)})

        def run() -> list[str]:
            self.call(**command)  # type: ignore[arg-type]
            self.live[rid] = (ver + 1, new_content, tags)
            return []

        return intent, run

    def op_tool_rename_dir(self) -> tuple[Intent, Callable[[], list[str]]] | None:
        dirs = self.dirs()
        if not dirs:
            return None
        old = self.rng.choice(dirs)
        new = f"{ROOT}/d{self.tok()}"
        moves = {rid: new + p[len(old):] for p, rid in self.files().items() if p.startswith(old + "/")}
        intent = Intent(self.i, "tool-rename-dir")
        after = {}
        for rid, target in moves.items():
            ver, content, _tags = self.live[rid]
            t = ("memorytool", f"path:{target}")
            intent.set[rid] = value(ver + 1, content, t)
            after[rid] = (ver + 1, content, t)

        def run() -> list[str]:
            self.call("rename", old_path=old, new_path=new)
            self.live.update(after)
            return []

        return intent, run

    def op_tool_delete_dir(self) -> tuple[Intent, Callable[[], list[str]]] | None:
        dirs = self.dirs()
        if not dirs:
            return None
        d = self.rng.choice(dirs)
        ids = [rid for p, rid in self.files().items() if p.startswith(d + "/")]
        intent = Intent(self.i, "tool-delete-dir", drop=ids)

        def run() -> list[str]:
            self.call("delete", path=d)
            for rid in ids:
                del self.live[rid]
            return []

        return intent, run

    def op_compact(self) -> tuple[Intent, Callable[[], list[str]]]:
        def run() -> list[str]:
            self.c.compact()
            return []

        return Intent(self.i, "compact"), run

    def choose(self) -> tuple[Intent, Callable[[], list[str]]]:
        n_plain, n_files = len(self.plain()), len(self.files())
        weights = {
            self.op_remember: 20 if n_plain < MAX_PLAIN else 2,
            self.op_update: 20,
            self.op_forget: 8 if n_plain + n_files < MAX_PLAIN else 25,
            self.op_transaction: 12 if n_plain < MAX_PLAIN else 2,
            self.op_tool_create: 12 if n_files < MAX_FILES else 1,
            self.op_tool_edit: 12,
            self.op_tool_rename_dir: 8,
            self.op_tool_delete_dir: 2 if n_files < MAX_FILES else 10,
            self.op_compact: 3 if self.compact else 0,
        }
        while True:
            op = self.rng.choices(list(weights), list(weights.values()))[0]
            chosen = op()
            if chosen is not None:
                return chosen

    def run(self, ops: int) -> None:
        for self.i in range(ops):
            intent, run = self.choose()
            emit(intent.to_json())
            ids = run()
            emit({"t": "ack", "i": self.i, "ids": ids})


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("db")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ops", type=int, default=100_000)
    p.add_argument("--durability", default="fsync")
    p.add_argument("--fault", default="")
    p.add_argument("--short", type=int, default=0)
    a = p.parse_args()
    import os

    injector = None
    if a.fault or a.short:
        injector = Injector(
            os.path.dirname(os.path.abspath(a.db)), fault=parse_fault(a.fault) if a.fault else None,
            short=a.short or None, rng=random.Random(a.seed),
        ).install()  # fmt: skip
    with MnemoClient(a.db, AGENT, durability=a.durability, lock_timeout=30.0) as client:
        emit({"t": "ready", "recovery": client.recovery})
        Writer(client, a.seed).run(a.ops)
    emit({"t": "done", "events": len(injector.events) if injector else None})


if __name__ == "__main__":
    main()
