"""Exact texts of the memory tool: input checks, sizes, views, snippets, result blocks (no database)."""

from __future__ import annotations

from typing import Any

import pytest

from mnemo.tools.server import (
    CommandResult,
    MnemoMemoryToolServer,
    format_directory_view,
    format_file_view,
    format_size,
    insert_text,
    occurrence_lines,
    replace_snippet,
    validate_input,
)

# -- §2 input checks ----------------------------------------------------------------------------------


def err(text: str) -> CommandResult:
    return CommandResult(text, True)


@pytest.mark.parametrize(
    ("tool_input", "expected"),
    [
        (None, "Error: Invalid input: expected an object"),
        ("view /memories", "Error: Invalid input: expected an object"),
        ([{"command": "view"}], "Error: Invalid input: expected an object"),
        (42, "Error: Invalid input: expected an object"),
        ({}, "Error: Missing required parameter `command`"),
        ({"command": None}, "Error: Missing required parameter `command`"),
        ({"command": 3}, "Error: Missing required parameter `command`"),
        ({"command": ["view"]}, "Error: Missing required parameter `command`"),
        ({"command": "list"}, "Error: Unknown command: list"),
        ({"command": ""}, "Error: Unknown command: "),
        ({"command": "VIEW", "path": "/memories"}, "Error: Unknown command: VIEW"),
        ({"command": "view"}, "Error: Missing required parameter `path` for command `view`"),
        ({"command": "view", "path": None}, "Error: Missing required parameter `path` for command `view`"),
        ({"command": "view", "path": 1}, "Error: Parameter `path` of command `view` must be a string"),
        (
            {"command": "view", "path": b"/memories"},
            "Error: Parameter `path` of command `view` must be a string",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": [1]},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": []},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": [1, 2, 3]},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": [1, "2"]},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": [1.0, 2]},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": [True, 2]},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": "1,2"},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "view", "path": "/memories", "view_range": {"a": 1, "b": 2}},
            "Error: Parameter `view_range` of command `view` must be a list of two integers",
        ),
        (
            {"command": "create", "path": "/memories/a"},
            "Error: Missing required parameter `file_text` for command `create`",
        ),
        (
            {"command": "create", "file_text": "x"},
            "Error: Missing required parameter `path` for command `create`",
        ),
        (
            {"command": "create", "path": "/memories/a", "file_text": 5},
            "Error: Parameter `file_text` of command `create` must be a string",
        ),
        # the path is checked (presence, then type) before file_text
        (
            {"command": "create", "path": 5, "file_text": 5},
            "Error: Parameter `path` of command `create` must be a string",
        ),
        (
            {"command": "str_replace", "path": "/memories/a"},
            "Error: Missing required parameter `old_str` for command `str_replace`",
        ),
        (
            {"command": "str_replace", "path": "/memories/a", "old_str": "x", "new_str": 1},
            "Error: Parameter `new_str` of command `str_replace` must be a string",
        ),
        (
            {"command": "insert", "path": "/memories/a", "insert_text": "x"},
            "Error: Missing required parameter `insert_line` for command `insert`",
        ),
        (
            {"command": "insert", "path": "/memories/a", "insert_line": "1", "insert_text": "x"},
            "Error: Parameter `insert_line` of command `insert` must be an integer",
        ),
        (
            {"command": "insert", "path": "/memories/a", "insert_line": True, "insert_text": "x"},
            "Error: Parameter `insert_line` of command `insert` must be an integer",
        ),
        (
            {"command": "insert", "path": "/memories/a", "insert_line": 1.0, "insert_text": "x"},
            "Error: Parameter `insert_line` of command `insert` must be an integer",
        ),
        (
            {"command": "insert", "path": "/memories/a", "insert_line": 1},
            "Error: Missing required parameter `insert_text` for command `insert`",
        ),
        ({"command": "delete"}, "Error: Missing required parameter `path` for command `delete`"),
        (
            {"command": "rename", "new_path": "/memories/b"},
            "Error: Missing required parameter `old_path` for command `rename`",
        ),
        (
            {"command": "rename", "old_path": "/memories/a", "new_path": None},
            "Error: Missing required parameter `new_path` for command `rename`",
        ),
        (
            {"command": "rename", "old_path": "/memories/a", "new_path": ["/memories/b"]},
            "Error: Parameter `new_path` of command `rename` must be a string",
        ),
        (
            {"command": "create", "path": "/memories/a", "file_text": "bad \ud800 text"},
            "Error: Parameter `file_text` of command `create` must be valid Unicode text"
            " (it holds an unpaired surrogate)",
        ),
    ],
)
def test_input_checks(tool_input: object, expected: str) -> None:
    assert validate_input(tool_input) == err(expected)


def test_valid_inputs_and_null_fields() -> None:
    assert validate_input({"command": "view", "path": "/memories", "view_range": None}) == (
        "view",
        {"path": "/memories"},
    )
    assert validate_input({"command": "view", "path": "/m", "view_range": (2, -1)}) == (
        "view",
        {"path": "/m", "view_range": [2, -1]},
    )
    assert validate_input({"command": "str_replace", "path": "/m", "old_str": "a", "new_str": None}) == (
        "str_replace",
        {"path": "/m", "old_str": "a"},
    )
    # unknown extra fields are ignored
    assert validate_input({"command": "delete", "path": "/m", "extra": 1}) == ("delete", {"path": "/m"})


# Each command with every field it takes, and the ones it cannot do without (the contract's table).
COMPLETE: dict[str, dict[str, Any]] = {
    "view": {"path": "/memories", "view_range": [1, 2]},
    "create": {"path": "/memories/a", "file_text": "x"},
    "str_replace": {"path": "/memories/a", "old_str": "a", "new_str": "b"},
    "insert": {"path": "/memories/a", "insert_line": 0, "insert_text": "x"},
    "delete": {"path": "/memories/a"},
    "rename": {"old_path": "/memories/a", "new_path": "/memories/b"},
}
REQUIRED = {"view": ["path"], "create": ["path", "file_text"], "str_replace": ["path", "old_str"],
            "insert": ["path", "insert_line", "insert_text"], "delete": ["path"], "rename": ["old_path", "new_path"]}


@pytest.mark.parametrize("command", sorted(COMPLETE))
def test_every_required_field_is_required_and_every_other_is_not(command: str) -> None:
    complete = COMPLETE[command]
    assert validate_input({"command": command, **complete}) == (command, complete)
    for name in complete:
        given = {k: v for k, v in complete.items() if k != name}
        if name in REQUIRED[command]:
            assert validate_input({"command": command, **given}) == err(
                f"Error: Missing required parameter `{name}` for command `{command}`")
        else:
            assert validate_input({"command": command, **given}) == (command, given)
    # with all of them missing, the first in the table is named
    first = REQUIRED[command][0]
    assert validate_input({"command": command}) == err(
        f"Error: Missing required parameter `{first}` for command `{command}`")


# -- sizes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0B"),
        (1, "1B"),
        (1023, "1023B"),
        (1024, "1K"),
        (1025, "1.0K"),
        (1536, "1.5K"),
        (4096, "4K"),
        (1048575, "1024.0K"),
        (1048576, "1M"),
        (1310720, "1.2M"),
        (1 << 30, "1G"),
        (5 << 40, "5120G"),
    ],
)
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


def test_format_size_matches_reference() -> None:
    anthropic_tools = pytest.importorskip("anthropic.lib.tools._beta_builtin_memory_tool")
    for n in [*range(0, 5000), *range(1 << 20, (1 << 20) + 3000, 7), 123456789, 987654321012]:
        assert format_size(n) == anthropic_tools._format_file_size(n), n


# -- directory views ---------------------------------------------------------------------------------

HEADER = "Here're the files and directories up to 2 levels deep in {}, excluding hidden items and node_modules:"


def test_directory_view_empty_root() -> None:
    assert format_directory_view("/memories", "/memories", []) == HEADER.format("/memories") + "\n0B\t/memories"


def test_directory_view_two_levels_sorted_hidden_and_sizes() -> None:
    files = [
        ("/memories/b.txt", 10),
        ("/memories/a/x.txt", 1000),
        ("/memories/a/deep/y/z.txt", 100),
        ("/memories/a/deep/w.txt", 24),
        ("/memories/a/.secret", 2000),
        ("/memories/node_modules/pkg/index.js", 5),
        ("/memories/.hidden/h.txt", 7),
        ("/memories/B.txt", 1),
        ("/memories/a/node_modules", 3),
        ("/memories/é.txt", 2),
        ("/memories/a/Z.txt", 0),
    ]
    total = sum(size for _, size in files)
    text = format_directory_view("/memories/", "/memories", files)
    assert text == "\n".join(
        [
            HEADER.format("/memories/"),
            f"{format_size(total)}\t/memories",
            "1B\t/memories/B.txt",
            # hidden and node_modules files count toward a directory's size
            f"{format_size(1000 + 100 + 24 + 2000 + 3 + 0)}\t/memories/a/",
            "0B\t/memories/a/Z.txt",
            "124B\t/memories/a/deep/",
            "1000B\t/memories/a/x.txt",
            "10B\t/memories/b.txt",
            "2B\t/memories/é.txt",
        ]
    )


def test_directory_view_of_subdirectory_uses_canonical_lines() -> None:
    files = [("/memories/d/e/f/g.txt", 3), ("/memories/d/k", 4)]
    text = format_directory_view("/memories//d/./", "/memories/d", files)
    assert text.split("\n") == [
        HEADER.format("/memories//d/./"),
        "7B\t/memories/d",
        "3B\t/memories/d/e/",
        "3B\t/memories/d/e/f/",
        "4B\t/memories/d/k",
    ]


def test_directory_view_code_point_order() -> None:
    names = ["b", "B", "a", "_", "~", "Ä", "10", "9", "a b", "a-b"]
    files = [(f"/memories/{n}", 1) for n in names]
    lines = format_directory_view("/memories", "/memories", files).split("\n")[2:]
    assert [line.split("\t")[1][len("/memories/") :] for line in lines] == sorted(names)


# -- file views --------------------------------------------------------------------------------------

FILE_HEADER = "Here's the content of {} with line numbers:\n"


def test_file_view_basic_and_trailing_newline() -> None:
    r = format_file_view("/memories/a", "one\ntwo\n", None, 16000)
    assert r == CommandResult(FILE_HEADER.format("/memories/a") + "     1\tone\n     2\ttwo\n     3\t")


def test_file_view_empty_file_and_cr() -> None:
    assert format_file_view("/m/a", "", None, 16000).text == FILE_HEADER.format("/m/a") + "     1\t"
    assert format_file_view("/m/a", "x\r\ny", None, 100).text == FILE_HEADER.format("/m/a") + "     1\tx\r\n     2\ty"


@pytest.mark.parametrize(
    ("view_range", "body"),
    [
        ([2, 3], "     2\tb\n     3\tc"),
        ([0, 1], "     1\ta"),
        ([-5, 2], "     1\ta\n     2\tb"),
        ([4, -1], "     4\td\n     5\t"),
        ([3, 100], "     3\tc\n     4\td\n     5\t"),
        ([6, -1], ""),
        ([9, 12], ""),
        ([3, 2], ""),
        ([1, 0], ""),
        ([5, 5], "     5\t"),
    ],
)
def test_file_view_ranges(view_range: list[int], body: str) -> None:
    r = format_file_view("/memories/f", "a\nb\nc\nd\n", view_range, 16000)
    assert r == CommandResult(FILE_HEADER.format("/memories/f") + body)


def test_file_view_bad_range_end() -> None:
    assert format_file_view("/memories/f", "a", [1, -2], 16000) == err("Error: Invalid `view_range`: [1, -2]")


def test_file_view_line_limit() -> None:
    content = "\n" * 999_999
    assert format_file_view("/memories/f", content, None, 10**9) == CommandResult(
        "File /memories/f exceeds maximum line limit of 999,999 lines.", True
    )
    assert not format_file_view("/memories/f", "\n" * 999_998, [1, 1], 10**9).is_error


def test_file_view_truncation() -> None:
    lines = [f"line {i:03d}" for i in range(1, 101)]  # 8 characters each, 15 numbered
    content = "\n".join(lines)
    header = FILE_HEADER.format("/memories/f")  # 53 characters
    note = "\n... (showing lines 1-5 of 100; use view_range to see the rest)"  # 63
    # the whole result is measured: header + 5 numbered lines (5*15 + 4) + note = 195
    expected = header + "\n".join(f"{n:>6}\tline {n:03d}" for n in range(1, 6)) + note
    assert len(expected) == 195
    assert format_file_view("/memories/f", content, None, 195) == CommandResult(expected)
    assert format_file_view("/memories/f", content, None, 210).text == expected  # a 6th line needs 211
    assert "lines 1-6 of 100" in format_file_view("/memories/f", content, None, 211).text
    # exactly at the limit: no note
    whole = format_file_view("/memories/f", content, None, None).text
    assert format_file_view("/memories/f", content, None, len(whole)).text == whole
    assert "showing" in format_file_view("/memories/f", content, None, len(whole) - 1).text
    # a view_range is cut the same way, its note naming where it starts (two characters longer here)
    assert "lines 50-53 of 100" in format_file_view("/memories/f", content, [50, 90], 196).text
    ranged = format_file_view("/memories/f", content, [50, 90], 197).text
    assert ranged == header + "\n".join(f"{n:>6}\tline {n:03d}" for n in range(50, 55)) + (
        "\n... (showing lines 50-54 of 100; use view_range to see the rest)"
    )


def test_file_view_cuts_a_line_too_long_to_show() -> None:
    header = FILE_HEADER.format("/memories/f")
    long_line = "x" * 5000
    text = format_file_view("/memories/f", long_line + "\nshort", None, 400).text
    note = (
        "... (showing lines 1-1 of 2, line 1 cut after {} of 5000 characters; a result holds at most 400 "
        "characters: split long lines with str_replace to read them whole, and use view_range to see other lines)"
    )
    assert len(text) == 400
    c = 400 - len(header) - 7 - 1 - len(note.format(100))
    assert text == header + "     1\t" + "x" * c + "\n" + note.format(c)
    # view_range [1, 1] of a single huge line is cut too; [2, 2] shows the short line whole
    assert format_file_view("/memories/f", long_line + "\nshort", [1, 1], 400).text == text
    assert format_file_view("/memories/f", long_line + "\nshort", [2, 2], 400).text == header + "     2\tshort"


# -- str_replace and insert helpers ------------------------------------------------------------------


def test_occurrence_lines_overlapping_and_repeated() -> None:
    assert occurrence_lines("aaa\nxaa\n", "aa") == [1, 1, 2]
    assert occurrence_lines("ab\nab\n\nab", "ab") == [1, 2, 4]
    assert occurrence_lines("xyz", "q") == []
    big = "a" * 200_000
    assert occurrence_lines(big, "a") == [1] * 200_000


@pytest.mark.parametrize(
    ("content", "idx", "snippet"),
    [
        ("a\nb\nc\nd\ne\nf\ng", 3, "     2\tb\n     3\tc\n     4\td\n     5\te\n     6\tf"),
        ("a\nb\nc", 0, "     1\ta\n     2\tb\n     3\tc"),
        ("a\nb\nc", 2, "     1\ta\n     2\tb\n     3\tc"),
        ("only", 0, "     1\tonly"),
        ("a\nb\nc\nd\ne\n", 4, "     3\tc\n     4\td\n     5\te\n     6\t"),
    ],
)
def test_replace_snippet(content: str, idx: int, snippet: str) -> None:
    assert replace_snippet(content, idx) == snippet


@pytest.mark.parametrize(
    ("content", "line", "text", "result"),
    [
        ("a\nb\n", 0, "x", "x\na\nb\n"),
        ("a\nb\n", 1, "x\n\n", "a\nx\nb\n"),
        ("a\nb\n", 2, "x", "a\nb\nx\n"),
        ("a\nb", 2, "x", "a\nb\nx\n"),
        ("", 0, "x", "x\n"),
        ("", 0, "", "\n"),
        ("a\n\n", 2, "x", "a\n\nx\n"),
        ("a\r\nb", 1, "x", "a\r\nx\nb\n"),
        ("a\nb\n", 3, "x", 2),
        ("a\nb\n", -1, "x", 2),
        ("", 1, "x", 0),
        ("a\n\n", 3, "x", 2),
    ],
)
def test_insert_text(content: str, line: int, text: str, result: str | int) -> None:
    assert insert_text(content, line, text) == result


# -- result blocks and the tool definition -----------------------------------------------------------


def test_result_block_shape() -> None:
    ok = MnemoMemoryToolServer.result_block("toolu_1", CommandResult("fine"))
    assert ok == {"type": "tool_result", "tool_use_id": "toolu_1", "content": "fine"}
    assert "is_error" not in ok
    bad = MnemoMemoryToolServer.result_block("toolu_2", CommandResult("Error: no", True))
    assert bad == {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Error: no", "is_error": True}


def _reference_snippet(content: str, old: str, new: str) -> Any:
    """The reference class's own computation of the snippet, for comparison."""
    pos = content.find(old)
    changed = content[:pos].count("\n")
    new_content = content.replace(old, new)
    new_lines = new_content.split("\n")
    start = max(0, changed - 2)
    end = min(len(new_lines), changed + 3)
    return "\n".join(f"{str(n).rjust(6)}\t{new_lines[n - 1]}" for n in range(start + 1, end + 1))


@pytest.mark.parametrize("old", ["c", "a\nb", "g", "e\nf"])
def test_snippet_agrees_with_reference_formula(old: str) -> None:
    content = "a\nb\nc\nd\ne\nf\ng"
    if content.count(old) != 1:
        pytest.skip("not unique")
    pos = content.find(old)
    new_content = content.replace(old, "NEW\nLINE")
    assert replace_snippet(new_content, content.count("\n", 0, pos)) == _reference_snippet(content, old, "NEW\nLINE")
