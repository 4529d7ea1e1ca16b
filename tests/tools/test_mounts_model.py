"""Mounts (docs/MOUNTS.md) against a model: a hypothesis state machine drives two agents' servers over one
database, with a random mount table, random grants and revokes, and random commands, beside a model that
is a dict of scope -> {stored path: content}. Every result, listing, read and error alike, must be the
model's text; after every step the database holds exactly the model's files.

The model resolves each path to the longest mount point the agent may read, so a mount it may not read is
modelled as absent: any result that told something of such a scope would differ from the model's.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import pg
from helpers.budget import examples
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer
from mnemo.tools.quotas import FILES_TEXT
from mnemo.tools.text import EDITED, format_file_view, format_size, insert_text, replace_snippet

ROOT = "/memories"
ADMIN = "admin"
AGENTS = ("ana", "bo")
TEAMS = ("team:a", "team:b")
TABLES = (
    {"/memories/t": "team:a"},
    {"/memories/t": "team:a", "/memories/t/u": "team:b"},
    {"/memories/t": "team:a", "/memories/x/y": "team:b"},
    {"/memories/x/y": "team:a", "/memories/x/z": "team:b"},
)
MAX_FILES = 5
DIR_HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"

PATHS = st.lists(st.sampled_from(("t", "u", "x", "y", "z", "f")), max_size=3).map(lambda s: "/".join([ROOT, *s]))
PICKS = st.integers(0, 99)  # mostly a path the agent sees now (see MountsMachine.pick)
TEXTS = st.sampled_from(("a\n", "b a\n", "", "line1\nline2\n"))
PERMS = st.sets(st.sampled_from(("read", "write", "forget")), min_size=1).map(sorted)


def within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory + "/")


def parents(path: str) -> list[str]:
    """Ancestors of `path` strictly below the root and above it, nearest the root first."""
    parts = path[len(ROOT) + 1 :].split("/") if path != ROOT else []
    return [ROOT + "/" + "/".join(parts[:i]) for i in range(1, len(parts))]


def listing(path: str, files: dict[str, int], dirs: set[str]) -> str:
    """A directory view written from the spec: children and grandchildren, sorted, sizes summed."""
    nodes: set[tuple[str, bool]] = set()
    for rel, deeper in [(f[len(path) + 1 :], False) for f in files] + [(d[len(path) + 1 :], True) for d in dirs]:
        parts = rel.split("/")
        nodes.add((parts[0], len(parts) > 1 or deeper))
        if len(parts) > 1:
            nodes.add((parts[0] + "/" + parts[1], len(parts) > 2 or deeper))

    def size(rel: str, is_dir: bool) -> int:
        full = f"{path}/{rel}"
        return sum(n for f, n in files.items() if f.startswith(full + "/")) if is_dir else files[full]

    lines = [DIR_HEADER.format(path), f"{format_size(sum(files.values()))}\t{path}"]
    for name, is_dir in sorted(n for n in nodes if "/" not in n[0]):
        lines.append(f"{format_size(size(name, is_dir))}\t{path}/{name}{'/' if is_dir else ''}")
        for sub, sub_dir in sorted(n for n in nodes if n[0].startswith(name + "/")):
            lines.append(f"{format_size(size(sub, sub_dir))}\t{path}/{sub}{'/' if sub_dir else ''}")
    return "\n".join(lines)


class Model:
    def __init__(self, table: dict[str, str]) -> None:
        self.table = table
        self.files: dict[str, dict[str, str]] = {}
        self.grants: dict[tuple[str, str], set[str]] = {}

    def may(self, agent: str, perm: str, scope: str) -> bool:
        held = self.grants.get((agent, scope), set())
        return scope == f"agent:{agent}" or perm in held or "admin" in held

    def visible(self, agent: str) -> list[tuple[str, str]]:
        mounts = [(p, s) for p, s in self.table.items() if self.may(agent, "read", s)]
        return sorted(mounts, key=lambda m: (-m[0].count("/"), m[0])) + [(ROOT, f"agent:{agent}")]

    def owner(self, agent: str, path: str) -> tuple[str, str]:
        return next(m for m in self.visible(agent) if within(path, m[0]))

    def held(self, agent: str) -> dict[str, str]:
        out: dict[str, str] = {}
        for point, _ in self.visible(agent)[:-1]:
            for p in [*parents(point), point]:
                out.setdefault(p, point)
        out.setdefault(ROOT, ROOT)
        return out

    @staticmethod
    def stored(mount: tuple[str, str], path: str) -> str:
        return ROOT + path[len(mount[0]) :]

    def shown(self, agent: str) -> dict[str, tuple[tuple[str, str], str]]:
        """Tree path -> (mount, content) of every file the agent sees."""
        held = self.held(agent)
        out = {}
        for mount in self.visible(agent):
            for stored, content in self.files.get(mount[1], {}).items():
                path = mount[0] + stored[len(ROOT) :]
                if self.owner(agent, path) == mount and path not in held:
                    out[path] = (mount, content)
        return out

    def scope_files(self, scope: str) -> dict[str, str]:
        return self.files.setdefault(scope, {})

    def taken(self, agent: str, mount: tuple[str, str], path: str) -> bool:
        stored = self.stored(mount, path)
        files = self.scope_files(mount[1])
        return (
            path in self.held(agent)
            or path == mount[0]
            or stored in files
            or any(within(s, stored) for s in files)
        )

    def blocker(self, mount: tuple[str, str], path: str) -> str | None:
        files = self.scope_files(mount[1])
        for parent in parents(path):
            if within(parent, mount[0]) and parent != mount[0] and self.stored(mount, parent) in files:
                return parent
        return None


class Refused(Exception):
    pass


class MountsMachine(RuleBasedStateMachine):
    make_db: Callable[[], str]

    def __init__(self) -> None:
        super().__init__()
        self.db = self.make_db()
        self.admin = MnemoClient(self.db, ADMIN, durability="none")  # the first to open owns the db
        self.clients: dict[str, MnemoClient] = {}
        self.servers: dict[str, MnemoMemoryToolServer] = {}
        self.model = Model({})

    def teardown(self) -> None:
        for c in self.clients.values():
            c.close()
        self.admin.close()

    @initialize(
        table=st.sampled_from(TABLES),
        grants=st.lists(st.tuples(st.sampled_from(AGENTS), st.sampled_from(TEAMS), PERMS), max_size=4),
        seeds=st.lists(st.tuples(st.sampled_from(AGENTS), PATHS, TEXTS), max_size=8),
    )
    def mount(
        self, table: dict[str, str], grants: list[tuple[str, str, list[str]]], seeds: list[tuple[str, str, str]]
    ) -> None:
        self.model = Model(dict(table))
        for agent in AGENTS:
            client = MnemoClient(self.db, agent, durability="none")
            self.clients[agent] = client
            self.servers[agent] = MnemoMemoryToolServer(
                client, mounts=table, max_files=MAX_FILES, max_total_bytes=None, max_history_bytes=None,
                max_versions_per_file=None,
            )
        for agent, team, perms in grants:
            self.grant(agent, team, perms)
        for agent, path, text in seeds:
            self.create(agent, path, text)

    # -- running a command against the model ----------------------------------------------------------

    def check(self, agent: str, tool_input: dict[str, object], expect: Callable[[], str]) -> None:
        """Run the command and compare with the model's text; `expect` raises Refused(text) for an error
        and changes the model only when it succeeds."""
        result = self.servers[agent].execute(tool_input)
        try:
            text, is_error = expect(), False
        except Refused as refused:
            text, is_error = str(refused), True
        assert (result.text, result.is_error) == (text, is_error), (agent, tool_input)

    def permit(self, agent: str, perm: str, scope: str) -> None:
        if not self.model.may(agent, perm, scope):
            raise Refused(f"Error: Permission denied: {agent} may not {perm} in scope {scope}")

    def quota(self, scope: str, action: str, new: int) -> None:
        n = len(self.model.scope_files(scope))
        if new and n + new > MAX_FILES:
            raise Refused(FILES_TEXT.format(action=action, n=n, limit=MAX_FILES))

    def pick(self, agent: str, pick: int, path: str) -> str:
        """Half the time a file the agent sees, a quarter a path it sees (a file, a directory of one, a mount
        point), else `path`: random paths alone would rarely meet a file."""
        files = sorted(self.model.shown(agent))
        seen = sorted({p for f in files for p in [f, *parents(f)]} | set(self.model.held(agent)))
        if pick < 50 and files:
            return files[pick % len(files)]
        return seen[pick % len(seen)] if pick < 75 else path

    @rule(agent=st.sampled_from(AGENTS), pick=PICKS, path=PATHS)
    def view(self, agent: str, pick: int, path: str) -> None:
        path = self.pick(agent, pick, path)
        m = self.model

        def expect() -> str:
            mount = m.owner(agent, path)
            shown = m.shown(agent)
            if path in shown:
                return format_file_view(path, shown[path][1], None, 16_000).text
            files = {p: len(c.encode()) for p, (_, c) in shown.items() if within(p, path) and p != path}
            dirs = {h for h in m.held(agent) if within(h, path) and h != path}
            if not files and not dirs and path != mount[0]:
                raise Refused(f"The path {path} does not exist. Please provide a valid path.")
            return listing(path, files, dirs)

        self.check(agent, {"command": "view", "path": path}, expect)

    @rule(agent=st.sampled_from(AGENTS), path=PATHS, text=TEXTS)
    def create(self, agent: str, path: str, text: str) -> None:
        m = self.model

        def expect() -> str:
            mount = m.owner(agent, path)
            self.permit(agent, "write", mount[1])
            if m.taken(agent, mount, path):
                raise Refused(f"Error: File {path} already exists")
            blocker = m.blocker(mount, path)
            if blocker is not None:
                raise Refused(f"Error: Cannot create {path}: {blocker} is a file")
            self.quota(mount[1], f"create {path}", 1)
            m.scope_files(mount[1])[m.stored(mount, path)] = text
            return f"File created successfully at: {path}"

        self.check(agent, {"command": "create", "path": path, "file_text": text}, expect)

    def edited(self, agent: str, path: str, missing: str) -> tuple[tuple[str, str], str]:
        m = self.model
        mount = m.owner(agent, path)
        self.permit(agent, "write", mount[1])
        shown = m.shown(agent)
        if path not in shown:
            is_dir = path in m.held(agent) or path == mount[0] or any(within(p, path) for p in shown)
            raise Refused(f"Error: The path {path} is not a file." if is_dir else missing)
        return mount, shown[path][1]

    @rule(agent=st.sampled_from(AGENTS), pick=PICKS, path=PATHS, old=st.sampled_from(("a", "b", "line", "zz")),
          new=st.sampled_from(("A", "")))
    def str_replace(self, agent: str, pick: int, path: str, old: str, new: str) -> None:
        path = self.pick(agent, pick, path)
        def expect() -> str:
            mount, content = self.edited(
                agent, path, f"Error: The path {path} does not exist. Please provide a valid path."
            )
            count = content.count(old)
            if count == 0:
                raise Refused(f"No replacement was performed, old_str `{old}` did not appear verbatim in {path}.")
            if count > 1:
                starts = [i for i in range(len(content)) if content.startswith(old, i)]
                lines = ", ".join(str(content.count("\n", 0, i) + 1) for i in starts)
                raise Refused(
                    f"No replacement was performed. Multiple occurrences of old_str `{old}` in lines: {lines}. "
                    "Please ensure it is unique"
                )
            updated = content.replace(old, new)
            self.model.scope_files(mount[1])[self.model.stored(mount, path)] = updated
            return replace_snippet(updated, content[: content.find(old)].count("\n"), EDITED, 16_000)

        self.check(agent, {"command": "str_replace", "path": path, "old_str": old, "new_str": new}, expect)

    @rule(agent=st.sampled_from(AGENTS), pick=PICKS, path=PATHS, line=st.integers(0, 3),
          text=st.sampled_from(("n", "m\n")))
    def insert(self, agent: str, pick: int, path: str, line: int, text: str) -> None:
        path = self.pick(agent, pick, path)
        def expect() -> str:
            mount, content = self.edited(agent, path, f"Error: The path {path} does not exist")
            updated = insert_text(content, line, text)
            if isinstance(updated, int):
                raise Refused(
                    f"Error: Invalid `insert_line` parameter: {line}. It should be within the range of lines "
                    f"of the file: [0, {updated}]"
                )
            self.model.scope_files(mount[1])[self.model.stored(mount, path)] = updated
            return f"The file {path} has been edited."

        self.check(agent, {"command": "insert", "path": path, "insert_line": line, "insert_text": text}, expect)

    def fixed(self, agent: str, mount: tuple[str, str], path: str, verb: str) -> None:
        if path in (ROOT, mount[0]):
            raise Refused(f"Error: Cannot {verb} the {path} directory itself")
        held = self.model.held(agent)
        if path in held:
            raise Refused(f"Error: Cannot {verb} {path}: it holds the mount point {held[path]}")

    def beneath(self, agent: str, mount: tuple[str, str], path: str) -> list[tuple[str, str]]:
        """(tree path, content) of the shown files of `mount` at or beneath `path`."""
        return [(p, c) for p, (mt, c) in self.model.shown(agent).items() if mt == mount and within(p, path)]

    @rule(agent=st.sampled_from(AGENTS), pick=PICKS, path=PATHS)
    def delete(self, agent: str, pick: int, path: str) -> None:
        path = self.pick(agent, pick, path)
        m = self.model

        def expect() -> str:
            mount = m.owner(agent, path)
            self.permit(agent, "forget", mount[1])
            self.fixed(agent, mount, path, "delete")
            gone = self.beneath(agent, mount, path)
            if not gone:
                raise Refused(f"Error: The path {path} does not exist")
            for p, _ in gone:
                del m.scope_files(mount[1])[m.stored(mount, p)]
            return f"Successfully deleted {path}"

        self.check(agent, {"command": "delete", "path": path}, expect)

    @rule(agent=st.sampled_from(AGENTS), pick=PICKS, old=PATHS, into=PICKS, name=st.sampled_from(("f", "g", "y")),
          new=PATHS)
    def rename(self, agent: str, pick: int, old: str, into: int, name: str, new: str) -> None:
        old = self.pick(agent, pick, old)
        new = self.pick(agent, into, new)
        if into % 2:  # a new name inside a directory that may be in another mount
            new = f"{new}/{name}"
        m = self.model

        def expect() -> str:
            source, target = m.owner(agent, old), m.owner(agent, new)
            self.permit(agent, "write", target[1])
            if source != target:
                self.permit(agent, "forget", source[1])
            self.fixed(agent, source, old, "rename")
            if m.taken(agent, target, new):
                raise Refused(f"Error: The destination {new} already exists")
            moves = self.beneath(agent, source, old)
            if not moves:
                raise Refused(f"Error: The path {old} does not exist")
            if within(new, old):
                raise Refused(f"Error: Cannot move {old} into itself")
            blocker = m.blocker(target, new)
            if blocker is not None:
                raise Refused(f"Error: Cannot create {new}: {blocker} is a file")
            self.quota(target[1], f"rename {old}", len(moves) if source != target else 0)
            for p, content in moves:
                del m.scope_files(source[1])[m.stored(source, p)]
                m.scope_files(target[1])[m.stored(target, new + p[len(old) :])] = content
            return f"Successfully renamed {old} to {new}"

        self.check(agent, {"command": "rename", "old_path": old, "new_path": new}, expect)

    # -- grants ---------------------------------------------------------------------------------------

    @rule(agent=st.sampled_from(AGENTS), team=st.sampled_from(TEAMS), perms=PERMS)
    def grant(self, agent: str, team: str, perms: list[str]) -> None:
        self.admin.grant(agent, team, perms)
        self.model.grants.setdefault((agent, team), set()).update(perms)

    @rule(agent=st.sampled_from(AGENTS), team=st.sampled_from(TEAMS))
    def revoke(self, agent: str, team: str) -> None:
        if self.model.grants.pop((agent, team), None):
            self.admin.revoke(agent, team)

    @invariant()
    def the_database_holds_the_models_files(self) -> None:
        stored: dict[str, dict[str, str]] = {}
        for record in self.admin.query(tags=("memorytool",)):
            (tag,) = [t for t in record.tags if t.startswith("path:")]
            assert isinstance(record.content, str)
            stored.setdefault(record.scope, {})[tag[len("path:") :]] = record.content
        assert stored == {s: f for s, f in self.model.files.items() if f}


@pytest.fixture
def fresh_db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], str]]:
    """A new empty database per call, on the test's backend."""
    if backend == "file":
        yield lambda: os.path.join(tempfile.mkdtemp(dir=tmp_path), "mounts.mnemo.db")
        return
    database = request.getfixturevalue("pg_database")
    if database is None:
        if os.environ.get(pg.REQUIRE) == "1":
            pytest.fail(f"{pg.ENV} is not set: the PostgreSQL backend cannot be tested")
        pytest.skip(f"PostgreSQL tests need {pg.ENV}")
    schemas: list[str] = []

    def make() -> str:
        schema, url = database.new_schema()
        schemas.append(schema)
        return url

    yield make
    for schema in schemas:
        database.drop_schema(schema)


def test_mounts_agree_with_the_model(fresh_db: Callable[[], str], backend: str) -> None:
    class Machine(MountsMachine):
        make_db = staticmethod(fresh_db)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples(100 if backend == "file" else 30),  # the default run half (helpers.budget)
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
