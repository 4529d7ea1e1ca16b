"""Differential test: random command sequences against the SDK's BetaLocalFilesystemMemoryTool and Mnemo.

Outputs must be identical except for the deliberate differences of docs/MEMORY_TOOL.md §9. Each one is
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
- `new_str` omitted ........................ `reference_input` (the reference gets `new_str=""`)
- empty `old_str` .......................... `step` (Mnemo's error is checked; the reference is not run)
- results over `max_view_chars` ............ `cut_lines` (a view is a prefix of the reference's lines plus
                                             the note), `cut_listing` (likewise for a listing),
                                             `cut_snippet` (long snippet lines cut with a mark),
                                             `cut_occurrences` (the first 100 line numbers, then a mark)
- rename into itself ....................... `step` (the reference raises an OSError)
- `view_range` end < -1 .................... `step` (Mnemo's error is checked; the reference is not run)
- invisible and bidirectional characters ... `refused_path` (Mnemo must refuse; the reference is not run)
- NFC ...................................... `reference_input` (the reference gets the paths in NFC) and
                                             `nfc_echoes` (Mnemo's echoes of a path, made NFC to compare)

str_replace / insert on a directory answer alike (`The path {path} is not a file.`, with the prefix).

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
import unicodedata
from collections.abc import Callable
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

MAX_PATH_LENGTH = 64
SMALL_VIEW = 2 * MAX_PATH_LENGTH + 1024  # the least max_view_chars the server accepts with it
SEGMENTS = ["a", "b", "f.txt", "é.md", "e\u0301.md", "node_modules", ".h"]
BAD_PATHS = [
    "/memories/a/../f.txt",
    "/memories/..",
    "/memories/%2e%2e/f.txt",
    "/memories/a%2Ff.txt",
    "/memories/a\\f.txt",
    "/memoriesX/f.txt",
    "/memories_old/a",
    "/memories/a\u200b.txt",
    "/memories/\u202etxt.exe",
    "/memories/\ufeffa",
]
TEXT = st.text(alphabet="ab\n\r é", max_size=24)
# long enough to be cut at SMALL_VIEW: many short lines, or one long line
LONG_TEXT = st.one_of(
    st.builds(lambda unit, n: unit * n, st.text(alphabet="abc\n", min_size=1, max_size=40), st.integers(30, 100)),
    st.builds(lambda n, tail: "ab" * n + tail, st.integers(600, 1500), st.sampled_from(["", "\nc", "\nc\nab"])),
)


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
        st.builds(lambda p, t: {"command": "create", "path": p, "file_text": t}, paths(), LONG_TEXT),
        st.builds(
            lambda p, o, n: {"command": "str_replace", "path": p, "old_str": o, "new_str": n},
            paths(),
            st.text(alphabet="ab\néc", max_size=3),
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


def missing_path_wording(command: dict[str, Any], text: str) -> str:
    """§9 insert on a missing path: the documented text, turned into the reference's (after `nfc_echoes`)."""
    path = unicodedata.normalize("NFC", command.get("path", ""))
    if command["command"] == "insert" and text == f"The path {path} does not exist":
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


LINES_NOTE = re.compile(r"\.\.\. \(showing lines (\d+)-(\d+) of (\d+); use view_range to see the rest\)")
CUT_LINE_NOTE = re.compile(
    r"\.\.\. \(showing lines (\d+)-\1 of (\d+), line \1 cut after (\d+) of (\d+) characters; a result holds at "
    r"most (\d+) characters: split long lines with str_replace to read them whole, and use view_range to see "
    r"other lines\)"
)
LISTING_NOTE = re.compile(
    r"\.\.\. \(showing (\d+) of (\d+) entries; to list what a subdirectory holds, view its path\)"
)


def cut_lines(ours: Outcome, ref: Outcome, file_lines: int, limit: int) -> tuple[Outcome, Outcome]:
    """§9 results over `max_view_chars`: a file view shows the reference's first line (the header) and a
    prefix of its numbered lines, the last one perhaps cut, then the note."""
    lines = ours.text.split("\n")
    whole, cut = LINES_NOTE.fullmatch(lines[-1]), CUT_LINE_NOTE.fullmatch(lines[-1])
    if ours.is_error or (whole is None and cut is None):
        return ours, ref
    assert len(ours.text) <= limit
    ref_lines = ref.text.split("\n")
    shown = lines[:-1]
    if whole is not None:
        a, b, n = map(int, whole.groups())
        assert shown == ref_lines[: len(shown)] and len(shown) == b - a + 2
        assert len(ref_lines) > len(shown), "a note only where lines were left out"
        # maximal: one more whole line and its note would not have fitted
        more = "\n".join(ref_lines[: len(shown) + 1])
        assert len(more) + 1 + len(f"... (showing lines {a}-{b + 1} of {n}; use view_range to see the rest)") > limit
    else:
        assert cut is not None
        a, n, c, length, at_most = map(int, cut.groups())
        assert at_most == limit and len(shown) == 2 and shown[0] == ref_lines[0]
        prefix = f"{a:>6}\t"
        assert ref_lines[1].startswith(shown[1]) and shown[1].startswith(prefix)
        assert len(shown[1]) - len(prefix) == c < length == len(ref_lines[1]) - len(prefix)
    assert n == file_lines
    return Outcome("\n".join(ref_lines[: len(shown)]), False), Outcome("\n".join(ref_lines[: len(shown)]), ref.is_error)


_EDITED = "The memory file has been edited. Here is the snippet showing the change (with line numbers):"
_MARK = re.compile(r"\[\.\.\. (\d+) more characters\]$")


def cut_snippet(ours: Outcome, ref: Outcome, limit: int) -> Outcome:
    """§9 results over `max_view_chars`: a str_replace snippet is the reference's with its long lines cut
    after one width, each followed by the echo mark."""
    if ours.is_error or not ours.text.startswith(_EDITED + "\n") or ours == ref:
        return ours
    assert len(ours.text) <= limit < len(ref.text)
    mine, theirs = ours.text.split("\n"), ref.text.split("\n")
    assert len(mine) == len(theirs) and mine[0] == theirs[0]
    width = (limit - len(_EDITED) - 1) // (len(mine) - 1) - 40
    for line, full in zip(mine[1:], theirs[1:], strict=True):
        mark = _MARK.search(line)
        if mark is None:
            assert line == full and len(full) - 7 <= width
        else:
            kept = line[: mark.start()]
            assert len(kept) - 7 == width and full.startswith(kept) and len(full) - len(kept) == int(mark.group(1))
    return ref


def cut_listing(ours: Outcome) -> tuple[Outcome, tuple[int, int] | None]:
    """§9 results over `max_view_chars`: a listing without its note, and the note's (shown, entries)."""
    lines = ours.text.split("\n")
    note = LISTING_NOTE.fullmatch(lines[-1])
    if ours.is_error or note is None:
        return ours, None
    k, m = map(int, note.groups())
    assert len(lines) == k + 3
    return Outcome("\n".join(lines[:-1]), False), (k, m)


_OCCURRENCES = re.compile(
    r"(No replacement was performed\. Multiple occurrences of old_str `.*` in lines: )(.*)"
    r"(\. Please ensure it is unique)",
    re.DOTALL,
)


def cut_occurrences(ours: Outcome, ref: Outcome) -> Outcome:
    """§9 results over `max_view_chars`: the first 100 line numbers of the reference's list, then a mark."""
    mine, theirs = _OCCURRENCES.fullmatch(ours.text), _OCCURRENCES.fullmatch(ref.text)
    if mine is None or theirs is None or not mine.group(2).endswith(", ... (over 100 occurrences)"):
        return ours
    listed = mine.group(2)[: -len(", ... (over 100 occurrences)")]
    numbers = theirs.group(2).split(", ")
    assert listed.split(", ") == numbers[:100] and len(numbers) > 100
    return Outcome(mine.group(1) + theirs.group(2) + mine.group(3), ours.is_error)


def nfc_echoes(command: dict[str, Any], text: str) -> str:
    """§9 NFC: Mnemo echoes each path as sent; the reference was sent its NFC form."""
    for field in ("path", "old_path", "new_path"):
        value = command.get(field)
        if isinstance(value, str) and unicodedata.normalize("NFC", value) != value:
            text = text.replace(value, unicodedata.normalize("NFC", value))
    return text


def refused_path(command: dict[str, Any]) -> str | None:
    """§9 `..` inside the root, percent-escapes, `/memoriesX`: the error Mnemo must give, if any."""
    for field in ("path", "old_path", "new_path"):
        if field in command:
            try:
                canonicalize(command[field], max_path_length=MAX_PATH_LENGTH)
            except PathError as exc:
                return "Error: " + exc.text
    return None


def reference_input(command: dict[str, Any]) -> dict[str, Any]:
    """§9 `new_str` omitted: the reference crashes on it, so it is sent the equivalent empty string.
    §9 NFC: Mnemo stores and compares paths in NFC, so the reference is sent them in NFC."""
    out = {k: v for k, v in command.items() if v is not None}
    if out["command"] == "str_replace" and "new_str" not in out:
        out["new_str"] = ""
    for field in ("path", "old_path", "new_path"):
        if field in out:
            out[field] = unicodedata.normalize("NFC", out[field])
    return out


def prune_empty_dirs(root: str) -> None:
    """§9 empty directories: Mnemo's directories are implicit, so the reference's empty ones are removed."""
    for directory, _subdirs, _files in os.walk(root, topdown=False):
        if directory != root and not os.listdir(directory):
            os.rmdir(directory)


# -- running both --------------------------------------------------------------------------------------


class Pair:
    """The reference in `workdir`, and Mnemo's server on the database `db` (either backend)."""

    def __init__(self, workdir: str, max_view_chars: int, db: str) -> None:
        self.ref = BetaLocalFilesystemMemoryTool(base_path=os.path.join(workdir, "ref"))
        self.ref_root = os.path.join(workdir, "ref", "memories")
        self.client = MnemoClient(db, "agent-1", durability="none")
        self.max_view_chars = max_view_chars
        self.server = MnemoMemoryToolServer(
            self.client, max_view_chars=max_view_chars, max_path_length=MAX_PATH_LENGTH
        )

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

    def ref_file_lines(self, path: str) -> int:
        """The line count of the reference's file at `path` (0 if it is none)."""
        full = self._ref_file(path)
        if not os.path.isfile(full):
            return 0
        with open(full, encoding="utf-8", newline="") as f:
            return len(f.read().split("\n"))

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

        ours = Outcome(nfc_echoes(command, ours.text), ours.is_error)
        ours, ref = cut_lines(ours, ref, self.ref_file_lines(target), self.max_view_chars)
        ours = strip_error_prefix(ours)
        ours = Outcome(missing_path_wording(command, insert_range_wording(ours.text)), ours.is_error)
        ours = cut_occurrences(ours, ref)
        ours = cut_snippet(ours, ref, self.max_view_chars)
        if name == "view" and not ours.is_error:
            ours, listed = cut_listing(ours)
            ours = Outcome(normalise_listing(ours.text, ours=True), False)
            ref = Outcome(normalise_listing(ref.text, ours=False), ref.is_error)
            if listed is not None:
                shown, entries = listed
                ref_lines = ref.text.split("\n")
                assert len(ref_lines) == entries + 2
                ref = Outcome("\n".join(ref_lines[: shown + 2]), ref.is_error)
        assert len(mine.text) <= self.max_view_chars, command
        assert ours == ref, command
        assert self.ref_state() == self.mnemo_state(), command


def diff_settings(backend: str) -> settings:
    # The same sequences on both; a quarter as many on PostgreSQL (each example costs a schema)
    examples = int(os.environ.get("MNEMO_DIFF_EXAMPLES", "60"))
    return settings(
        max_examples=examples if backend == "file" else max(1, examples // 4),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_differential_against_reference(backend: str, new_db: Callable[[], str]) -> None:
    @diff_settings(backend)
    @given(st.lists(commands(), min_size=1, max_size=14), st.sampled_from([16_000, SMALL_VIEW]))
    def check(sequence: list[dict[str, Any]], max_view_chars: int) -> None:
        with tempfile.TemporaryDirectory() as workdir:
            pair = Pair(workdir, max_view_chars, new_db())
            try:
                for command in sequence:
                    pair.step(command)
            finally:
                pair.close()

    check()


def long_file_commands() -> st.SearchStrategy[list[dict[str, Any]]]:
    """A long file, then views, edits and inserts of it: every cut of a result, on random content."""
    path = "/memories/notes/long.md"
    view_range = st.one_of(st.none(), st.lists(st.integers(-1, 120), min_size=2, max_size=2))
    step = st.one_of(
        st.builds(lambda r: {"command": "view", "path": path, "view_range": r}, view_range),
        st.builds(
            lambda o, n: {"command": "str_replace", "path": path, "old_str": o, "new_str": n},
            st.sampled_from(["a", "ab", "c", "\nc", "b\n"]),
            st.sampled_from(["", "x", "y" * 900, "\n"]),
        ),
        st.builds(
            lambda n, t: {"command": "insert", "path": path, "insert_line": n, "insert_text": t},
            st.integers(0, 3),
            st.sampled_from(["z", "z" * 1200]),
        ),
    )
    return st.builds(
        lambda text, rest: [{"command": "create", "path": path, "file_text": text}, *rest],
        LONG_TEXT,
        st.lists(step, min_size=1, max_size=6),
    )


def test_differential_long_files(backend: str, new_db: Callable[[], str]) -> None:
    @diff_settings(backend)
    @given(long_file_commands())
    def check(sequence: list[dict[str, Any]]) -> None:
        with tempfile.TemporaryDirectory() as workdir:
            pair = Pair(workdir, SMALL_VIEW, new_db())
            try:
                for command in sequence:
                    pair.step(command)
            finally:
                pair.close()

    check()


def test_differential_fixed_story(db: str) -> None:
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
        {"command": "create", "path": "/memories/long.txt", "file_text": "0123456789\n" * 200},
        {"command": "view", "path": "/memories/long.txt"},
        {"command": "view", "path": "/memories/long.txt", "view_range": [150, -1]},
        {"command": "create", "path": "/memories/line.txt", "file_text": "ab" * 1500 + "\nc\nab"},
        {"command": "view", "path": "/memories/line.txt"},
        {"command": "view", "path": "/memories/line.txt", "view_range": [1, 1]},
        {"command": "view", "path": "/memories/line.txt", "view_range": [2, 3]},
        {"command": "str_replace", "path": "/memories/line.txt", "old_str": "ab"},
        {"command": "str_replace", "path": "/memories/line.txt", "old_str": "c", "new_str": "d"},
        {"command": "create", "path": "/memories/cafe\u0301.md", "file_text": "decomposed"},
        {"command": "create", "path": "/memories/caf\u00e9.md", "file_text": "composed"},
        {"command": "view", "path": "/memories/caf\u00e9.md"},
        {"command": "str_replace", "path": "/memories/cafe\u0301.md", "old_str": "posed", "new_str": "POSED"},
        {"command": "view", "path": "/memories/a\u200b"},
        {"command": "view", "path": "/memories/a/../long.txt"},
        {"command": "view", "path": "/memoriesX/long.txt"},
        {"command": "delete", "path": "/memories/archive/"},
        {"command": "delete", "path": "/memories/."},
        {"command": "view", "path": "/memories"},
    ]
    with tempfile.TemporaryDirectory() as workdir:
        pair = Pair(workdir, SMALL_VIEW, db)
        try:
            for command in story:
                pair.step(command)
        finally:
            pair.close()


def test_differential_listing_cut_at_whole_lines(db: str) -> None:
    """A listing over `max_view_chars` is the reference's listing cut at whole lines, plus the note."""
    with tempfile.TemporaryDirectory() as workdir:
        pair = Pair(workdir, SMALL_VIEW, db)
        try:
            for i in range(200):  # seeded on both sides without comparing states after each
                create = {"command": "create", "path": f"/memories/d{i % 4}/file-{i:03d}.md", "file_text": "x" * i}
                assert not pair.server.execute(create).is_error
                pair.ref.call(create)
            assert pair.ref_state() == pair.mnemo_state()
            for path in ("/memories", "/memories/d1", "/memories/d2/"):
                result = pair.server.execute({"command": "view", "path": path})
                assert result.text.endswith("entries; to list what a subdirectory holds, view its path)")
                pair.step({"command": "view", "path": path})
        finally:
            pair.close()
