"""The memory tool's search in every recall mode (docs/MEMORY_TOOL.md §11, docs/RECALL.md §6): a file that
says the same thing in other words found by meaning where words find none, shown with its first lines;
the default mode (hybrid with an embedder, lexical without); every bad mode refused with its text; and the
same through the SDK's companion tool and MCP (`mnemo mcp --embedder local`). On the file backend."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numpy")

from helpers.embedders import Concepts  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.tools import MnemoMemoryToolServer  # noqa: E402
from mnemo.tools.server import SEARCH_INPUT_SCHEMA  # noqa: E402

AGENT = "agent-1"
FILES = {
    "/memories/user/profile.md": "# Ana\n- hates flying\n- vegetarian\n",
    "/memories/work/deploys.md": "# Deploys\n- out on Tuesdays\n",
    "/memories/food.md": "- loves pasta and pizza\n",
}
needs_local = pytest.mark.skipif(importlib.util.find_spec("wordllama") is None,
                                 reason="the `semantic` extra is not installed")


def fill(db: Path) -> None:
    with MnemoClient(db, AGENT, durability="none") as client:
        server = MnemoMemoryToolServer(client)
        for path, text in FILES.items():
            assert not server.execute({"command": "create", "path": path, "file_text": text}).is_error


@pytest.fixture
def db(db_path: Path) -> Path:
    fill(db_path)
    return db_path


def test_a_file_found_by_meaning_where_words_find_none(db: Path) -> None:
    with MnemoClient(db, AGENT, embedder=Concepts()) as client:
        server = MnemoMemoryToolServer(client)
        lexical = server.search("air travel", mode="lexical")
        hybrid = server.search("air travel", limit=1)  # hybrid, the default with an embedder
        semantic = server.search("air travel", mode="semantic", limit=1)
    assert lexical.text.startswith("No file in /memories matches `air travel`.") and not lexical.is_error
    expected = "\n".join([
        "Here're the files in /memories that match `air travel`, best match first, with their matching lines:",
        "/memories/user/profile.md",
        "     1\t# Ana", "     2\t- hates flying", "     3\t- vegetarian",
        "... (the best 1 files are shown and more match: add words, search a narrower path, or raise limit to see "
        "the others)",
    ])
    assert (hybrid.text, hybrid.is_error) == (expected, False)
    assert semantic.text == expected


def test_a_hybrid_hit_holding_a_word_shows_its_matching_lines(db: Path) -> None:
    with MnemoClient(db, AGENT, embedder=Concepts()) as client:
        result = MnemoMemoryToolServer(client).search("flying trips", mode="hybrid", limit=1)
    assert result.text.splitlines()[1:] == ["/memories/user/profile.md", "     2\t- hates flying",
                                            result.text.splitlines()[-1]]


@pytest.mark.parametrize(("call", "said"), [
    ({"query": "air", "mode": "fuzzy"}, "Error: Invalid mode: fuzzy; use one of hybrid, lexical, semantic"),
    ({"query": "air", "mode": 3}, "Error: Parameter `mode` of command `search` must be a string"),
    ({"query": '"air', "mode": "fuzzy"}, "Error: Invalid query: the query has an unclosed quote"),
])
def test_a_bad_mode_is_refused_in_the_tools_order(db: Path, call: dict[str, Any], said: str) -> None:
    with MnemoClient(db, AGENT, embedder=Concepts()) as client:
        result = MnemoMemoryToolServer(client).execute_search(call)
    assert result.is_error and result.text.startswith(said)


def test_without_an_embedder_the_search_is_lexical_and_other_modes_are_refused(db: Path) -> None:
    with MnemoClient(db, AGENT) as client:
        server = MnemoMemoryToolServer(client)
        assert server.search("air travel").text.startswith("No file in /memories matches")
        for mode in ("hybrid", "semantic"):
            result = server.search("air travel", mode=mode)
            assert result.is_error
            assert result.text == (f"Error: Invalid mode: {mode} needs an embedder, and this memory has none; "
                                   "search with mode lexical (by words)")
        assert server.search("flying", mode="lexical").text.splitlines()[1] == "/memories/user/profile.md"


def test_the_schema_offers_the_modes() -> None:
    mode = SEARCH_INPUT_SCHEMA["properties"]["mode"]
    assert mode["enum"] == ["hybrid", "lexical", "semantic"]
    assert "mode" not in SEARCH_INPUT_SCHEMA["required"]


def test_the_sdk_tool_takes_the_mode(db: Path) -> None:
    pytest.importorskip("anthropic")
    from mnemo.tools.anthropic import MnemoSearchTool

    with MnemoClient(db, AGENT, embedder=Concepts()) as client:
        tool = MnemoSearchTool(client)
        assert tool.to_dict()["input_schema"]["properties"]["mode"]["enum"] == ["hybrid", "lexical", "semantic"]
        assert tool.call({"query": "air travel", "mode": "semantic", "limit": 1}).splitlines()[1] == (
            "/memories/user/profile.md")
        assert tool.call({"query": "air travel", "mode": "lexical"}).startswith("No file in /memories matches")


@needs_local
def test_mcp_with_the_local_embedder_finds_by_meaning(db: Path) -> None:
    pytest.importorskip("mcp")
    from helpers.mcp_procs import run_async, stdio_session, text_of

    async def body() -> list[str]:
        out = []
        async with stdio_session("--db", str(db), "--agent", AGENT, "--embedder", "local") as session:
            for call in ({"query": "air travel preferences", "mode": "lexical"},
                         {"query": "air travel preferences", "limit": 1}):
                out.append(text_of(await session.call_tool("memory_search", call)))
        return out

    lexical, hybrid = run_async(body)
    assert lexical.startswith("No file in /memories matches `air travel preferences`.")
    assert hybrid.splitlines()[1] == "/memories/user/profile.md"
