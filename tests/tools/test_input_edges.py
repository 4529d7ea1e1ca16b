"""The memory tool's integer fields on both sides of their range: -2**63 and 2**63 - 1 pass the input
check (and reach the command's own range check), one past either end is refused with the contract's
text, and nothing is written; on both backends."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mnemo import MnemoClient
from mnemo.tools import MnemoMemoryToolServer
from mnemo.tools.text import CommandResult

OUT_OF_RANGE = " between -2**63 and 2**63 - 1"


@pytest.fixture
def server(db: str) -> Iterator[MnemoMemoryToolServer]:
    with MnemoClient(db, "agent-1", durability="none") as c:
        s = MnemoMemoryToolServer(c)
        assert not s.execute({"command": "create", "path": "/memories/a.txt", "file_text": "one\ntwo\n"}).is_error
        yield s


@pytest.mark.parametrize("line", [-(2**63), 2**63 - 1])
def test_an_insert_line_at_either_end_of_the_range_reaches_the_command(server: MnemoMemoryToolServer,
                                                                      line: int) -> None:
    head = server.client.head
    result = server.execute({"command": "insert", "path": "/memories/a.txt", "insert_line": line, "insert_text": "x"})
    assert result == CommandResult(f"Error: Invalid `insert_line` parameter: {line}. It should be within the range "
                                   "of lines of the file: [0, 2]", True)
    assert server.client.head == head


@pytest.mark.parametrize("line", [-(2**63) - 1, 2**63])
def test_an_insert_line_past_either_end_is_refused_as_input(server: MnemoMemoryToolServer, line: int) -> None:
    head = server.client.head
    result = server.execute({"command": "insert", "path": "/memories/a.txt", "insert_line": line, "insert_text": "x"})
    assert result == CommandResult(
        f"Error: Parameter `insert_line` of command `insert` must be an integer{OUT_OF_RANGE}", True)
    assert server.client.head == head


@pytest.mark.parametrize("bounds", [[-(2**63), 1], [1, 2**63 - 1], [-(2**63), 2**63 - 1]])
def test_a_view_range_at_the_ends_of_the_range_is_not_refused_as_input(server: MnemoMemoryToolServer,
                                                                      bounds: list[int]) -> None:
    result = server.execute({"command": "view", "path": "/memories/a.txt", "view_range": bounds})
    assert "must be a list of two integers" not in result.text


@pytest.mark.parametrize("bounds", [[-(2**63) - 1, 1], [1, 2**63]])
def test_a_view_range_past_the_ends_is_refused_as_input(server: MnemoMemoryToolServer, bounds: list[int]) -> None:
    result = server.execute({"command": "view", "path": "/memories/a.txt", "view_range": bounds})
    assert result == CommandResult(
        f"Error: Parameter `view_range` of command `view` must be a list of two integers{OUT_OF_RANGE}", True)


def test_a_tool_use_block_that_is_a_mapping_but_no_dict_is_read_as_one(server: MnemoMemoryToolServer) -> None:
    """A block may come as any read-only mapping (a MappingProxyType here), not only a dict or an SDK
    object with attributes: its fields, and those of its input, are read the same."""
    from types import MappingProxyType

    block = {"type": "tool_use", "id": "toolu_01", "name": "memory",
             "input": {"command": "view", "path": "/memories/a.txt"}}
    want = server.handle(block)
    assert "is_error" not in want and "/memories/a.txt" in want["content"]
    assert server.handle(MappingProxyType(block)) == want
    assert server.handle(MappingProxyType({**block, "input": MappingProxyType(block["input"])})) == want
