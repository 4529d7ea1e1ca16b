"""`handle()` and `execute()` never raise, whatever object they are given, and the SDK adapters raise
nothing but `ToolError` (docs/MEMORY_TOOL.md §2 and §3): objects whose properties, `__eq__`, `__hash__`,
`__str__`, `__len__` or `__iter__` raise, dict subclasses whose `get` raises, recursion, huge values.

The memory tool's integer fields on both sides of their range: -2**63 and 2**63 - 1 pass the input
check (and reach the command's own range check), one past either end is refused with the contract's
text, and nothing is written; on both backends."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo import MnemoClient
from mnemo.tools import CommandResult, MnemoMemoryToolServer


class Boom(Exception):
    """What every hostile method raises."""


def boom(*args: object, **kwargs: object) -> Any:
    raise Boom("hostile")


class HostileStr(str):
    """A str whose every overridable method raises."""

    __str__ = __repr__ = __format__ = __hash__ = __eq__ = __ne__ = boom  # type: ignore[assignment]
    __len__ = __iter__ = __getitem__ = __contains__ = boom  # type: ignore[assignment]
    startswith = endswith = split = encode = find = count = replace = rstrip = boom  # type: ignore[assignment]


class HostileInt(int):
    __lt__ = __gt__ = __le__ = __ge__ = __eq__ = __hash__ = __index__ = __int__ = boom  # type: ignore[assignment]
    __str__ = __repr__ = __format__ = __add__ = __sub__ = __bool__ = boom  # type: ignore[assignment]


class HostileList(list):  # type: ignore[type-arg]
    __len__ = __iter__ = __getitem__ = __eq__ = __repr__ = __str__ = __bool__ = boom  # type: ignore[assignment]


class HostileTuple(tuple):  # type: ignore[type-arg]
    __len__ = __iter__ = __getitem__ = __eq__ = __repr__ = __str__ = __bool__ = boom  # type: ignore[assignment]


class HostileDict(dict):  # type: ignore[type-arg]
    get = __getitem__ = __iter__ = __len__ = __contains__ = keys = items = values = boom  # type: ignore[assignment]
    __eq__ = __repr__ = __str__ = __bool__ = boom  # type: ignore[assignment]


class RaisingMapping(Mapping[str, Any]):
    __getitem__ = __iter__ = __len__ = boom  # type: ignore[assignment]


class BadClass:
    """An object whose `__class__` raises: isinstance() checks that consult it raise too."""

    @property
    def __class__(self) -> Any:  # type: ignore[override]
        raise Boom("no class")


class Everything:
    """An object on which every attribute access raises."""

    def __getattribute__(self, name: str) -> Any:
        raise Boom(name)


class Block:
    """A tool_use block object whose fields are properties that may raise."""

    def __init__(self, **fields: Any) -> None:
        self._fields = fields

    def __getattr__(self, name: str) -> Any:
        value = self._fields.get(name)
        if value is boom:
            raise Boom(name)
        return value


class CollidingKey:
    """A dict key that looks like "path" to a hash table and raises when compared."""

    def __hash__(self) -> int:
        return hash("path")

    __eq__ = boom  # type: ignore[assignment]


@pytest.fixture
def server(server: MnemoMemoryToolServer) -> MnemoMemoryToolServer:
    """The server of tools/conftest.py with a file written: these tests send commands that read it."""
    assert not server.execute({"command": "create", "path": "/memories/a.txt", "file_text": "one\ntwo\n"}).is_error
    return server


def block(tool_input: object, **overrides: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": "memory", "input": tool_input, **overrides}


def error(tool_use_id: str, text: str) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": text, "is_error": True}


# -- the block ---------------------------------------------------------------------------------------------


def test_block_fields_that_raise(server: MnemoMemoryToolServer) -> None:
    assert server.handle(Block(id=boom, name="memory", input={})) == error(
        "", "Error: Invalid tool_use block: its id could not be read"
    )
    assert server.handle(Block(id="t1", name=boom, input={})) == error(
        "t1", "Error: Invalid tool_use block: its name could not be read"
    )
    assert server.handle(Block(id="t2", name="memory", input=boom)) == error(
        "t2", "Error: Invalid tool_use block: its input could not be read"
    )
    for hostile in (Everything(), BadClass(), RaisingMapping(), HostileDict(id="x", name="memory")):
        result = server.handle(hostile)
        assert result["is_error"] is True and isinstance(result["content"], str)
    # a dict subclass is read through dict's own methods: its overrides never run
    assert server.handle(HostileDict(id="t3", name="memory", input={"command": "view", "path": "/memories/a.txt"})) == {
        "type": "tool_result",
        "tool_use_id": "t3",
        "content": "Here's the content of /memories/a.txt with line numbers:\n     1\tone\n     2\ttwo\n     3\t",
    }


def test_block_ids_and_names(server: MnemoMemoryToolServer) -> None:
    view = {"command": "view", "path": "/memories/a.txt"}
    result = server.handle(block(view, id=HostileStr("toolu_h")))
    assert result["tool_use_id"] == "toolu_h" and type(result["tool_use_id"]) is str and "is_error" not in result
    assert server.handle(block(view, name=HostileStr("memory")))["tool_use_id"] == "toolu_1"
    assert server.handle(block(view, name=HostileStr("bash"))) == error("toolu_1", "Error: Unknown tool: bash")
    assert server.handle(block(view, id=42)) == error("", "Error: Invalid tool_use block: `id` must be a string")
    assert server.handle(block(view, id=Everything())) == error(
        "", "Error: Invalid tool_use block: `id` must be a string"
    )
    assert server.handle(block(view, name=Everything())) == error(
        "toolu_1", "Error: Invalid tool_use block: `name` must be a string"
    )
    assert server.handle(block(view, name=None)) == error("toolu_1", "Error: Unknown tool: None")
    assert server.handle(None) == error("", "Error: Unknown tool: None")


# -- the input ---------------------------------------------------------------------------------------------


def test_inputs_that_raise(server: MnemoMemoryToolServer) -> None:
    cannot = CommandResult("Error: Invalid input: the object could not be read", True)
    assert server.execute(RaisingMapping()) == cannot
    assert server.execute({CollidingKey(): "x", "command": "view"}) == cannot
    assert server.execute(BadClass()) == cannot
    assert server.execute(Everything()) == cannot
    for not_an_object in (HostileList(), HostileTuple(), HostileStr("view"), HostileInt(3), object()):
        assert server.execute(not_an_object) == CommandResult("Error: Invalid input: expected an object", True)


def test_hostile_values_are_read_as_plain_values(server: MnemoMemoryToolServer, client: MnemoClient) -> None:
    result = server.execute(
        HostileDict(command=HostileStr("view"), path=HostileStr("/memories/a.txt"), view_range=HostileList([2, 2]))
    )
    assert result == CommandResult("Here's the content of /memories/a.txt with line numbers:\n     2\ttwo")
    assert server.execute(
        {"command": "view", "path": "/memories/a.txt", "view_range": HostileTuple((HostileInt(1), HostileInt(1)))}
    ) == CommandResult("Here's the content of /memories/a.txt with line numbers:\n     1\tone")
    assert server.execute(
        {"command": "insert", "path": HostileStr("/memories/a.txt"), "insert_line": HostileInt(1),
         "insert_text": HostileStr("mid")}
    ) == CommandResult("The file /memories/a.txt has been edited.")
    assert server.execute(
        {"command": "str_replace", "path": "/memories/a.txt", "old_str": HostileStr("mid"), "new_str": HostileStr("M")}
    ).text.startswith("The memory file has been edited.")
    assert client.query(tags=("path:/memories/a.txt",))[0].content == "one\nM\ntwo\n"
    # the unknown-command echo is of the plain copy
    assert server.execute({"command": HostileStr("destroy")}) == CommandResult("Error: Unknown command: destroy", True)
    # a command or tool name holding a control is quoted as its repr, as a hostile path is
    assert server.execute({"command": "view\x1b[2J\r"}) == CommandResult(
        "Error: Unknown command: 'view\\x1b[2J\\r'", True)
    assert server.handle(block({"command": "view"}, name="memory\u202e")) == error(
        "toolu_1", "Error: Unknown tool: 'memory\\u202e'")


def test_recursion_and_huge_values(server: MnemoMemoryToolServer, client: MnemoClient) -> None:
    looped: dict[str, Any] = {"command": "view"}
    looped["path"] = looped
    assert server.execute(looped) == CommandResult("Error: Parameter `path` of command `view` must be a string", True)
    ring: list[Any] = [1]
    ring.append(ring)
    assert server.execute({"command": "view", "path": "/memories/a.txt", "view_range": ring}) == CommandResult(
        "Error: Parameter `view_range` of command `view` must be a list of two integers", True
    )
    deep: Any = "/memories/a.txt"
    for _ in range(100_000):
        deep = [deep]
    assert server.execute({"command": "view", "path": deep}).is_error
    for huge in (10**5000, -(10**5000), 2**63, -(2**63) - 1):
        assert server.execute(
            {"command": "insert", "path": "/memories/a.txt", "insert_line": huge, "insert_text": "x"}
        ) == CommandResult(
            "Error: Parameter `insert_line` of command `insert` must be an integer between -2**63 and 2**63 - 1", True
        )
        ranged = server.execute({"command": "view", "path": "/memories/a.txt", "view_range": [1, huge]})
        assert ranged == CommandResult(
            "Error: Parameter `view_range` of command `view` must be a list of two integers"
            " between -2**63 and 2**63 - 1",
            True,
        )
    assert server.execute(
        {"command": "insert", "path": "/memories/a.txt", "insert_line": 2**63 - 1, "insert_text": "x"}
    ).text.startswith("Error: Invalid `insert_line` parameter: 9223372036854775807.")
    big = "x" * 20_000_000
    assert server.execute({"command": "create", "path": "/memories/big", "file_text": big}).text == (
        "Error: File /memories/big would be 20000000 bytes, over the limit of 1048576 bytes"
    )
    assert server.execute({"command": "view", "path": big}).is_error
    assert [i.version for i in client.list_records(tags=("path:/memories/a.txt",))] == [1]


# -- whatever it is given, at random --------------------------------------------------------------------

MAKERS: list[Any] = [
    lambda: boom, Everything, BadClass, RaisingMapping, HostileDict, lambda: HostileList([1, 2]),
    lambda: HostileTuple((1,)), lambda: HostileStr("/memories/a.txt"), lambda: HostileStr("memory"),
    lambda: HostileInt(5), CollidingKey, lambda: 10**5000, lambda: float("nan"), lambda: b"/memories", object,
]
# built by index: hypothesis itself would fail to describe some of these objects
HOSTILE = st.integers(0, len(MAKERS) - 1).map(lambda i: MAKERS[i]())
PLAIN = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(max_size=20),
    st.sampled_from(["view", "create", "str_replace", "insert", "delete", "rename", "memory", "/memories/a.txt"]),
)
VALUE = st.recursive(
    st.one_of(HOSTILE, PLAIN),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.builds(HostileList, st.lists(inner, max_size=2)),
        st.dictionaries(st.sampled_from(["command", "path", "view_range", "old_str", "id", "name", "input"]), inner,
                        max_size=4),
        st.builds(HostileDict, st.dictionaries(st.sampled_from(["command", "path", "input"]), inner, max_size=3)),
    ),
    max_leaves=6,
)
BLOCKS = st.one_of(
    VALUE,
    st.builds(lambda i, n, inp: {"type": "tool_use", "id": i, "name": n, "input": inp}, VALUE, VALUE, VALUE),
    st.builds(lambda i, n, inp: Block(id=i, name=n, input=inp), VALUE, VALUE, VALUE),
    st.builds(lambda inp: {"type": "tool_use", "id": "t", "name": "memory", "input": inp}, VALUE),
)


def test_handle_never_raises(server: MnemoMemoryToolServer, client: MnemoClient) -> None:
    @settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(BLOCKS)
    def check(tool_use: Any) -> None:
        result = server.handle(tool_use)
        assert set(result) <= {"type", "tool_use_id", "content", "is_error"}
        assert type(result["tool_use_id"]) is str and type(result["content"]) is str
        assert result["type"] == "tool_result"
        assert result.get("is_error", False) in (True, False)
        outcome = server.execute(tool_use)
        assert type(outcome) is CommandResult and type(outcome.text) is str

    check()
    assert client.verify().ok


# -- the SDK adapters -----------------------------------------------------------------------------------


def test_adapters_raise_nothing_but_tool_errors(client: MnemoClient) -> None:
    pytest.importorskip("anthropic")
    from anthropic.lib.tools import ToolError

    from mnemo.tools.anthropic import AsyncMnemoMemoryTool, MnemoMemoryTool

    tool = MnemoMemoryTool(client)
    async_tool = AsyncMnemoMemoryTool(client)

    class RaisingToDict:
        to_dict = boom

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.one_of(VALUE, st.builds(RaisingToDict), st.builds(Everything)))
    def check(command: Any) -> None:
        for method in ("call", "execute", "view", "create", "str_replace", "insert", "delete", "rename"):
            try:
                assert type(getattr(tool, method)(command)) is str
            except ToolError as exc:
                assert type(exc.content) is str and exc.content.startswith(("Error: ", "The path", "No replacement"))

            async def go(name: str = method) -> object:
                return await getattr(async_tool, name)(command)

            try:
                assert type(asyncio.run(go())) is str
            except ToolError as exc:
                assert type(exc.content) is str

    check()
    with pytest.raises(ToolError) as info:
        tool.execute(RaisingToDict())
    assert info.value.content == "Error: Invalid input: the object could not be read"


def test_an_error_whose_text_cannot_be_made(client: MnemoClient, monkeypatch: pytest.MonkeyPatch) -> None:
    from mnemo.errors import IntegrityError

    class Unprintable(IntegrityError):
        __str__ = boom  # type: ignore[assignment]

    server = MnemoMemoryToolServer(client)
    server.execute({"command": "create", "path": "/memories/f", "file_text": "x"})

    def damaged(*args: object) -> Any:
        raise Unprintable("x", 0)

    monkeypatch.setattr(client, "get", damaged)
    assert server.execute({"command": "view", "path": "/memories/f"}) == CommandResult("Error: Internal error", True)

    class Strange(Exception):
        pass

    def strange(*args: object) -> Any:
        raise Strange()

    monkeypatch.setattr(client, "get", strange)
    assert server.execute({"command": "view", "path": "/memories/f"}) == CommandResult(
        "Error: Internal error (Strange)", True
    )


def test_a_server_subclass_that_raises(client: MnemoClient) -> None:
    """`handle` and the adapters guard even an `execute` that a subclass made raise."""

    class Raising(MnemoMemoryToolServer):
        def execute(self, tool_input: object) -> CommandResult:
            raise Boom("subclass")

        def clear_all(self) -> CommandResult:
            raise Boom("subclass")

    server = Raising(client)
    assert server.handle(block({"command": "view", "path": "/memories"})) == error("toolu_1", "Error: Internal error")
    pytest.importorskip("anthropic")
    from anthropic.lib.tools import ToolError

    from mnemo.tools.anthropic import AsyncMnemoMemoryTool, MnemoMemoryTool

    for call in (
        lambda: MnemoMemoryTool(server).call({"command": "view", "path": "/memories"}),
        lambda: MnemoMemoryTool(server).clear_all_memory(),
        lambda: asyncio.run(AsyncMnemoMemoryTool(server).call({"command": "view", "path": "/memories"})),
        lambda: asyncio.run(AsyncMnemoMemoryTool(server).clear_all_memory()),
    ):
        with pytest.raises(ToolError) as info:
            call()
        assert info.value.content == "Error: Internal error"


OUT_OF_RANGE = " between -2**63 and 2**63 - 1"


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
