"""Differential test: random command sequences against the SDK's BetaLocalFilesystemMemoryTool and Mnemo.

Outputs must be identical except for the deliberate differences of spec/memory-tool.md §9. Each one is
normalised explicitly below, in its own function, and nothing else is:

- `Error: ` prefix ........................ `strip_error_prefix`
- directory header, node_modules ........... `normalise_listing` (header text; node_modules lines dropped)
- directory sizes .......................... `normalise_listing` (directory sizes masked on both sides)
- `/memories/` listing lines ................ `normalise_listing` (the reference's path column made canonical)
- empty directories ........................ `prune_empty_dirs` (run on the reference after each command)
- `..` inside the root, percent-escapes .... `refused_path` (Mnemo must refuse; the reference is not run)
- `/memoriesX/...` ......................... `refused_path` (likewise)
- insert error wording ..................... `insert_range_wording`
- insert on a missing path ................. `missing_path_wording`
- str_replace / insert on a directory ...... `missing_path_wording`
- `new_str` omitted ........................ `reference_input` (the reference gets `new_str=""`)
- empty `old_str` .......................... `step` (Mnemo's error is checked; the reference is not run)
- long files ............................... `truncated_view` (Mnemo's view is a prefix plus the note)
- rename into itself ....................... `step` (the reference raises an OSError)
- `view_range` end < -1 .................... `step` (Mnemo's error is checked; the reference is not run)

Differences not in §9's table, handled the same explicit way:
- a backslash in a path is refused as traversal (`refused_path`);
- creating or renaming to a path under an existing file, or renaming from one, makes the reference raise
  NotADirectoryError from its mkdir or rename (`step`), where Mnemo answers with the §6 / §8 texts;
- renaming a missing source into its own subtree makes the reference create the source as a directory
  and fail with EINVAL (`step`), where Mnemo reports the missing source (§8 order).
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer
from mnemo.tools.paths import PathError, canonicalize, is_within

tools = pytest.importorskip("anthropic.lib.tools")
from anthropic.tools import BetaLocalFilesystemMemoryTool  # noqa: E402

ToolError = tools.ToolError


@dataclass(frozen=True)
class Outcome:
    text: str
    is_error: bool


# -- the generator -------------------------------------------------------------------------------------

SEGMENTS = ["a", "b", "f.txt", "é.md", "node_modules", ".h"]
BAD_PATHS = [
    "/memories/a/../f.txt",
    "/memories/..",
    "/memories/%2e%2e/f.txt",
    "/memories/a%2Ff.txt",
    "/memories/a\\f.txt",
    "/memoriesX/f.txt",
    "/memories_old/a",
]
TEXT = st.text(alphabet="ab\n\r é", max_size=24)


@st.composite
def paths(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 19)) == 0:
        return draw(st.sampled_from(BAD_PATHS))
    depth = draw(st.integers(0, 3))
    segments = [draw(st.sampled_from(SEGMENTS)) for _ in range(depth)]
    path = "/memories" + "".join("/" + s for s in segments)
    decoration = draw(st.integers(0, 9))
    if decoration == 0:
        path += "/"
    elif decoration == 1:
        path = path.replace("/", "//", 2).replace("//", "/", 1)
    elif decoration == 2:
        path = path.replace("/memories", "/memories/.", 1)
    return path


def commands() -> st.SearchStrategy[dict[str, Any]]:
    view_range = st.one_of(st.none(), st.lists(st.integers(-3, 7), min_size=2, max_size=2))
    return st.one_of(
        st.builds(lambda p, r: {"command": "view", "path": p, "view_range": r}, paths(), view_range),
        st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, paths(), TEXT),
        st.builds(
            lambda p, t: {"command": "create", "path": p, "file_text": t},
            paths(),
            st.text(alphabet="abc\n", min_size=20, max_size=120),
        ),
        st.builds(
            lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o, "new_str": n},
            paths(),
            st.text(alphabet="ab\né", max_size=3),
            st.one_of(st.none(), st.text(alphabet="xy\n", max_size=4)),
        ),
        st.builds(
            lambda p, n, t: {"command": "insert", "path": p, "insert_line": n, "insert_text": t},
            paths(),
            st.integers(-1, 5),
            TEXT,
        ),
        st.builds(lambda p: {"command": "delete", "path": p}, paths()),
        st.builds(lambda o, n: {"command": "rename", "old_path": o, "new_path": n}, paths(), paths()),
    )


# -- the normalisations, one per deviation -----------------------------------------------------------


def strip_error_prefix(outcome: Outcome) -> Outcome:
    """§9 `Error: ` prefix: the reference never writes it."""
    if outcome.is_error and outcome.text.startswith("Error: "):
        return Outcome(outcome.text[len("Error: ") :], True)
    return outcome


def insert_range_wording(text: str) -> str:
    """§9 insert error wording: Mnemo's documented text, turned into the reference's."""
    return re.sub(
        r"It should be within the range of lines of the file: \[0, (\d+)\]$",
        r"It should be within the range [0, \1].",
        text,
    )


def missing_path_wording(command: dict[str, Any], text: str, target_is_dir: bool) -> str:
    """§9 insert on a missing path, and str_replace / insert on a directory."""
    path = command.get("path")
    if command["command"] not in ("insert", "str_replace"):
        return text
    if text in (
        f"The path {path} does not exist",
        f"The path {path} does not exist. Please provide a valid path.",
    ):
        if target_is_dir:
            return f"The path {path} is not a file."
        return f"The path {path} does not exist. Please provide a valid path."
    return text


_REF_HEADER = re.compile(r"^(Here're the files and directories up to 2 levels deep in .*), excluding hidden items:$")
_OUR_HEADER = re.compile(
    r"^(Here're the files and directories up to 2 levels deep in .*), "
    r"excluding hidden items and node_modules:$"
)


def _canonical_column(path: str, first: bool) -> str:
    canonical = canonicalize(path.rstrip("/") or path)
    return canonical if first or not path.endswith("/") else canonical + "/"


def normalise_listing(text: str, ours: bool) -> str:
    """§9 directory header, node_modules, directory sizes and `//` in listing lines."""
    lines = text.split("\n")
    header = (_OUR_HEADER if ours else _REF_HEADER).match(lines[0])
    if header is None:
        return text
    out = [header.group(1) + ", HEADER-SUFFIX"]
    base = None
    for n, line in enumerate(lines[1:]):
        size, _, path = line.partition("\t")
        path = _canonical_column(path, first=n == 0)
        if n == 0:
            base = path
        else:
            assert base is not None
            relative = path[len(base) + 1 :].rstrip("/").split("/")
            if "node_modules" in relative:
                continue
        if n == 0 or path.endswith("/"):
            size = "<dir>"
        out.append(f"{size}\t{path}")
    return "\n".join(out)


def truncated_view(ours: Outcome, ref: Outcome) -> tuple[Outcome, Outcome]:
    """§9 long files: Mnemo shows lines 1..k and a note; the reference shows every line."""
    lines = ours.text.split("\n")
    match = re.fullmatch(r"\.\.\. \(showing lines 1-(\d+) of (\d+); use view_range to see the rest\)", lines[-1])
    if ours.is_error or match is None:
        return ours, ref
    k, n = int(match.group(1)), int(match.group(2))
    ref_lines = ref.text.split("\n")
    assert len(ref_lines) == n + 1, "the note counts the file's lines"
    assert len(lines) == k + 2
    return Outcome("\n".join(lines[:-1]), False), Outcome("\n".join(ref_lines[: k + 1]), ref.is_error)


def refused_path(command: dict[str, Any]) -> str | None:
    """§9 `..` inside the root, percent-escapes, `/memoriesX`: the error Mnemo must give, if any."""
    for field in ("path", "old_path", "new_path"):
        if field in command:
            try:
                canonicalize(command[field])
            except PathError as exc:
                return "Error: " + exc.text
    return None


def reference_input(command: dict[str, Any]) -> dict[str, Any]:
    """§9 `new_str` omitted: the reference crashes on it, so it is sent the equivalent empty string."""
    out = {k: v for k, v in command.items() if v is not None}
    if out["command"] == "str_replace" and "new_str" not in out:
        out["new_str"] = ""
    return out


def prune_empty_dirs(root: str) -> None:
    """§9 empty directories: Mnemo's directories are implicit, so the reference's empty ones are removed."""
    for directory, _subdirs, _files in os.walk(root, topdown=False):
        if directory != root and not os.listdir(directory):
            os.rmdir(directory)


# -- running both --------------------------------------------------------------------------------------


class Pair:
    def __init__(self, workdir: str, max_view_chars: int) -> None:
        self.ref = BetaLocalFilesystemMemoryTool(base_path=os.path.join(workdir, "ref"))
        self.ref_root = os.path.join(workdir, "ref", "memories")
        self.client = MnemoClient(os.path.join(workdir, "m.mnemo.db"), "agent-1", durability="none")
        self.server = MnemoMemoryToolServer(self.client, max_view_chars=max_view_chars)

    def close(self) -> None:
        self.client.close()

    def run_reference(self, command: dict[str, Any]) -> Outcome | BaseException:
        try:
            result = self.ref.call(reference_input(command))
        except ToolError as exc:
            assert isinstance(exc.content, str)
            return Outcome(exc.content, True)
        except Exception as exc:
            return exc
        assert isinstance(result, str)
        return Outcome(result, False)

    def _ref_file(self, path: str) -> str:
        return os.path.join(self.ref_root, canonicalize(path)[len("/memories/") :])

    def ref_is_dir(self, path: str) -> bool:
        return os.path.isdir(self._ref_file(path))

    def ref_under_file(self, path: str) -> bool:
        canonical = canonicalize(path)
        parts = canonical[len("/memories/") :].split("/")
        current = self.ref_root
        for part in parts[:-1]:
            current = os.path.join(current, part)
            if os.path.isfile(current):
                return True
        return False

    def ref_state(self) -> dict[str, str]:
        out = {}
        for directory, _subdirs, files in os.walk(self.ref_root):
            for name in files:
                full = os.path.join(directory, name)
                with open(full, encoding="utf-8", newline="") as f:
                    out["/memories/" + os.path.relpath(full, self.ref_root)] = f.read()
        return out

    def mnemo_state(self) -> dict[str, str]:
        out = {}
        for info in self.client.list_records(tags=("memorytool",)):
            (tag,) = [t for t in info.tags if t.startswith("path:")]
            content = self.client.get(info.id).content
            assert isinstance(content, str)
            out[tag[len("path:") :]] = content
        return out

    def step(self, command: dict[str, Any]) -> None:
        mine = self.server.execute(command)
        ours = Outcome(mine.text, mine.is_error)
        assert not ours.text.startswith("Error: Internal error"), ours

        refused = refused_path(command)
        if refused is not None:
            assert ours == Outcome(refused, True)
            return
        name = command["command"]
        if name == "str_replace" and command["old_str"] == "" and ours.text == "Error: `old_str` must not be empty":
            return
        if name == "view" and ours.text.startswith("Error: Invalid `view_range`"):
            assert command["view_range"][1] < -1
            assert ours.text == f"Error: Invalid `view_range`: {command['view_range']}"
            return

        target = command.get("path", "/memories")
        target_is_dir = self.ref_is_dir(target)
        dest_under_file = name == "rename" and self.ref_under_file(command["new_path"])
        into_itself = name == "rename" and is_within(
            canonicalize(command["new_path"]), canonicalize(command["old_path"])
        )
        source_exists = name == "rename" and os.path.exists(self._ref_file(command["old_path"]))
        ref = self.run_reference(command)
        prune_empty_dirs(self.ref_root)

        if isinstance(ref, BaseException):
            assert isinstance(ref, OSError), repr(ref)
            if name == "rename" and into_itself:
                # the reference makes the destination's parent (inside the source) before any check
                expected = (
                    f"Error: Cannot move {command['old_path']} into itself"
                    if source_exists
                    else f"Error: The path {command['old_path']} does not exist"
                )
                assert ours == Outcome(expected, True)
            elif name == "rename":
                # the reference's mkdir or rename meets a file on the way: NotADirectoryError
                assert isinstance(ref, NotADirectoryError), repr(ref)
                assert dest_under_file or self.ref_under_file(command["old_path"])
                if not source_exists:
                    assert ours == Outcome(f"Error: The path {command['old_path']} does not exist", True)
                else:
                    assert re.fullmatch(
                        rf"Error: Cannot create {re.escape(command['new_path'])}: /memories/.+ is a file",
                        ours.text,
                    )
            else:
                assert name == "create" and isinstance(ref, NotADirectoryError), repr(ref)
                assert re.fullmatch(
                    rf"Error: Cannot create {re.escape(command['path'])}: /memories/.+ is a file", ours.text
                )
            assert self.ref_state() == self.mnemo_state()
            return

        ours, ref = truncated_view(ours, ref)
        ours = strip_error_prefix(ours)
        ours = Outcome(missing_path_wording(command, insert_range_wording(ours.text), target_is_dir), ours.is_error)
        if name == "view" and not ours.is_error:
            ours = Outcome(normalise_listing(ours.text, ours=True), False)
            ref = Outcome(normalise_listing(ref.text, ours=False), ref.is_error)
        assert ours == ref, command
        assert self.ref_state() == self.mnemo_state(), command


@settings(
    max_examples=int(os.environ.get("MNEMO_DIFF_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(commands(), min_size=1, max_size=14), st.sampled_from([16_000, 40]))
def test_differential_against_reference(sequence: list[dict[str, Any]], max_view_chars: int) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        pair = Pair(workdir, max_view_chars)
        try:
            for command in sequence:
                pair.step(command)
        finally:
            pair.close()


def test_differential_fixed_story() -> None:
    """A hand-written sequence that visits every normalisation at least once."""
    story: list[dict[str, Any]] = [
        {"command": "view", "path": "/memories"},
        {"command": "create", "path": "/memories/notes/todo.md", "file_text": "- milk\n- eggs\n- bread\n"},
        {"command": "create", "path": "/memories/node_modules/x.js", "file_text": "js"},
        {"command": "create", "path": "/memories/.h/secret", "file_text": "s"},
        {"command": "create", "path": "/memories/notes/deep/er/file", "file_text": "d"},
        {"command": "view", "path": "/memories/"},
        {"command": "view", "path": "/memories//notes/."},
        {"command": "view", "path": "/memories/notes/todo.md", "view_range": [2, -1]},
        {"command": "view", "path": "/memories/notes/todo.md", "view_range": [2, -5]},
        {"command": "str_replace", "path": "/memories/notes/todo.md", "old_str": "eggs", "new_str": "ham"},
        {"command": "str_replace", "path": "/memories/notes/todo.md", "old_str": "- "},
        {"command": "str_replace", "path": "/memories/notes/todo.md", "old_str": "milk\n"},
        {"command": "str_replace", "path": "/memories/notes/todo.md", "old_str": ""},
        {"command": "str_replace", "path": "/memories/notes", "old_str": "x", "new_str": "y"},
        {"command": "insert", "path": "/memories/notes/todo.md", "insert_line": 9, "insert_text": "x"},
        {"command": "insert", "path": "/memories/notes/none.md", "insert_line": 0, "insert_text": "x"},
        {"command": "insert", "path": "/memories/notes", "insert_line": 0, "insert_text": "x"},
        {"command": "insert", "path": "/memories/notes/todo.md", "insert_line": 1, "insert_text": "jam\n"},
        {"command": "create", "path": "/memories/notes/todo.md/x", "file_text": "x"},
        {"command": "rename", "old_path": "/memories/notes", "new_path": "/memories/notes/inner"},
        {"command": "rename", "old_path": "/memories/notes/todo.md", "new_path": "/memories/notes/todo.md/x"},
        {"command": "rename", "old_path": "/memories/notes/deep", "new_path": "/memories/notes/todo.md/d"},
        {"command": "rename", "old_path": "/memories/notes/deep", "new_path": "/memories/archive/deep"},
        {"command": "view", "path": "/memories/notes/deep"},
        {"command": "create", "path": "/memories/notes/deep", "file_text": "now a file"},
        {"command": "create", "path": "/memories/long.txt", "file_text": "0123456789\n" * 10},
        {"command": "view", "path": "/memories/long.txt"},
        {"command": "view", "path": "/memories/a/../long.txt"},
        {"command": "view", "path": "/memoriesX/long.txt"},
        {"command": "delete", "path": "/memories/archive/"},
        {"command": "delete", "path": "/memories/."},
        {"command": "view", "path": "/memories"},
    ]
    with tempfile.TemporaryDirectory() as workdir:
        pair = Pair(workdir, max_view_chars=40)
        try:
            for command in story:
                pair.step(command)
        finally:
            pair.close()
