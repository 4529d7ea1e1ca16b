"""Memory-tool paths (docs/MEMORY_TOOL.md §4): canonical form, a traversal corpus that must never get
out, look-alike characters, and NFC."""

from __future__ import annotations

import sys
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer
from mnemo.tools.paths import PathError, ancestors, canonicalize, check_root, is_within, retagged
from mnemo.validation import path_problem

# -- canonical form ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "canonical"),
    [
        ("/memories", "/memories"),
        ("/memories/", "/memories"),
        ("/memories/.", "/memories"),
        ("/memories//", "/memories"),
        ("/memories/./", "/memories"),
        ("/memories/a", "/memories/a"),
        ("/memories/a/", "/memories/a"),
        ("/memories//a//b/", "/memories/a/b"),
        ("/memories/./a/./b/.", "/memories/a/b"),
        ("/memories/.hidden/x", "/memories/.hidden/x"),
        ("/memories/...", "/memories/..."),
        ("/memories/a..b", "/memories/a..b"),
        ("/memories/100%", "/memories/100%"),
        ("/memories/%zz", "/memories/%zz"),
        ("/memories/%2", "/memories/%2"),
        ("/memories/%u002e%u002e", "/memories/%u002e%u002e"),
        ("/memories/ａｂ", "/memories/ａｂ"),  # fullwidth letters are letters (a fullwidth solidus is refused)
        ("/memories/notes file.md", "/memories/notes file.md"),
    ],
)
def test_canonical(path: str, canonical: str) -> None:
    assert canonicalize(path) == canonical


def test_custom_root() -> None:
    assert canonicalize("/notes/x//y/", root="/notes") == "/notes/x/y"
    with pytest.raises(PathError) as info:
        canonicalize("/memories/x", root="/notes")
    assert info.value.text == "Path must start with /notes, got: /memories/x"
    with pytest.raises(PathError) as info:
        canonicalize("/notes/../x", root="/notes")
    assert info.value.text == "Path /notes/../x would escape /notes directory"
    assert check_root("/team/shared/") == "/team/shared"
    for bad in ["", "/", "memories", "/a/../b", "/a//b", "/a\\b", "/a%2e", "/a\x00"]:
        with pytest.raises(ValueError):
            check_root(bad)


def test_helpers() -> None:
    assert ancestors("/memories/a/b/c") == ["/memories/a", "/memories/a/b"]
    assert ancestors("/memories/a") == []
    assert ancestors("/memories") == []
    assert is_within("/memories/a/b", "/memories/a")
    assert is_within("/memories/a", "/memories/a")
    assert not is_within("/memories/ab", "/memories/a")


def test_limits_are_exact() -> None:
    ok = "/memories" + "/abcd" * 203
    assert len(ok) == 1024
    assert canonicalize(ok) == ok
    with pytest.raises(PathError):
        canonicalize(ok + "/e")
    assert canonicalize("/memories/" + "a" * 255) == "/memories/" + "a" * 255
    assert canonicalize("/memories/" + "é" * 127) == "/memories/" + "é" * 127
    assert canonicalize("/memories/" + "\U0001f600" * 63) == "/memories/" + "\U0001f600" * 63
    for segment in ["a" * 256, "é" * 128, "\U0001f600" * 64]:
        with pytest.raises(PathError):
            canonicalize("/memories/" + segment)
    assert canonicalize("/memories/" + "a" * 20, max_path_length=30) == "/memories/" + "a" * 20
    with pytest.raises(PathError):
        canonicalize("/memories/" + "a" * 21, max_path_length=30)


# -- the attack corpus -------------------------------------------------------------------------------

PREFIX = "Error: Path must start with /memories, got: {}"
ESCAPE = "Error: Path {} would escape /memories directory"
INVALID = "Error: Invalid path: {!r}"

ATTACKS: list[tuple[str, str]] = [
    # `..` in every position
    ("/memories/..", ESCAPE),
    ("/memories/../", ESCAPE),
    ("/memories/../etc/passwd", ESCAPE),
    ("/memories/../memories/a.txt", ESCAPE),
    ("/memories/a/..", ESCAPE),
    ("/memories/a/../b.txt", ESCAPE),
    ("/memories/a/../../etc/passwd", ESCAPE),
    ("/memories/a/b/c/../../../../x", ESCAPE),
    ("/memories/./../x", ESCAPE),
    ("/memories//..//x", ESCAPE),
    ("/memories/../../../../../../etc/shadow", ESCAPE),
    ("/memories/a/b/..", ESCAPE),
    ("/memories/a/b/../", ESCAPE),
    # percent-escapes, any case, double and triple encoding
    ("/memories/%2e%2e/etc", ESCAPE),
    ("/memories/%2E%2E/etc", ESCAPE),
    ("/memories/%2e./etc", ESCAPE),
    ("/memories/.%2E/etc", ESCAPE),
    ("/memories/..%2fetc%2fpasswd", ESCAPE),
    ("/memories/..%2Fetc", ESCAPE),
    ("/memories/%2e%2e%2f%2e%2e%2fetc", ESCAPE),
    ("/memories/a%2f..%2f..%2fetc", ESCAPE),
    ("/memories/..%5cetc", ESCAPE),
    ("/memories/%5C..%5C..%5Cetc", ESCAPE),
    ("/memories/%252e%252e/etc", ESCAPE),
    ("/memories/%25252e%25252e/etc", ESCAPE),
    ("/memories/%252f", ESCAPE),
    ("/memories/a%00.txt", ESCAPE),
    ("/memories/%00", ESCAPE),
    ("/memories/%c0%ae%c0%ae/etc", ESCAPE),
    ("/memories/%e2%80%a8", ESCAPE),
    ("/memories/notes%20file", ESCAPE),
    # backslashes
    ("/memories\\..\\etc", PREFIX),
    ("/memories/..\\..\\etc\\passwd", ESCAPE),
    ("/memories/a\\b", ESCAPE),
    ("/memories/\\\\server\\share", ESCAPE),
    ("/memories/a\\", ESCAPE),
    # NUL, controls, line and paragraph separators, lone surrogates
    ("/memories/a\x00b", INVALID),
    ("/memories/\x00", INVALID),
    ("/memories/a.txt\x00.png", INVALID),
    ("/memories/a\nb", INVALID),
    ("/memories/a\rb", INVALID),
    ("/memories/a\tb", INVALID),
    ("/memories/\x1b[31mred", INVALID),
    ("/memories/a\x7f", INVALID),
    ("/memories/a\x85b", INVALID),
    ("/memories/a\u2028b", INVALID),
    ("/memories/a\u2029b", INVALID),
    ("/memories/\ud800", INVALID),
    ("/memories/\udfff.txt", INVALID),
    ("/memories/a\udc2e\udc2e", INVALID),
    # invisible and bidirectional format characters (category Cf)
    ("/memories/\u200b..", INVALID),
    # a segment that begins or ends with a space: `.. ` shows as `..`
    ("/memories/.. /x", INVALID),
    ("/memories/x/ ..", INVALID),
    ("/memories/.. ", INVALID),
    # overlong paths and segments
    ("/memories" + "/abcd" * 204, INVALID),
    ("/memories/" + "a" * 2000, INVALID),
    ("/memories/" + "a" * 256, INVALID),
    ("/memories/" + "é" * 128, INVALID),
    ("/memories/" + "\U0001f600" * 64 + "/x", INVALID),
    # the root prefix
    ("/memoriesX", PREFIX),
    ("/memoriesX/a.txt", PREFIX),
    ("/memories_backup/a.txt", PREFIX),
    ("/memories..", PREFIX),
    ("/memories../x", PREFIX),
    ("/memories%2f..", PREFIX),
    ("memories/a.txt", PREFIX),
    ("./memories/a.txt", PREFIX),
    ("../memories/a.txt", PREFIX),
    ("/etc/passwd", PREFIX),
    ("", PREFIX),
    ("/", PREFIX),
    ("//memories/a.txt", PREFIX),
    ("/Memories/a.txt", PREFIX),
    (" /memories/a.txt", PREFIX),
    ("file:///memories/a.txt", PREFIX),
    ("~/memories/a.txt", PREFIX),
    ("\uff0fmemories/a.txt", PREFIX),
    ("/ｍemories/a.txt", PREFIX),
]


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        ("/etc/\x1b[2J", "'/etc/\\x1b[2J'"),
        ("\rfake", "'\\rfake'"),
        ("/memories\u202e/a", "'/memories\\u202e/a'"),
        ("/memoriesX\n/memories/a", "'/memoriesX\\n/memories/a'"),
        ("/\ud800", "'/\\ud800'"),
    ],
)
def test_a_path_refused_for_its_prefix_is_echoed_as_its_repr_when_it_holds_a_control(path: str, shown: str) -> None:
    """The prefix and traversal checks come before the check of characters: a path refused by them that
    holds a control, format or separator character is echoed as `Invalid path` echoes a path, never raw."""
    with pytest.raises(PathError) as info:
        canonicalize(path)
    assert info.value.text == f"Path must start with /memories, got: {shown}"
    escaping = "/memories/../" + path
    with pytest.raises(PathError) as info:
        canonicalize(escaping)
    assert info.value.text == f"Path {repr(escaping)} would escape /memories directory"


# Odd-but-legal names: accepted, and kept as literal names under the root. (Look-alikes of `/` and `.`
# are refused as invalid, not as traversal: test_look_alike_paths_are_refused_and_nothing_is_written.)
LITERALS: list[tuple[str, str]] = [
    ("/memories/\u29f5..\u29f5x", "/memories/\u29f5..\u29f5x"),  # reverse solidus operator
    ("/memories/\ufe68..", "/memories/\ufe68.."),  # small reverse solidus
    ("/memories/\uff3c..", "/memories/\uff3c.."),  # fullwidth reverse solidus
    ("/memories/...", "/memories/..."),
    ("/memories/%u002e%u002e", "/memories/%u002e%u002e"),
    ("/memories/%zz%2", "/memories/%zz%2"),
    ("/memories/./x//y/", "/memories/x/y"),
]


def test_corpus_size() -> None:
    assert len(ATTACKS) >= 40
    assert len({path for path, _ in ATTACKS}) == len(ATTACKS)


@pytest.mark.parametrize(("path", "template"), ATTACKS)
def test_canonicalize_refuses(path: str, template: str) -> None:
    with pytest.raises(PathError) as info:
        canonicalize(path)
    assert "Error: " + info.value.text == template.format(path)


def _inputs(path: str) -> list[dict[str, Any]]:
    return [
        {"command": "view", "path": path},
        {"command": "view", "path": path, "view_range": [1, -1]},
        {"command": "create", "path": path, "file_text": "pwned"},
        {"command": "str_replace", "path": path, "old_str": "seed", "new_str": "pwned"},
        {"command": "insert", "path": path, "insert_line": 0, "insert_text": "pwned"},
        {"command": "delete", "path": path},
        {"command": "rename", "old_path": path, "new_path": "/memories/moved.txt"},
        {"command": "rename", "old_path": "/memories/seed.txt", "new_path": path},
    ]


def _store_state(client: MnemoClient) -> list[tuple[str, int, tuple[str, ...]]]:
    return [(i.id, i.version, i.tags) for i in client.list_records()]


def test_corpus_every_command_refused_and_nothing_written(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    seeded = server.execute({"command": "create", "path": "/memories/seed.txt", "file_text": "seed\n"})
    assert not seeded.is_error
    before = _store_state(client)
    head = client.verify().head_seq
    for n, (path, template) in enumerate(ATTACKS):
        for tool_input in _inputs(path):
            block = server.handle({"type": "tool_use", "id": f"t{n}", "name": "memory", "input": tool_input})
            assert block["is_error"] is True, (path, tool_input)
            assert block["content"] == template.format(path), (path, tool_input)
    assert _store_state(client) == before
    assert client.verify().head_seq == head
    view = server.execute({"command": "view", "path": "/memories/seed.txt"})
    assert view.text.endswith("\tseed\n     2\t")


def test_odd_names_stay_literal_names_under_the_root(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    for n, (path, canonical) in enumerate(LITERALS):
        created = server.execute({"command": "create", "path": path, "file_text": f"file {n}"})
        assert created.text == f"File created successfully at: {path}"
        assert server.canonical_path(path) == canonical
        viewed = server.execute({"command": "view", "path": canonical})
        assert viewed.text.endswith(f"     1\tfile {n}")
    tags = sorted(t for info in client.list_records() for t in info.tags if t.startswith("path:"))
    assert tags == sorted("path:" + canonical for _, canonical in LITERALS)
    for tag in tags:
        assert tag.startswith("path:/memories/")
        assert ".." not in tag[len("path:") :].split("/")
    listing = server.execute({"command": "view", "path": "/memories"}).text.split("\n")
    entries = [line.split("\t")[1][len("/memories/") :] for line in listing[2:]]
    top_level = {"/memories/" + e for e in entries if "/" not in e.rstrip("/")}
    assert "/memories/\u29f5..\u29f5x" in top_level
    assert "/memories/%zz%2" in top_level
    assert "/memories/..." not in top_level  # a name starting with "." is hidden, not special


def test_custom_root_confines(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client, root="/notes")
    assert server.execute({"command": "create", "path": "/notes/a", "file_text": "x"}).text == (
        "File created successfully at: /notes/a"
    )
    r = server.execute({"command": "view", "path": "/memories"})
    assert r == type(r)("Error: Path must start with /notes, got: /memories", True)
    r = server.execute({"command": "delete", "path": "/notes/"})
    assert r.text == "Error: Cannot delete the /notes directory itself"
    r = server.execute({"command": "rename", "old_path": "/notes", "new_path": "/notes/x"})
    assert r.text == "Error: Cannot rename the /notes directory itself"
    r = server.execute({"command": "view", "path": "/notes/../memories"})
    assert r.text == "Error: Path /notes/../memories would escape /notes directory"


# -- look-alike paths: invisible and bidirectional characters, and NFC ---------------------------------

FORMAT_CHARACTERS = [chr(cp) for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp)) == "Cf"]


def test_every_format_character_is_refused() -> None:
    named = ["\u200b", "\ufeff", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u00ad", "\u200d", "\u061c"]
    assert set(named) <= set(FORMAT_CHARACTERS) and len(FORMAT_CHARACTERS) > 150
    for ch in FORMAT_CHARACTERS:
        for path in (f"/memories/{ch}", f"/memories/a{ch}b.md", f"/memories/{ch}/x", f"/memories/a/b.md{ch}"):
            with pytest.raises(PathError) as info:
                canonicalize(path)
            assert info.value.text == f"Invalid path: {path!r}"


def test_look_alike_paths_are_refused_and_nothing_is_written(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    assert not server.execute({"command": "create", "path": "/memories/notes.md", "file_text": "real"}).is_error
    before = _store_state(client)
    for path in [
        "/memories/notes\u200b.md",  # zero width space
        "/memories/\ufeffnotes.md",  # byte order mark
        "/memories/notes\u202edm.txt",  # right-to-left override: displays as notes.txt.md
        "/memories/\u2066notes.md\u2069",  # isolates
        "/memories/no\u00adtes.md",  # soft hyphen
        "/memories/\U000e0041notes.md",  # a tag character
        # characters of other categories that draw as blank space, and spaces at a segment's ends
        *(f"/memories/notes.md{ch}" for ch in BLANKS),
        "/memories/notes.md ", "/memories/ notes.md", "/memories/d /notes.md", "/memories/ d/notes.md",
        "/memories/a\u2002b.md", "/memories/a\ufe0fb.md",
        # characters that draw as the path's own `/` or `.` without being one
        *SEPARATOR_LOOK_ALIKES,
    ]:
        for tool_input in _inputs(path):
            result = server.execute(tool_input)
            assert result == type(result)(f"Error: Invalid path: {path!r}", True), tool_input
    assert _store_state(client) == before


# `/memories/team∕notes.md` would list as a file of the folder `team`, `notes․md` as `notes.md`, `‥` as `..`
SEPARATOR_LOOK_ALIKES = [
    "/memories/team\u2215notes.md",  # division slash
    "/memories/team\uff0fnotes.md",  # fullwidth solidus
    "/memories/team\u2044notes.md",  # fraction slash
    "/memories/team\u29f8notes.md",  # big solidus
    "/memories/team\u2571notes.md",  # box drawing diagonal
    "/memories/team\u27cbnotes.md",  # mathematical rising diagonal
    "/memories/team\U0001f67cnotes.md",  # very heavy solidus
    "/memories/..\uff0fetc\uff0fpasswd",
    "/memories/notes\u2024md",  # one dot leader
    "/memories/notes\uff0emd",  # fullwidth full stop
    "/memories/notes\ufe52md",  # small full stop
    "/memories/\u2025/etc",  # two dot leader
    "/memories/\uff0e\uff0e/etc",
    "/memories/\u2024\u2024/etc",
    "/memories/wait\u2026.md",  # horizontal ellipsis
    "/memories/x\u33c2.md",  # square a.m. (a symbol: its compatibility form is a.m.)
]


# Hangul fillers, blank Braille, the combining grapheme joiner, variation selectors, spaces but U+0020
BLANKS = ["\u3164", "\u115f", "\u1160", "\uffa0", "\u2800", "\u034f", "\ufe0f", "\ufe00", "\U000e0100",
          "\u00a0", "\u2002", "\u2007", "\u202f", "\u3000"]


def test_spaces_inside_a_name_and_an_emoji_s_presentation_are_kept(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    for path in ["/memories/my notes.md", "/memories/\u2764\ufe0f.md", "/memories/\u2b50\ufe0f ideas/a b.md"]:
        result = server.execute({"command": "create", "path": path, "file_text": "kept"})
        assert result.text == f"File created successfully at: {path}"
        assert server.execute({"command": "view", "path": path}).text.endswith("\tkept")


def test_letters_digits_and_stops_of_other_scripts_are_kept(client: MnemoClient) -> None:
    """Only what draws as the path's own `/` or `.` is refused: a script's letters, digits and full stops
    are names (katakana NO, an Arabic-Indic zero, the ideographic full stop, the CJK stroke ideograph, the
    number `⒈`, whose compatibility form is `1.`), and
    so are look-alikes of the backslash, which is no separator here."""
    server = MnemoMemoryToolServer(client)
    for path in ["/memories/\u30ce\u30fc\u30c8.md", "/memories/\u0660\u0661.md", "/memories/\u30e1\u30e2\u3002.md",
                 "/memories/\u4e3f.md", "/memories/a\uff3cb.md", "/memories/a\u2216b.md", "/memories/\u00bd cup.md",
                 "/memories/\u2488 first.md"]:
        result = server.execute({"command": "create", "path": path, "file_text": "kept"})
        assert result.text == f"File created successfully at: {path}"
        assert server.execute({"command": "view", "path": path}).text.endswith("\tkept")


def test_check_root_refuses_format_characters_and_other_forms() -> None:
    for bad in ["/memo\u200bries", "/caf\u0065\u0301"]:
        with pytest.raises(ValueError):
            check_root(bad)
    assert check_root("/caf\u00e9") == "/caf\u00e9"


def test_nfc_forms_are_one_file(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client)
    decomposed, composed = "/memories/cafe\u0301/me\u0301nu.md", "/memories/caf\u00e9/m\u00e9nu.md"
    assert server.canonical_path(decomposed) == composed
    created = server.execute({"command": "create", "path": decomposed, "file_text": "soup"})
    assert created.text == f"File created successfully at: {decomposed}"  # echoed as sent
    assert server.execute({"command": "create", "path": composed, "file_text": "x"}).text == (
        f"Error: File {composed} already exists"
    )
    assert server.execute({"command": "view", "path": composed}).text == (
        f"Here's the content of {composed} with line numbers:\n     1\tsoup"
    )
    listing = server.execute({"command": "view", "path": "/memories/cafe\u0301"}).text.split("\n")
    assert listing[0].endswith("deep in /memories/cafe\u0301, excluding hidden items and node_modules:")
    assert listing[1:] == ["4B\t/memories/caf\u00e9", "4B\t/memories/caf\u00e9/m\u00e9nu.md"]  # stored NFC
    assert [t for i in client.list_records() for t in i.tags if t.startswith("path:")] == ["path:" + composed]
    # the Kelvin sign's NFC form is the letter K
    assert server.execute({"command": "create", "path": "/memories/\u212a", "file_text": "k"}).is_error is False
    assert server.execute({"command": "view", "path": "/memories/K"}).text.endswith("\tk")
    assert server.execute({"command": "rename", "old_path": "/memories/K", "new_path": composed}).text == (
        f"Error: The destination {composed} already exists"
    )
    assert server.execute({"command": "delete", "path": "/memories/caf\u00e9"}).text == (
        "Successfully deleted /memories/caf\u00e9"
    )
    assert server.execute({"command": "view", "path": decomposed}).is_error


def test_checks_run_on_the_path_as_sent_and_on_its_nfc_form() -> None:
    # U+0958 has no composed form: NFC writes it as two characters of 3 bytes each
    qa = "\u0958"
    assert unicodedata.normalize("NFC", qa) == "\u0915\u093c"
    # passes as sent, refused in NFC: a segment of 85 * 3 = 255 bytes becomes 510
    path = "/memories/" + qa * 85
    assert len(path.encode()) - len("/memories/") == 255
    with pytest.raises(PathError) as info:
        canonicalize(path)
    assert info.value.text == f"Invalid path: {path!r}"  # the path as sent
    # passes as sent, refused in NFC: 583 characters become 1,143, over the 1,024 limit (each segment's
    # 240 bytes in NFC are within 255, so the length alone refuses it)
    long_path = "/memories" + ("/" + qa * 40) * 14
    assert len(long_path) == 583 and len(unicodedata.normalize("NFC", long_path)) == 1143
    assert len(unicodedata.normalize("NFC", qa * 40).encode()) == 240
    with pytest.raises(PathError):
        canonicalize(long_path)
    # and U+1D160 triples its UTF-8 bytes: 63 * 4 = 252 bytes as sent, 756 in NFC
    with pytest.raises(PathError):
        canonicalize("/memories/" + "\U0001d160" * 63)
    # refused as sent, although NFC would pass: decomposed é is two characters and three bytes
    for refused_as_sent in ("/memories/" + "e\u0301" * 100, "/memories" + ("/" + "e\u0301" * 60) * 9):
        composed = unicodedata.normalize("NFC", refused_as_sent)
        assert canonicalize(composed) == composed
        with pytest.raises(PathError) as info:
            canonicalize(refused_as_sent)
        assert info.value.text == f"Invalid path: {refused_as_sent!r}"
    # traversal is checked on both forms too (no NFC form adds `.`, `/`, `%` or `\\`, so it is found as sent)
    with pytest.raises(PathError) as info:
        canonicalize("/memories/cafe\u0301/../x")
    assert info.value.text == "Path /memories/cafe\u0301/../x would escape /memories directory"


def test_a_moved_files_tags_keep_their_order_and_take_the_new_path_tag_last() -> None:
    assert retagged(("keep", "memorytool", "path:/memories/a", "z"), "/memories/b/c") == (
        "keep", "memorytool", "z", "path:/memories/b/c")
    assert retagged(("memorytool", "path:/memories/a", "path:/memories/old"), "/memories/n") == (
        "memorytool", "path:/memories/n")


# -- the client's rule for path tags is the tool's (docs/MEMORY_TOOL.md §4.1) ------------------------------

PIECES = ["/", "//", ".", "..", "a", "b.md", " ", "%2e", "%zz", "\\", "\u00e9", "e\u0301", "\u200b", "\u202e",
          "\n", "\x00", "\u2028", "\ud800", "\u0958", "x" * 200, "\u00a0", "\u3164", "\u2764", "\ufe0f"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=8).map("".join))
def test_a_path_tag_passes_exactly_when_it_is_a_path_the_tool_stores(rest: str) -> None:
    """A path tag written through the client API passes when, and only when, it is what the tool stores
    for some path it accepts: the canonical form of a path below the root. So nothing the tool refuses
    (traversal, invisible or control characters, a long segment, a form not NFC) and no second
    spelling of a file's path (`//`, `.`, a trailing `/`) is ever a path tag."""
    path = "/memories/" + rest
    try:
        canonical: str | None = canonicalize(path)
    except PathError:
        canonical = None
    problem = path_problem(path)
    assert (problem is None) == (canonical == path), (path, canonical, problem)
    if canonical is not None and canonical != "/memories":
        assert path_problem(canonical) is None
