"""docs/MEMORY_TOOL.md states the texts the code produces: every template, word for word."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.paths import ROOT

from mnemo import MnemoClient, validation
from mnemo.tools import inputs, quotas, server, text

DOC = (ROOT / "docs" / "MEMORY_TOOL.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "template",
    [
        text.LINES_NOTE,
        text.CUT_LINE_NOTE,
        text.LISTING_NOTE,
        text.ECHO_MARK,
        text.MORE_OCCURRENCES,
        text.FILE_HEADER.format("{path}").rstrip("\n"),
        text.DIR_HEADER.format("{path}"),
        quotas.VERSIONS_TEXT,
        quotas.FILES_TEXT,
        quotas.BYTES_TEXT,
        quotas.HISTORY_TEXT,
        server.CLEARED,
        server.INTERNAL_ERROR,
        "Error: The path {path} is not a file.",
        "Error: Invalid input: expected an object",
        "Error: Invalid input: the object could not be read",
        "Error: Invalid tool_use block: its id could not be read",
        "Error: Invalid tool_use block: its name could not be read",
        "Error: Invalid tool_use block: its input could not be read",
        "Error: Invalid tool_use block: `id` must be a string",
        "Error: Invalid tool_use block: `name` must be a string",
        " between -2**63 and 2**63 - 1",
        "Error: The memory store is busy (writer lock timeout); try again",
        "Error: The memory store is read-only",
        # the search (§11)
        text.SEARCH_HEADER,
        text.SEARCH_EMPTY,
        text.SEARCH_MORE_NOTE,
        text.SEARCH_CUT_NOTE,
        "``Error: Missing required parameter `query` for command `search` ``",
        "``Error: Parameter `limit` of command `search` must be an integer from 1 to 100``",
        "`Error: Invalid query: {reason}`",
        # the tool's tags written by any door (§4.1)
        validation.NOT_A_PATH, validation.NOT_ROOTED, validation.BACKSLASH, validation.PERCENT,
        validation.CHARACTER, validation.BLANK, validation.LOOKS_LIKE, validation.SPACED, validation.DOT_SEGMENT,
        validation.EMPTY_SEGMENT, validation.LONG_SEGMENT,
        validation.NOT_NFC, validation.TWO_PATHS, validation.MARKER_ALONE, validation.PATH_TAKEN,
        validation.PATH_UNDER_FILE, validation.PATH_IS_DIRECTORY,
    ],
)
def test_the_contract_states_each_text(template: str) -> None:
    assert template in DOC


def test_the_defaults_are_the_documented_ones() -> None:
    q = quotas.DEFAULT_QUOTAS
    assert (q.max_versions_per_file, q.max_files, q.max_total_bytes, q.max_history_bytes) == (
        1000, 1000, 16 << 20, 64 << 20
    )
    for row in ("| `max_versions_per_file` | 1,000 |", "| `max_files` | 1,000 |", "| `max_total_bytes` | 16 MiB |",
                "| `max_history_bytes` | 64 MiB |"):
        assert row in DOC
    assert server.DEFAULT_MAX_VIEW_CHARS == 16_000 and "`max_view_chars` characters (default 16,000)" in DOC
    assert server.RESULT_OVERHEAD_CHARS == 1024 and "`2 * max_path_length + 1024`" in DOC
    assert text.MAX_OCCURRENCES_SHOWN == 100 and text.SNIPPET_SLACK == 40
    assert "// (number of snippet lines) - 40` characters" in DOC
    assert inputs.INT_MIN == -(2**63) and inputs.INT_MAX == 2**63 - 1


def test_the_search_example_is_what_the_server_answers(tmp_path: Path) -> None:
    """§11's example, on the file backend (whose storage serves recall): the files it names hold what it
    says, and the search answers the text it shows, tabs for `\\t`."""
    section = DOC.split("## 11. Search", 1)[1]
    example = section.split("a search for `train* plane*` answers:\n```\n", 1)[1].split("\n```", 1)[0]
    with MnemoClient(tmp_path / "memory.mnemo.db", "agent-1", durability="none") as client:
        tool = server.MnemoMemoryToolServer(client)
        for path, content in [
            ("/memories/user/profile.md", "# Ana\n- vegetarian\n- prefers trains over planes\n"),
            ("/memories/trips/lisbon.md", "# Trip: Lisbon\n- when: June\n- book: night train via Madrid\n"),
        ]:
            escaped = content.replace("\n", "\\n")
            assert f"`{path}` holding `{escaped}`" in " ".join(section.split())
            assert not tool.execute({"command": "create", "path": path, "file_text": content}).is_error
        assert tool.search("train* plane*").text == example.replace("\\t", "\t")
        assert inputs.DEFAULT_SEARCH_LIMIT == 10 and inputs.MAX_SEARCH_LIMIT == 100
