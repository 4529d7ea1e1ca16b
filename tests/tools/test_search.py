"""The search of the memory tool's files (docs/MEMORY_TOOL.md §11), string for string: the result, its
notes and bounds, every refusal in its order, the path filter applied before the limit, and mounts (a
readable mount searched at its tree paths, an unreadable one and shadowed files never found). On the
file backend, whose storage serves recall (`db_path`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import state

from mnemo import MnemoClient
from mnemo.tools import CommandResult, MnemoMemoryToolServer
from mnemo.tools.text import SEARCH_CUT_NOTE, SEARCH_HEADER

AGENT = "agent-1"
PROFILE = "# Ana\n- vegetarian\n- prefers trains over planes\n"
LISBON = "# Trip: Lisbon\n- when: June\n- book: night train via Madrid\n"
EMPTY_TAIL = (
    "Try other or fewer words, a prefix such as plan* (it finds plan, plans, planning), or a wider path; "
    "or view the path to see what it holds."
)


def header(path: str, query: str) -> str:
    return SEARCH_HEADER.format(path=path, query=query)


def empty(path: str, query: str) -> str:
    return f"No file in {path} matches `{query}`. " + EMPTY_TAIL


@pytest.fixture
def db(db_path: Path) -> str:
    return str(db_path)


@pytest.fixture
def client(db: str) -> Iterator[MnemoClient]:
    with MnemoClient(db, AGENT, durability="none") as c:
        yield c


@pytest.fixture
def server(client: MnemoClient) -> MnemoMemoryToolServer:
    return MnemoMemoryToolServer(client)


def create(server: MnemoMemoryToolServer, path: str, text: str) -> None:
    result = server.execute({"command": "create", "path": path, "file_text": text})
    assert not result.is_error, result.text


def ok(result: CommandResult) -> str:
    assert not result.is_error, result.text
    return result.text


def error(result: CommandResult) -> str:
    assert result.is_error, result.text
    return result.text


# -- the result -------------------------------------------------------------------------------------------


def test_the_result_names_each_file_best_first_with_its_numbered_lines(
    client: MnemoClient, server: MnemoMemoryToolServer
) -> None:
    create(server, "/memories/user/profile.md", PROFILE)
    create(server, "/memories/trips/lisbon.md", LISBON)
    client.remember("trains everywhere, but not a file of the tool", tags=["notes"])
    assert ok(server.search("train* plane*")) == "\n".join([
        header("/memories", "train* plane*"),
        "/memories/user/profile.md",
        "     3\t- prefers trains over planes",
        "/memories/trips/lisbon.md",
        "     3\t- book: night train via Madrid",
    ])
    # a directory narrows it, echoed as sent; the file's path is canonical
    assert ok(server.search("train*", "/memories//trips/")) == "\n".join([
        header("/memories//trips/", "train*"), "/memories/trips/lisbon.md", "     3\t- book: night train via Madrid",
    ])
    # the path of a file searches that file alone
    assert ok(server.search("june train", "/memories/trips/lisbon.md")) == "\n".join([
        header("/memories/trips/lisbon.md", "june train"), "/memories/trips/lisbon.md",
        "     2\t- when: June", "     3\t- book: night train via Madrid",
    ])
    assert ok(server.search("june", "/memories/user/profile.md")) == empty("/memories/user/profile.md", "june")
    # what a record outside the tool says is never a result; an excluded word leaves a file out
    assert ok(server.search("everywhere")) == empty("/memories", "everywhere")
    assert ok(server.search("train* -madrid")) == "\n".join([
        header("/memories", "train* -madrid"), "/memories/user/profile.md", "     3\t- prefers trains over planes",
    ])
    # execute_search takes a tool's input: null counts as omitted, other keys (a command too) are ignored
    same = server.execute_search({"query": "train* -madrid", "path": None, "limit": None, "command": "delete"})
    assert same == server.search("train* -madrid")


def test_at_most_three_lines_a_file_in_line_order_and_long_lines_marked(server: MnemoMemoryToolServer) -> None:
    long_line = "a train " + "x" * 300
    text = "\n".join(["train one", "nothing", "train two", long_line, "train train three", "train four"])
    create(server, "/memories/log.md", text)
    # the lines with the most query words first, then the earliest; shown in line order
    assert ok(server.search("train three")) == "\n".join([
        header("/memories", "train three"), "/memories/log.md",
        "     1\ttrain one", "     3\ttrain two", "     5\ttrain train three",
    ])
    assert ok(server.search("xxx* train")) == "\n".join([
        header("/memories", "xxx* train"), "/memories/log.md",
        "     1\ttrain one", "     3\ttrain two",
        f"     4\t{long_line[:200]}[... {len(long_line) - 200} more characters]",
    ])


def test_more_files_than_the_limit_say_so(server: MnemoMemoryToolServer) -> None:
    for i, words in enumerate(["kiwi kiwi kiwi", "kiwi kiwi", "kiwi"]):
        create(server, f"/memories/f{i}.md", words)
    assert ok(server.search("kiwi", limit=2)) == "\n".join([
        header("/memories", "kiwi"),
        "/memories/f0.md", "     1\tkiwi kiwi kiwi",
        "/memories/f1.md", "     1\tkiwi kiwi",
        "... (the best 2 files are shown and more match: add words, search a narrower path, or raise limit to see "
        "the others)",
    ])
    assert "more match" not in ok(server.search("kiwi", limit=3))
    assert ok(server.search("kiwi", limit=1)).split("\n")[1:3] == ["/memories/f0.md", "     1\tkiwi kiwi kiwi"]


def test_the_default_limit_is_ten_and_a_hundred_the_most(server: MnemoMemoryToolServer) -> None:
    for i in range(11):
        create(server, f"/memories/f{i:02d}.md", "ibis")
    text = ok(server.search("ibis"))
    assert len([line for line in text.split("\n") if line.startswith("/memories/")]) == 10
    assert text.endswith("\n... (the best 10 files are shown and more match: add words, search a narrower path, or "
                         "raise limit to see the others)")
    assert "more match" not in ok(server.search("ibis", limit=100))
    assert error(server.search("ibis", limit=101)).endswith("must be an integer from 1 to 100")


def test_the_path_is_a_filter_of_the_recall_so_the_limit_counts_files_under_it(
    client: MnemoClient, server: MnemoMemoryToolServer
) -> None:
    # Outside the path, many files and records match far better; the one file under it is still found.
    for i in range(30):
        create(server, f"/memories/other/f{i:02d}.md", "lynx " * 20)
        client.remember("lynx " * 20, tags=["notes"])
    create(server, "/memories/zoo/cats.md", "a lynx, once, and lions\n")
    assert ok(server.search("lynx", "/memories/zoo", limit=1)) == "\n".join([
        header("/memories/zoo", "lynx"), "/memories/zoo/cats.md", "     1\ta lynx, once, and lions",
    ])
    # a sibling whose name starts like the directory's is not under it
    create(server, "/memories/zoology.md", "lynx")
    assert "zoology" not in ok(server.search("lynx", "/memories/zoo", limit=100))


def test_hidden_files_are_searched(server: MnemoMemoryToolServer) -> None:
    create(server, "/memories/.drafts/idea.md", "an idea about otters")
    create(server, "/memories/node_modules/x.js", "// otters")
    text = ok(server.search("otters"))
    assert sorted(text.split("\n")[1::2]) == ["/memories/.drafts/idea.md", "/memories/node_modules/x.js"]


# -- bounds ----------------------------------------------------------------------------------------------------


def test_results_are_cut_at_whole_files_within_max_view_chars(client: MnemoClient) -> None:
    max_chars = 2 * 64 + 1024
    server = MnemoMemoryToolServer(client, max_path_length=64, max_view_chars=max_chars)
    entries = []
    for i in range(20):
        lines = [f"salmon {i} " + "s" * 150, "nothing", f"salmon again {i}", f"and salmon once more {i}"]
        create(server, f"/memories/fish/{i:02d}.md", "\n".join(lines))
        entries.append((i, lines))
    text = ok(server.search("salmon", limit=20))
    assert len(text) <= max_chars
    shown = text.split("\n")
    assert shown[0] == header("/memories", "salmon")
    # every file shown is whole (its path and its three lines), and the note counts them
    files = [line for line in shown[1:-1] if line.startswith("/")]
    k = len(files)
    assert 0 < k < 20 and len(shown) == 1 + 4 * k + 1
    assert shown[-1] == SEARCH_CUT_NOTE.format(k=k, m=20)
    # one more file would not have fit
    full = ok(MnemoMemoryToolServer(client).search("salmon", limit=20)).split("\n")
    assert shown[:-1] == full[: 1 + 4 * k]
    assert len("\n".join(full[: 1 + 4 * (k + 1)] + [SEARCH_CUT_NOTE.format(k=k + 1, m=20)])) > max_chars


def test_an_echoed_query_and_path_fit_any_allowed_bound(client: MnemoClient) -> None:
    max_chars = 2 * 64 + 1024
    server = MnemoMemoryToolServer(client, max_path_length=64, max_view_chars=max_chars)
    path = "/memories/" + "d" * 40
    create(server, path + "/f.md", ("walrus " * 30 + "\n") * 3)
    query = " ".join(["walrus"] * 9)  # within the echo limit, (max_chars - 1024) // 2 = 64 characters
    text = ok(server.search(query, path, limit=1))
    assert len(text) <= max_chars
    assert text.startswith(header(path, query) + "\n" + path + "/f.md\n")
    # a longer query (up to 1,000 characters is a query) is echoed cut after the echo limit, with its mark
    long_query = " ".join(["walrus"] * 32)
    assert server.echo_limit == 64
    shown = long_query[:64] + f"[... {len(long_query) - 64} more characters]"
    text = ok(server.search(long_query, path, limit=1))
    assert len(text) <= max_chars
    assert text.startswith(header(path, shown) + "\n" + path + "/f.md\n")
    nothing = " ".join(["zebra"] * 32)
    assert ok(server.search(nothing)) == empty("/memories", nothing[:64] + f"[... {len(nothing) - 64} more characters]")


HOSTILE_QUERIES = [
    "trains \x1b[2J\x1b[31mred",  # an escape sequence: clears a terminal, recolours what follows
    "trains\rfake",  # a carriage return: the line shows as another
    "trains\x00",  # NUL
    "trains \u202egnirts",  # a right-to-left override
    "trains\n/memories/secret.md\n     1\tfake line",  # line breaks: fake lines of a result
    "trains \u2028 \u2066x",  # a line separator, an isolate
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_a_query_with_controls_is_echoed_as_its_repr_never_raw(
    db: str, server: MnemoMemoryToolServer, query: str
) -> None:
    """A query holding a character a path refuses (docs/MEMORY_TOOL.md §4 rule 3) is quoted as the `Invalid
    path` error quotes a path, as its `repr`, in the header, the empty result and the refusal of a mode."""
    create(server, "/memories/a.md", PROFILE)
    before = state(db)
    shown = repr(query)
    text = ok(server.search(query))
    assert text == header("/memories", shown) + "\n/memories/a.md\n     3\t- prefers trains over planes"
    nothing = query.replace("trains", "zebra")
    assert ok(server.execute_search({"query": nothing})) == empty("/memories", repr(nothing))
    modes = "use one of hybrid, lexical, semantic"
    assert error(server.search("x", mode=query)) == f"Error: Invalid mode: {shown}; {modes}"
    for answer in (text, ok(server.search(nothing))):
        assert not any(ch in answer for ch in "\x1b\r\x00\u202e\u2028\u2066")
    assert state(db) == before


def test_a_hostile_query_is_cut_after_the_echo_limit_as_its_repr(client: MnemoClient) -> None:
    server = MnemoMemoryToolServer(client, max_path_length=64, max_view_chars=2 * 64 + 1024)
    query = "zebra\x1b[2J " + "zebra " * 20
    shown = repr(query)
    assert ok(server.search(query)) == empty("/memories", shown[:64] + f"[... {len(shown) - 64} more characters]")


# -- refusals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "the query is empty: give one or more words to search for"),
        ("   ", "the query is empty: give one or more words to search for"),
        ('"night', "the query has an unclosed quote in '\"night': close the phrase with \" or remove the quote"),
        ("-trains", "the query has only excluded words (-word): add at least one word to search for"),
        ("c*", "the prefix 'c*' is too short: give at least 2 characters before the *"),
        ("c*t", "the query word 'c*t' has * inside it: * may only end a word, as in word*"),
        ('""', "the query has an empty phrase '\"\"': put words between the quotes"),
        (",,,", "the query word ',,,' has no letters or digits to search for: remove it"),
        ("x" * 1001, "the query is 1001 characters long, over the limit of 1000: search for a few distinctive words "
                     "instead"),
    ],
)
def test_a_bad_query_is_refused_with_its_reason_and_changes_nothing(
    db: str, server: MnemoMemoryToolServer, query: str, reason: str
) -> None:
    create(server, "/memories/a.md", "trains")
    before = state(db)
    assert error(server.search(query)) == f"Error: Invalid query: {reason}"
    assert error(server.execute_search({"query": query, "path": "/memories/a.md"})) == f"Error: Invalid query: {reason}"
    assert state(db) == before


def test_bad_input_in_the_memory_tools_order(db: str, server: MnemoMemoryToolServer) -> None:
    create(server, "/memories/a.md", "trains")
    before = state(db)
    limit_text = "Error: Parameter `limit` of command `search` must be an integer from 1 to 100"
    for given, text in [
        ("a string", "Error: Invalid input: expected an object"),
        ({}, "Error: Missing required parameter `query` for command `search`"),
        ({"query": None}, "Error: Missing required parameter `query` for command `search`"),
        ({"query": 5}, "Error: Parameter `query` of command `search` must be a string"),
        ({"query": "\ud800"}, "Error: Parameter `query` of command `search` must be valid Unicode text "
                              "(it holds an unpaired surrogate)"),
        ({"query": "x", "path": ["/memories"]}, "Error: Parameter `path` of command `search` must be a string"),
        ({"query": "x", "limit": 0}, limit_text),
        ({"query": "x", "limit": 101}, limit_text),
        ({"query": "x", "limit": 2**70}, limit_text),
        ({"query": "x", "limit": True}, limit_text),
        ({"query": "x", "limit": "5"}, limit_text),
        ({"query": "x", "limit": 2.0}, limit_text),
        # fields in order: the query's type before the path's, the path's before the limit's
        ({"query": 1, "path": 2, "limit": 0}, "Error: Parameter `query` of command `search` must be a string"),
        ({"query": "x", "path": 2, "limit": 0}, "Error: Parameter `path` of command `search` must be a string"),
        # then the path's rules, then the query's syntax
        ({"query": '"', "path": "/etc"}, "Error: Path must start with /memories, got: /etc"),
        ({"query": "x", "path": "/memories/../etc"}, "Error: Path /memories/../etc would escape /memories directory"),
        ({"query": "x", "path": "/memories/a\u200bb"}, "Error: Invalid path: '/memories/a\\u200bb'"),
        ({"query": '"', "path": "/memories/nowhere"}, "Error: Invalid query: the query has an unclosed quote in "
                                                      "'\"': close the phrase with \" or remove the quote"),
        # and last, the path must be there
        ({"query": "x", "path": "/memories/nowhere"}, "The path /memories/nowhere does not exist. Please provide "
                                                      "a valid path."),
    ]:
        assert error(server.execute_search(given)) == text, given
    assert error(server.search("x", "/memories/nowhere/")) == (
        "The path /memories/nowhere/ does not exist. Please provide a valid path."
    )
    assert error(server.search("x", limit=0)) == limit_text

    class Raising(Mapping[str, Any]):
        def __getitem__(self, key: str) -> Any:
            raise RuntimeError("no")

        def __iter__(self) -> Iterator[str]:
            return iter(["query"])

        def __len__(self) -> int:
            return 1

    assert error(server.execute_search(Raising())) == "Error: Invalid input: the object could not be read"
    assert state(db) == before


def test_an_agent_that_may_not_read_learns_nothing(db: str, client: MnemoClient) -> None:
    create(MnemoMemoryToolServer(client, scope="team:x"), "/memories/secret.md", "the code is 1234")
    with MnemoClient(db, "agent-2", durability="none") as outsider:
        server = MnemoMemoryToolServer(outsider, scope="team:x")
        denied = "Error: Permission denied: agent-2 may not read in scope team:x"
        # the same answer for a file, a missing path and a match or none
        for query, path in [("code", None), ("nothing", None), ("code", "/memories/secret.md"),
                            ("code", "/memories/none")]:
            assert error(server.search(query, path)) == denied
        # a bad path or query is refused first, as the memory tool refuses before its permission check
        assert error(server.search("x", "/tmp")) == "Error: Path must start with /memories, got: /tmp"
        assert error(server.search("-x")).startswith("Error: Invalid query: ")
        client.grant("agent-2", "team:x", ["write"])  # write without read shows nothing either
        assert error(server.search("code")) == denied
        client.grant("agent-2", "team:x", ["read"])
        assert ok(server.search("code")).split("\n")[1:] == ["/memories/secret.md", "     1\tthe code is 1234"]


def test_a_search_writes_nothing_and_runs_on_a_read_only_client(db: str, server: MnemoMemoryToolServer) -> None:
    create(server, "/memories/a.md", "trains")
    before = state(db)
    expected = ok(server.search("train*"))
    with MnemoClient(db, AGENT, readonly=True) as reader:
        assert ok(MnemoMemoryToolServer(reader).search("train*")) == expected
    assert state(db) == before


# -- mounts ------------------------------------------------------------------------------------------------------

TEAM = "team:research"
MOUNTS = {"/memories/team": TEAM}


@pytest.fixture
def owner(db: str) -> Iterator[MnemoClient]:
    with MnemoClient(db, "owner", durability="none") as c:  # the first to open owns the database
        yield c


def agent_server(db: str, agent: str, **options: Any) -> MnemoMemoryToolServer:
    return MnemoMemoryToolServer(MnemoClient(db, agent, durability="none"), mounts=MOUNTS, **options)


def test_a_readable_mount_is_searched_at_its_tree_paths(db: str, owner: MnemoClient) -> None:
    team = MnemoMemoryToolServer(owner, scope=TEAM)
    create(team, "/memories/plan.md", "the plan: otters first\nthen beavers")
    create(team, "/memories/notes/beavers.md", "beavers build dams")
    owner.grant("me", TEAM, ["read"])  # a read-only mount
    me = agent_server(db, "me")
    try:
        create(me, "/memories/mine.md", "my beavers")
        text = ok(me.search("beaver*", limit=10))
        paths = [line for line in text.split("\n")[1:] if line.startswith("/")]
        assert sorted(paths) == ["/memories/mine.md", "/memories/team/notes/beavers.md", "/memories/team/plan.md"]
        # each mount ranked in its own scope, then merged by score: the same order as the scores say
        scores = {
            "/memories/mine.md": me.client.recall("beaver*", scope="agent:me")[0].score,
            **{f"/memories/team{hit.record.tags[-1][len('path:/memories'):]}": hit.score
               for hit in me.client.recall("beaver*", scope=TEAM)},
        }
        assert paths == sorted(scores, key=lambda p: -scores[p])
        # a search of the mount, or of a folder in it, finds its files alone
        assert ok(me.search("beaver*", "/memories/team/notes")) == "\n".join([
            header("/memories/team/notes", "beaver*"), "/memories/team/notes/beavers.md", "     1\tbeavers build dams",
        ])
        assert [line for line in ok(me.search("beaver*", "/memories/team")).split("\n") if line.startswith("/")] == \
            [p for p in paths if p.startswith("/memories/team/")]
        assert ok(me.search("otters", "/memories/team/plan.md")).split("\n")[1:] == [
            "/memories/team/plan.md", "     1\tthe plan: otters first",
        ]
    finally:
        me.client.close()


def test_a_scope_the_agent_cannot_read_is_never_in_the_results(db: str, owner: MnemoClient) -> None:
    me = agent_server(db, "me")
    try:
        create(me, "/memories/mine.md", "beavers at home")
        alone = ok(me.search("beaver*"))
        team = MnemoMemoryToolServer(owner, scope=TEAM)
        create(team, "/memories/plan.md", "beavers " * 10)
        create(team, "/memories/home.md", "beavers at home, twice: beavers")
        # not readable: the mount is not there; the search answers exactly as before, word for word
        assert ok(me.search("beaver*")) == alone
        assert error(me.search("beaver*", "/memories/team")) == (
            "The path /memories/team does not exist. Please provide a valid path."
        )
        owner.grant("me", TEAM, ["write", "forget"])  # without read, still not there
        assert ok(me.search("beaver*")) == alone
        owner.grant("me", TEAM, ["read"])
        assert "/memories/team/plan.md" in ok(me.search("beaver*"))
    finally:
        me.client.close()


def test_shadowed_files_are_never_results_nor_take_the_limits_places(db: str, owner: MnemoClient) -> None:
    me = agent_server(db, "me")
    try:
        # Made while the team's folder was not shown: files of the agent's own scope at /memories/team/...
        for i in range(12):
            create(me, f"/memories/team/old{i:02d}.md", "heron " * 30)
        create(me, "/memories/mine.md", "one heron")
        owner.grant("me", TEAM, ["read", "write"])
        create(me, "/memories/team/shared.md", "a heron, seen by the team")
        # Now the team's mount is shown and shadows them: they better match, and are never found.
        text = ok(me.search("heron", limit=2))
        assert sorted(line for line in text.split("\n") if line.startswith("/")) == [
            "/memories/mine.md", "/memories/team/shared.md",
        ]
        assert "old" not in text and "more match" not in text
        assert ok(me.search("heron", limit=1)).endswith("more match: add words, search a narrower path, or raise "
                                                        "limit to see the others)")
        assert ok(me.search("heron", "/memories/team")).split("\n")[1:] == [
            "/memories/team/shared.md", "     1\ta heron, seen by the team",
        ]
    finally:
        me.client.close()


def test_a_mount_point_is_a_directory_to_search_even_when_empty(db: str, owner: MnemoClient) -> None:
    owner.grant("me", TEAM, ["read"])
    me = agent_server(db, "me")
    try:
        assert ok(me.search("anything", "/memories/team")) == empty("/memories/team", "anything")
    finally:
        me.client.close()


def test_another_root_is_searched_by_default_and_its_files_alone(client: MnemoClient) -> None:
    notes = MnemoMemoryToolServer(client, root="/notes")
    create(notes, "/notes/a.md", "puffins nest here")
    create(MnemoMemoryToolServer(client), "/memories/b.md", "puffins too")
    assert ok(notes.search("puffin*")) == "\n".join([
        header("/notes", "puffin*"), "/notes/a.md", "     1\tpuffins nest here",
    ])
    assert error(notes.search("puffin*", "/memories")) == "Error: Path must start with /notes, got: /memories"
