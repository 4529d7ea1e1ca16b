"""Each page of the UI, through starlette's test client, on both backends: what it shows (exact text in the
page), what it refuses, and that memory content is always text, never markup."""

from __future__ import annotations

import html
import re

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from helpers.ui import APP, IMG, OWNER, PREFIX, SCRIPT, create, edit
from markupsafe import escape
from starlette.testclient import TestClient

from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer
from mnemo.ui import Guard, create_app, views


def rows(page: str, table_id: str) -> list[list[str]]:
    """The cells of a table's body rows as text (tags dropped, entities unescaped)."""
    body = page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    out = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S):
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        if cells:
            out.append([html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in cells])
    return out


# -- the tree -------------------------------------------------------------------------------------------


def test_the_tree_lists_files_with_size_versions_and_last_change(
    tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    create(tool, "/memories/notes/a.md", "one\n")
    edit(tool, "/memories/notes/a.md", "one", "one two")
    create(tool, "/memories/b.md", "x" * 2048)
    page = browser.get("/memories")
    assert page.status_code == 200
    infos = {i.tags[-1]: i for i in owner.list_records()}
    a, b = infos["path:/memories/notes/a.md"], infos["path:/memories/b.md"]
    when = lambda i: i.updated_at.strftime("%Y-%m-%d %H:%M:%SZ")  # noqa: E731
    assert rows(page.text, "tree") == [  # a directory, its subdirectories, then its files
        ["memories/ mount agent:alice", "2.0K", "2 files", "", "forget"],
        ["notes/", "8B", "1 file", "", "forget"],
        ["a.md", "8B", "2", f"{when(a)} {OWNER}", ""],
        ["b.md", "2K", "1", f"{when(b)} {OWNER}", ""],
    ]
    assert f'href="{PREFIX}/file?path=/memories/notes/a.md"' in page.text


def test_the_tree_shows_the_mounts_the_agent_may_read_and_not_the_others(
    db: str, owner: MnemoClient, guard: Guard
) -> None:
    owner.grant("bob", "team:research", ["read", "write"])
    team = MnemoMemoryToolServer(owner, scope="team:research")
    create(team, "/memories/plan.md", "the plan")
    create(MnemoMemoryToolServer(owner, scope="team:secret"), "/memories/hidden.md", "hidden")
    with MnemoClient(db, "bob", durability="none") as bob:
        create(MnemoMemoryToolServer(bob), "/memories/own/a.md", "bob's")
        mounts = {"/memories/team": "team:research", "/memories/secret": "team:secret"}
        with TestClient(create_app(bob, guard=guard, mounts=mounts), base_url=APP) as web:
            web.get(f"/?token={guard.token}")
            page = web.get("/memories").text
    [plan] = owner.list_records(scope="team:research")
    [own] = owner.list_records(scope="agent:bob")
    # bob may read and write team:research, not forget there: no forget link on a folder holding its files
    assert rows(page, "tree") == [
        ["memories/ mount agent:bob", "13B", "2 files", "", ""],
        ["own/", "5B", "1 file", "", "forget"],
        ["a.md", "5B", "1", f"{own.updated_at.strftime('%Y-%m-%d %H:%M:%SZ')} bob", ""],
        ["team/ mount team:research", "8B", "1 file", "", ""],
        ["plan.md", "8B", "1", f"{plan.updated_at.strftime('%Y-%m-%d %H:%M:%SZ')} {OWNER}", ""],
    ]
    assert "secret" not in page and "hidden" not in page
    assert "<code>/memories/team</code> = <code>team:research</code>" in page


def test_a_write_by_another_process_shows_on_the_next_load(db: str, browser: TestClient) -> None:
    empty = [["memories/ mount agent:alice", "0B", "0 files", "", ""]]
    assert rows(browser.get("/memories").text, "tree") == empty
    with MnemoClient(db, OWNER, durability="none") as other:  # another client: another process's writes
        create(MnemoMemoryToolServer(other), "/memories/new.md", "fresh")
    assert [r[0] for r in rows(browser.get("/memories").text, "tree")] == ["memories/ mount agent:alice", "new.md"]


def test_the_tree_fragment_answers_204_until_the_tree_changes(db: str, browser: TestClient) -> None:
    page = browser.get("/memories").text
    stamp = re.search(r'data-stamp="([0-9a-f]+)"', page).group(1)  # type: ignore[union-attr]
    quiet = browser.get(f"/memories/fragment?stamp={stamp}")
    assert (quiet.status_code, quiet.text) == (204, "")
    with MnemoClient(db, OWNER, durability="none") as other:
        create(MnemoMemoryToolServer(other), "/memories/later.md", "later")
    changed = browser.get(f"/memories/fragment?stamp={stamp}")
    assert changed.status_code == 200
    assert changed.headers["x-tree-stamp"] != stamp
    assert f'href="{PREFIX}/file?path=/memories/later.md">later.md</a>' in changed.text
    again = browser.get(f"/memories/fragment?stamp={changed.headers['x-tree-stamp']}")
    assert again.status_code == 204


# -- a file, its versions, a diff ----------------------------------------------------------------------------


def test_a_file_shows_its_lines_numbered_and_every_version(
    tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    create(tool, "/memories/a.md", "first\nsecond")
    edit(tool, "/memories/a.md", "second", "2nd")
    versions = owner.history(owner.list_records()[0].id)
    page = browser.get("/file?path=/memories/a.md").text
    assert rows(page, "content") == [["1", "first"], ["2", "2nd"]]
    assert [r[2:6] for r in rows(page, "versions")] == [
        ["v1", versions[0].updated_at.strftime("%Y-%m-%d %H:%M:%SZ"), OWNER, str(versions[0].seq)],
        ["v2", versions[1].updated_at.strftime("%Y-%m-%d %H:%M:%SZ"), OWNER, str(versions[1].seq)],
    ]
    assert f'title="{versions[1].hash}">{versions[1].hash[:16]}</code>' in page
    old = browser.get("/file?path=/memories/a.md&version=1").text
    assert rows(old, "content") == [["1", "first"], ["2", "second"]]


def test_the_diff_between_two_versions(tool: MnemoMemoryToolServer, browser: TestClient) -> None:
    create(tool, "/memories/a.md", "keep\nold line\nend")
    edit(tool, "/memories/a.md", "old line", "new line")
    page = browser.get("/diff?path=/memories/a.md&a=1&b=2").text
    diff = html.unescape(re.sub(r"<[^>]+>", "", page.split('id="diff">', 1)[1].split("</pre>", 1)[0]))
    assert diff == (
        "--- /memories/a.md v1\n+++ /memories/a.md v2\n@@ -1,3 +1,3 @@\n keep\n-old line\n+new line\n end\n"
    )
    assert '<span class="del">-old line</span>' in page and '<span class="add">+new line</span>' in page
    same = browser.get("/diff?path=/memories/a.md&a=2&b=2").text
    assert "The two versions hold the same text." in same


def diff_of(page: str) -> list[tuple[str, str]]:
    """The diff's lines as (kind, text)."""
    body = page.split('id="diff">', 1)[1].split("</pre>", 1)[0]
    return [(kind, html.unescape(text)) for kind, text in re.findall(r'<span class="(\w+)">(.*?)</span>', body)]


def test_a_deleted_or_added_line_that_starts_like_a_header_is_a_change(
    tool: MnemoMemoryToolServer, browser: TestClient
) -> None:
    create(tool, "/memories/a.sql", "select 1;\n-- old note\n++counter;")
    edit(tool, "/memories/a.sql", "-- old note\n++counter;", "++ new note\n--counter;")
    assert diff_of(browser.get("/diff?path=/memories/a.sql&a=1&b=2").text) == [
        ("head", "--- /memories/a.sql v1"), ("head", "+++ /memories/a.sql v2"), ("hunk", "@@ -1,3 +1,3 @@"),
        ("same", " select 1;"), ("del", "--- old note"), ("del", "-++counter;"), ("add", "+++ new note"),
        ("add", "+--counter;"),
    ]


def test_a_diff_aligns_only_the_lines_between_what_both_versions_start_and_end_with(
    tool: MnemoMemoryToolServer, browser: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 60,000 lines of a few hundred values, each under 1% of them (difflib junks no line): aligning the
    # whole of two such versions that differ in one line took difflib half a minute, a core busy
    lines = [f"v{(i * 7919) % 613}" for i in range(60_000)]
    lines[30_000] = "the line that changes"
    create(tool, "/memories/big.txt", "\n".join(lines))
    edit(tool, "/memories/big.txt", "the line that changes", "changed")
    aligned: list[tuple[int, int]] = []
    matcher = views.difflib.SequenceMatcher

    def spy(junk: None, a: list[str], b: list[str]) -> object:
        aligned.append((len(a), len(b)))
        return matcher(junk, a, b)

    monkeypatch.setattr(views.difflib, "SequenceMatcher", spy)
    page = browser.get("/diff?path=/memories/big.txt&a=1&b=2").text
    assert aligned == [(7, 7)]  # the changed line and three of context on each side
    assert diff_of(page) == [
        ("head", "--- /memories/big.txt v1"), ("head", "+++ /memories/big.txt v2"),
        ("hunk", "@@ -29998,7 +29998,7 @@"),
        *[("same", " " + line) for line in lines[29_997:30_000]], ("del", "-" + lines[30_000]), ("add", "+changed"),
        *[("same", " " + line) for line in lines[30_001:30_004]],
    ]
    assert 'id="whole"' not in page


def test_a_changed_middle_too_long_to_align_is_shown_replaced_whole(
    tool: MnemoMemoryToolServer, browser: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "DIFF_ALIGN_LINES", 3)
    create(tool, "/memories/a.md", "head\n1\n2\n3\n4\nb\nc\nd\ne\ntail")
    edit(tool, "/memories/a.md", "1\n2\n3\n4\nb", "x\nb")
    page = browser.get("/diff?path=/memories/a.md&a=1&b=2").text
    assert diff_of(page) == [
        ("head", "--- /memories/a.md v1"), ("head", "+++ /memories/a.md v2"), ("hunk", "@@ -1,8 +1,5 @@"),
        ("same", " head"), *[("del", f"-{n}") for n in "1234"], ("add", "+x"),
        *[("same", " " + line) for line in "bcd"],
    ]
    assert '<p class="note" id="whole">More than 3 lines changed between the two versions: they are shown ' \
           "replaced whole, not aligned line by line.</p>" in page
    edit(tool, "/memories/a.md", "x\n", "")  # a middle of 1 line: aligned
    assert 'id="whole"' not in browser.get("/diff?path=/memories/a.md&a=2&b=3").text


def test_a_file_of_a_million_lines_makes_a_page_of_its_first_20000(
    tool: MnemoMemoryToolServer, browser: TestClient
) -> None:
    create(tool, "/memories/lines.txt", "".join(f"{n}\n" for n in range(1, 150_001)))  # under 1 MiB
    create(tool, "/memories/empty.txt", "\n" * ((1 << 20) - 1))  # 1 MiB of line ends: 1,048,576 lines
    page = browser.get("/file?path=/memories/lines.txt").text
    assert rows(page, "content")[-1] == ["20000", "20000"] and len(rows(page, "content")) == 20_000
    assert ('<p class="note" id="cut">The first 20,000 of 150,001 lines are shown; <code>mnemo cat</code> prints '
            "them all.</p>") in page
    empty = browser.get("/file?path=/memories/empty.txt")
    assert empty.status_code == 200 and len(empty.content) < 2_000_000  # not the 57 MB of a row a line
    assert "The first 20,000 of 1,048,576 lines are shown" in empty.text


def test_a_diff_longer_than_the_lines_a_page_shows_is_cut_saying_so(
    tool: MnemoMemoryToolServer, browser: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "SHOWN_LINES", 4)
    create(tool, "/memories/a.md", "a\nb\nc")
    edit(tool, "/memories/a.md", "b", "B")
    page = browser.get("/diff?path=/memories/a.md&a=1&b=2").text
    assert diff_of(page) == [("head", "--- /memories/a.md v1"), ("head", "+++ /memories/a.md v2"),
                             ("hunk", "@@ -1,3 +1,3 @@"), ("same", " a")]
    assert '<p class="note" id="cut">The first 4 of 7 lines of the diff are shown.</p>' in page
    monkeypatch.setattr(views, "SHOWN_LINES", 7)
    assert 'id="cut"' not in browser.get("/diff?path=/memories/a.md&a=1&b=2").text
    assert 'id="cut"' not in browser.get("/file?path=/memories/a.md").text


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("/file", 400, "the page needs its path"),
        ("/file?path=/etc/passwd", 400, "Path must start with /memories, got: /etc/passwd"),
        ("/file?path=/memories/../x", 400, "Path /memories/../x would escape /memories directory"),
        ("/file?path=/memories/none.md", 404, "The path /memories/none.md does not exist"),
        ("/file?path=/memories/a.md&version=9", 404, "there is no version 9"),
        ("/file?path=/memories/a.md&version=-1", 400, "version must be a number, got '-1'"),
        ("/file?path=/memories/a.md&version=\u00b2", 400, "version must be a number, got '\u00b2'"),
        ("/file?path=/memories/a.md&version=\u0661", 400, "version must be a number, got '\u0661'"),
        ("/diff?path=/memories/a.md&a=1&b=\u00b9", 400, "b must be a number, got '\u00b9'"),
        ("/diff?path=/memories/a.md&a=1", 400, "a diff needs two versions, a and b"),
        ("/record?id=0123", 404, "no record '0123' that you may read"),
        ("/record?id=a%00b", 404, "no record 'a\\x00b' that you may read"),  # PostgreSQL's text holds no NUL
        ("/forget?id=a%00b", 404, "no record 'a\\x00b' that you may read"),
    ],
)
def test_bad_addresses_get_a_clear_error_page(
    url: str, status: int, message: str, tool: MnemoMemoryToolServer, browser: TestClient
) -> None:
    create(tool, "/memories/a.md", "a")
    page = browser.get(url)
    assert page.status_code == status
    assert f'<p class="error" id="error">{escape(message)}</p>' in page.text


# -- memory content is text --------------------------------------------------------------------------------


def test_markup_in_memory_is_shown_as_text_on_every_page(
    tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    create(tool, "/memories/x.md", f"{SCRIPT}\n{IMG}")
    edit(tool, "/memories/x.md", IMG, IMG + " again")
    owner.remember(SCRIPT, tags=[IMG], metadata={IMG: SCRIPT})
    rec = next(r for r in owner.query() if "memorytool" not in r.tags)
    pages = [
        "/memories", "/file?path=/memories/x.md", "/diff?path=/memories/x.md&a=1&b=2", "/records",
        f"/record?id={rec.id}", "/search?q=script+img", "/forget?path=/memories/x.md", f"/forget?id={rec.id}",
        f"/records?tag={IMG}",
    ]
    for url in pages:
        page = browser.get(url)
        assert page.status_code == 200, url
        assert "<script>alert" not in page.text and "<img" not in page.text, url
        assert page.text.count("<script") == 1, url  # the page's own /static/ui.js alone
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in browser.get("/file?path=/memories/x.md").text
    assert "&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in browser.get("/file?path=/memories/x.md").text
    record = browser.get(f"/record?id={rec.id}").text
    assert "<th>&#34;&gt;&lt;img src=x onerror=alert(2)&gt;</th><td><code>&lt;script&gt;" in record


RLO = '<span class="ctl" title="RIGHT-TO-LEFT OVERRIDE">U+202E</span>'
PDF = '<span class="ctl" title="POP DIRECTIONAL FORMATTING">U+202C</span>'
LRI = '<span class="ctl" title="LEFT-TO-RIGHT ISOLATE">U+2066</span>'


def test_characters_that_reorder_text_are_shown_by_name_on_every_page(
    tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    # "safe \u202enoitcurtsni\u202c" reads in a browser as "safe instruction": shown as it is held
    create(tool, "/memories/x.md", "safe \u202enoitcurtsni\u202c <b>\nplain")
    edit(tool, "/memories/x.md", "plain", "plain \u2066x")
    owner.remember("r", tags=["t\u202ex"], metadata={"k\u202e": "v\u202e<"})
    rec = next(r for r in owner.query() if "memorytool" not in r.tags)
    pages = {url: browser.get(url).text for url in [
        "/memories", "/file?path=/memories/x.md", "/diff?path=/memories/x.md&a=1&b=2", "/records",
        f"/record?id={rec.id}", "/search?q=safe", "/forget?path=/memories/x.md", f"/forget?id={rec.id}",
    ]}
    for url, page in pages.items():
        assert not re.search("[\u202a-\u202e\u2066-\u2069]", page.split("<main>", 1)[1]), url
    file = pages["/file?path=/memories/x.md"]
    assert f"<pre>safe {RLO}noitcurtsni{PDF} &lt;b&gt;</pre>" in file and f"<pre>plain {LRI}x</pre>" in file
    assert f'<span class="add">+plain {LRI}x</span>' in pages["/diff?path=/memories/x.md&a=1&b=2"]
    assert f"<mark>safe</mark> {RLO}noitcurtsni{PDF} &lt;b&gt;" in pages["/search?q=safe"]
    assert f">t{RLO}x</a>" in pages["/records"] and f"<code>k{RLO}=v{RLO}&lt;</code>" in pages["/records"]
    assert f"<code>t{RLO}x</code>" in pages[f"/record?id={rec.id}"]
    assert f"<th>k{RLO}</th><td><code>v{RLO}&lt;</code>" in pages[f"/record?id={rec.id}"]
    assert f"<td>t{RLO}x</td>" in pages[f"/forget?id={rec.id}"]


# -- records that are not memory-tool files ---------------------------------------------------------------------


def test_records_by_scope_and_tag_with_their_metadata(
    tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    create(tool, "/memories/file.md", "a file")
    first = owner.remember("likes tea", tags=["prefs"], metadata={"source": "chat"}).id
    second = owner.remember("team fact", tags=["facts"], scope="team:x").id
    page = browser.get("/records").text
    assert re.findall(r"<h2>(.*?)</h2>", page) == ["agent:alice", "team:x"]
    cells = rows(page, "records") if 'id="records"' in page else None
    assert cells is None  # one table per scope, none named
    assert f'<a href="{PREFIX}/record?id={first}"><code>{first}</code></a>' in page
    assert f'<a href="{PREFIX}/record?id={second}"><code>{second}</code></a>' in page
    assert "<code>source=chat</code>" in page
    assert "a file" not in page and "memorytool" not in page
    by_tag = browser.get("/records?tag=facts").text
    assert second in by_tag and first not in by_tag
    by_scope = browser.get("/records?scope=agent:*").text
    assert first in by_scope and second not in by_scope
    record = browser.get(f"/record?id={first}").text
    assert rows(record, "content") == [["1", "likes tea"]]
    assert "<th>source</th><td><code>chat</code></td>" in record


def test_a_bad_records_filter_is_a_clear_error(browser: TestClient) -> None:
    page = browser.get("/records?scope=a*b")
    assert page.status_code == 400
    assert "scope" in page.text.split('id="error">', 1)[1]


# -- search ------------------------------------------------------------------------------------------------------


def test_search_marks_the_matching_words_of_each_matching_line(
    tool: MnemoMemoryToolServer, browser: TestClient
) -> None:
    create(tool, "/memories/trip.md", "Plans\nLisbon in <May>\nnothing here\nlisbon café")
    create(tool, "/memories/other.md", "unrelated")
    page = browser.get("/search?q=lisbon+cafe").text
    results = page.split('id="results">', 1)[1]
    assert results.count("<li>") == 1
    assert f'<a href="{PREFIX}/file?path=/memories/trip.md">/memories/trip.md</a>' in results
    assert '<td class="n">2</td><td><pre><mark>Lisbon</mark> in &lt;May&gt;</pre>' in results
    assert '<td class="n">4</td><td><pre><mark>lisbon</mark> <mark>café</mark></pre>' in results
    none = browser.get("/search?q=zebra").text
    assert "No file under /memories matches." in none


def test_a_query_that_cannot_be_read_is_a_clear_error(browser: TestClient) -> None:
    page = browser.get('/search?q="unclosed')
    assert page.status_code == 400
    assert "Invalid query" in page.text


def test_search_offers_modes_only_with_an_embedder(browser: TestClient) -> None:
    assert "<select" not in browser.get("/search").text
    page = browser.get("/search?q=x&mode=semantic")
    assert page.status_code == 400
    assert "Invalid mode: semantic needs an embedder" in page.text


# -- the chain, verify, grants ----------------------------------------------------------------------------------


def test_the_chain_page_shows_recent_entries_grants_and_checkpoints_to_an_admin(
    owner: MnemoClient, browser: TestClient
) -> None:
    rec = owner.remember("x").id
    owner.grant("bob", "team:*", ["read"])
    page = browser.get("/chain").text
    entries = rows(page, "log")
    assert [r[0] for r in entries] == ["2", "1", "0"]
    assert entries[0][2:4] == ["grant", OWNER] and entries[0][5] == "bob read on team:*"
    assert entries[1][5] == f"{rec} v1 scope agent:alice 1 bytes"
    assert rows(page, "grants") == [["bob", "team:*", "read"]]
    head_seq, head_hash = owner.head
    assert f"head: seq {head_seq} <code>{head_hash}</code>" in page


def test_another_agent_sees_no_chain_and_verify_reports_its_scopes(
    db: str, owner: MnemoClient, tool: MnemoMemoryToolServer, guard: Guard
) -> None:
    create(tool, "/memories/a.md", "owner's")
    with MnemoClient(db, "bob", durability="none") as bob:
        create(MnemoMemoryToolServer(bob), "/memories/b.md", "bob's")
        with TestClient(create_app(bob, guard=guard), base_url=APP) as web:
            web.get(f"/?token={guard.token}")
            chain = web.get("/chain").text
            report = web.get("/verify").text
    assert 'id="log"' not in chain and 'id="grants"' not in chain
    assert "bob does not hold admin on <code>*</code>" in chain
    assert "<b>OK</b>: scopes agent:bob: 1 records, 1 versions checked" in report
    assert "a.md" not in chain + report


def test_verify_reports_the_whole_chain_to_an_admin(owner: MnemoClient, browser: TestClient) -> None:
    owner.remember("x")
    page = browser.get("/verify").text
    seq, head = owner.head
    assert f"<b>OK</b>: {owner.path}: {seq + 1} entries, chain intact" in page
    assert f"head: {seq}:<code>{head}</code>" in page


def test_the_chain_page_lists_the_signed_checkpoints(db: str, owner: MnemoClient, browser: TestClient) -> None:
    key = Ed25519PrivateKey.generate()
    with MnemoClient(db, OWNER, durability="none", signing_key=key) as signer:
        signer.remember("x")
        first = signer.checkpoint()
        signer.remember("y")
        second = signer.checkpoint()
    page = browser.get("/chain").text
    shown = page.split("<h2>Checkpoints</h2>", 1)[1].split("</table>", 1)[0]
    cells = [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", shown)]
    assert [cells[0], cells[3]] == [str(second), str(first)]  # newest first
    head = owner.log(since=second)[0].body["head"].hex()[:12]
    assert cells[2] == f"signs seq {second - 1} {head} key {key.public_key().public_bytes_raw().hex()[:12]}"


def test_the_chain_page_says_how_far_back_it_looked_for_checkpoints(
    db: str, owner: MnemoClient, browser: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page looks back from the head through at most CHECKPOINT_SEARCH entries, and says so when it
    found fewer checkpoints than it shows; a chain it read whole has nothing to say."""
    assert "checkpoint-search" not in browser.get("/chain").text
    assert "No signed checkpoint yet" in browser.get("/chain").text
    monkeypatch.setattr(views, "CHECKPOINT_SEARCH", 4)
    with MnemoClient(db, OWNER, durability="none", signing_key=Ed25519PrivateKey.generate()) as signer:
        for i in range(5):
            signer.remember(f"r{i}")
        old = signer.checkpoint()
        for i in range(5):
            signer.remember(f"s{i}")
        head = signer.head[0]
        page = browser.get("/chain").text
        assert str(old) not in re.findall(r"<td>(\d+)</td>", page.split("<h2>Checkpoints</h2>", 1)[1])
        note = f"No signed checkpoint among the last 4 entries. Checkpoints were looked for from seq {head - 3} on"
        assert note in page and "No signed checkpoint yet" not in page
        new = signer.checkpoint()
    page = browser.get("/chain").text
    shown = page.split("<h2>Checkpoints</h2>", 1)[1].split("</table>", 1)[0]
    assert re.findall(r"<tr><td>(\d+)</td>", shown) == [str(new)]
    assert f"Checkpoints were looked for from seq {new - 3} on; <code>mnemo log DB --op checkpoint</code>" in page
