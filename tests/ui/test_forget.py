"""Forget from the UI: the confirmation lists exactly what will be erased, the reason is required, and
the result names the forget entry; every refusal leaves the database as it was."""

from __future__ import annotations

import html
import re

import pytest
from helpers.ui import APP, ORIGIN, create, csrf, edit
from starlette.testclient import TestClient

from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer
from mnemo.ui import Guard


def targets(page: str) -> list[list[str]]:
    body = page.split('id="targets"', 1)[1].split("</table>", 1)[0]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", row)]
            for row in re.findall(r"<tr>(<td>.*?)</tr>", body)]


def hidden(page: str) -> list[tuple[str, str]]:
    return [(n, html.unescape(v)) for n, v in re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', page)]


def post(web: TestClient, fields: list[tuple[str, str]], reason: str) -> object:
    data: dict[str, str | list[str]] = {}
    for name, value in fields:
        if name == "ids":
            data.setdefault("ids", [])
            data["ids"].append(value)  # type: ignore[union-attr]
        else:
            data[name] = value
    data["reason"] = reason
    return web.post("/forget", data=data, headers={"origin": ORIGIN})


def test_forgetting_a_folder_lists_each_file_then_erases_them_with_the_reason(
    tool: MnemoMemoryToolServer, owner: MnemoClient, guard: Guard, browser: TestClient
) -> None:
    create(tool, "/memories/trip/plan.md", "day one")
    edit(tool, "/memories/trip/plan.md", "one", "1")
    create(tool, "/memories/trip/bags.md", "socks")
    create(tool, "/memories/keep.md", "stays")
    infos = {i.tags[-1].removeprefix("path:"): i for i in owner.list_records()}
    page = browser.get("/forget?path=/memories/trip/").text
    assert "<h1>Forget /memories/trip?</h1>" in page
    assert "This erases 2 records, every version of each" in page
    bags, plan = infos["/memories/trip/bags.md"], infos["/memories/trip/plan.md"]
    assert [row[:5] for row in targets(page)] == [
        [bags.id, "agent:alice", "/memories/trip/bags.md", "1", "5B"],
        [plan.id, "agent:alice", "/memories/trip/plan.md", "2", "5B"],
    ]
    fields = hidden(page)
    assert fields == [("csrf", csrf(guard, browser)), ("path", "/memories/trip"), ("ids", bags.id), ("ids", plan.id)]
    done = post(browser, fields, "trip cancelled")
    assert done.status_code == 200  # type: ignore[attr-defined]
    seq, digest = owner.head
    assert f"Forgot 2 records: forget entry seq <b>{seq}</b>, hash <code>{digest}</code>." in done.text  # type: ignore[attr-defined]
    [entry] = owner.log(since=seq)
    assert (entry.op, sorted(entry.body["ids"])) == ("forget", sorted([bags.id, plan.id]))
    assert [i.id for i in owner.list_records()] == [infos["/memories/keep.md"].id]
    for rec in (bags, plan):
        with pytest.raises(Exception, match="that you may read"):
            owner.get(rec.id)


def test_forgetting_one_record_by_id(owner: MnemoClient, browser: TestClient) -> None:
    rec = owner.remember("a fact", tags=["facts", "x"])
    page = browser.get(f"/forget?id={rec.id}").text
    assert [row[:4] for row in targets(page)] == [[rec.id, "agent:alice", "facts x", "1"]]
    done = post(browser, hidden(page), "wrong fact")
    assert f"forget entry seq <b>{owner.head[0]}</b>" in done.text  # type: ignore[attr-defined]
    assert owner.list_records() == []


@pytest.mark.parametrize("reason", ["", "   \n"])
def test_a_forget_without_a_reason_is_refused(
    reason: str, tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    create(tool, "/memories/a.md", "keep")
    head = owner.head
    page = browser.get("/forget?path=/memories/a.md").text
    refused = post(browser, hidden(page), reason)
    assert refused.status_code == 400  # type: ignore[attr-defined]
    assert "say why: a forget needs a reason, kept in its entry" in refused.text  # type: ignore[attr-defined]
    assert owner.head == head and len(owner.list_records()) == 1


def test_a_selection_that_changed_since_the_page_was_shown_forgets_nothing(
    db: str, tool: MnemoMemoryToolServer, owner: MnemoClient, browser: TestClient
) -> None:
    create(tool, "/memories/dir/a.md", "a")
    page = browser.get("/forget?path=/memories/dir").text
    with MnemoClient(db, "alice", durability="none") as other:
        create(MnemoMemoryToolServer(other), "/memories/dir/b.md", "written meanwhile")
    head = owner.head
    refused = post(browser, hidden(page), "tidy")
    assert refused.status_code == 409  # type: ignore[attr-defined]
    assert "what this would forget changed since the page was shown" in refused.text  # type: ignore[attr-defined]
    assert [row[2] for row in targets(refused.text)] == ["/memories/dir/a.md", "/memories/dir/b.md"]  # type: ignore[attr-defined]
    assert owner.head == head and len(owner.list_records()) == 2


@pytest.mark.parametrize(
    ("url", "status", "message"),
    [
        ("/forget", 400, "forget a path or a record id, one of them"),
        ("/forget?path=/memories/a.md&id=01", 400, "forget a path or a record id, one of them"),
        ("/forget?path=/memories/none", 404, "The path /memories/none does not exist"),
        ("/forget?path=/tmp", 400, "Path must start with /memories, got: /tmp"),
    ],
)
def test_a_forget_of_nothing_is_refused(url: str, status: int, message: str, tool: MnemoMemoryToolServer,
                                        browser: TestClient) -> None:
    create(tool, "/memories/a.md", "a")
    page = browser.get(url)
    assert page.status_code == status
    assert html.unescape(page.text.split('id="error">', 1)[1].split("</p>", 1)[0]) == message


def test_a_forget_the_agent_may_not_make_is_refused(
    db: str, owner: MnemoClient, guard: Guard
) -> None:
    owner.grant("bob", "team:x", ["read"])
    create(MnemoMemoryToolServer(owner, scope="team:x"), "/memories/t.md", "team")
    from mnemo.ui import create_app

    with MnemoClient(db, "bob", durability="none") as bob, TestClient(
        create_app(bob, guard=guard, mounts={"/memories/team": "team:x"}), base_url=APP
    ) as web:
        web.get(f"/?token={guard.token}")
        create(MnemoMemoryToolServer(bob), "/memories/mine.md", "bob's")
        head = owner.head
        # the confirmation is refused with the forget's own words, before a reason is asked for: of the
        # read-only file, and of a folder that holds it beside bob's own (a forget is all or nothing)
        pages = [web.get("/forget?path=/memories/team/t.md"), web.get("/forget?path=/memories/team"),
                 web.get("/forget?path=/memories")]
        rec_id = owner.list_records(scope="team:x")[0].id
        fields = [("csrf", csrf(guard, web)), ("path", "/memories/team/t.md"), ("ids", rec_id)]
        refused = post(web, fields, "not mine")  # the form, made by hand
    for page in pages:
        assert page.status_code == 403
        assert '<p class="error" id="error">bob may not forget in scope team:x</p>' in page.text
        assert 'id="confirm"' not in page.text
    assert refused.status_code == 403  # type: ignore[attr-defined]
    assert "bob may not forget in scope team:x" in refused.text  # type: ignore[attr-defined]
    assert owner.head == head and len(owner.list_records()) == 2
