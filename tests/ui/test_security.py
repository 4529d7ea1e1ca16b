"""Who may use the UI: the token, the session cookie, the Host, the Origin and the CSRF token, each
refusal shown with the database unchanged; and the headers every response carries."""

from __future__ import annotations

import re

import pytest
from helpers.ui import ORIGIN, TOKEN, create, csrf
from starlette.testclient import TestClient

from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer
from mnemo.ui import Guard, create_app
from mnemo.ui.security import SECURITY_HEADERS

FORBIDDEN = "403 Forbidden: open the address `mnemo ui` printed (it carries the token)\n"
PAGES = ["/", "/memories", "/memories/fragment", "/file?path=/memories/a.md", "/records", "/search?q=a", "/chain",
         "/verify", "/forget?path=/memories/a.md", "/static/ui.css", "/static/ui.js", "/nowhere"]


@pytest.fixture
def stranger(owner: MnemoClient, guard: Guard) -> TestClient:
    """A client of the same server without the token: another local user, or a page in the browser."""
    return TestClient(create_app(owner, guard=guard), base_url=ORIGIN)


@pytest.mark.parametrize("url", PAGES)
def test_every_request_without_the_token_or_its_cookie_is_403(url: str, stranger: TestClient, guard: Guard) -> None:
    page = stranger.get(url, follow_redirects=False)
    assert (page.status_code, page.text) == (403, FORBIDDEN)
    wrong = stranger.get(url + ("&" if "?" in url else "?") + "token=" + TOKEN[:-1] + "x", follow_redirects=False)
    assert (wrong.status_code, wrong.text) == (403, FORBIDDEN)
    assert "set-cookie" not in wrong.headers
    stranger.cookies.set(guard.cookie, "a-guessed-session")
    forged = stranger.get(url, follow_redirects=False)
    assert (forged.status_code, forged.text) == (403, FORBIDDEN)


def test_the_token_opens_a_session_and_leaves_the_address(stranger: TestClient, guard: Guard) -> None:
    first = stranger.get(f"/search?q=tea&token={TOKEN}&path=/memories", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "/search?q=tea&path=%2Fmemories"  # the token is gone from the address
    cookie = first.headers["set-cookie"]
    name, value = cookie.split(";", 1)[0].split("=", 1)
    assert name == guard.cookie and name.startswith("mnemo_ui_")
    assert guard.csrf_of(value) is not None and TOKEN not in cookie
    assert sorted(part.strip().lower() for part in cookie.split(";")[1:]) == ["httponly", "path=/", "samesite=strict"]
    assert stranger.get("/memories").status_code == 200  # the cookie alone, from now on


def test_the_redirect_after_the_token_stays_on_this_server(stranger: TestClient) -> None:
    first = stranger.get(f"{ORIGIN}//evil.example/x?token={TOKEN}", follow_redirects=False)
    assert (first.status_code, first.headers["location"]) == (303, "/evil.example/x")


def test_a_token_on_a_post_is_refused(stranger: TestClient) -> None:
    page = stranger.post(f"/forget?token={TOKEN}", headers={"origin": ORIGIN}, follow_redirects=False)
    assert (page.status_code, page.text) == (403, FORBIDDEN)


@pytest.mark.parametrize("url", ["/", "/memories", "/static/ui.css", "/nowhere"])
def test_every_response_carries_the_security_headers(url: str, stranger: TestClient, browser: TestClient) -> None:
    for response in (stranger.get(url), browser.get(url, follow_redirects=False)):
        for name, value in SECURITY_HEADERS.items():
            assert response.headers[name] == value, (url, name)
    csp = SECURITY_HEADERS["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp


def test_another_host_name_is_refused(owner: MnemoClient, guard: Guard) -> None:
    """DNS rebinding: a page of evil.example whose name now points at 127.0.0.1 reaches the server with
    its own Host; the server answers only to the names it listens on."""
    app = create_app(owner, guard=guard, hosts=["127.0.0.1:8765", "localhost:8765"])
    with TestClient(app, base_url="http://127.0.0.1:8765") as web:
        assert web.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        assert web.get("/memories").status_code == 200
        evil = web.get("/memories", headers={"host": "evil.example:8765"})
    assert (evil.status_code, evil.text) == (403, "403 Forbidden: not a name this server answers to\n")


def test_other_methods_are_405(browser: TestClient) -> None:
    for method in ("PUT", "DELETE", "PATCH"):
        page = browser.request(method, "/forget", headers={"origin": ORIGIN})
        assert (page.status_code, page.text) == (405, "405 Method Not Allowed\n")


# -- a forget must come from a page of this server, with the session's CSRF token --------------------------


def _form(guard: Guard, web: TestClient, **changes: str | None) -> dict[str, str]:
    form = {"csrf": csrf(guard, web), "path": "/memories/a.md", "reason": "asked", "ids": ""}
    form.update({k: v for k, v in changes.items() if v is not None})
    return {k: v for k, v in form.items() if k not in {k for k, v in changes.items() if v is None}}


ORIGIN_REFUSED = "403 Forbidden: a change must come from a page of this server (Origin)\n"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"referer": "http://evil.example/x"},
        {"referer": ORIGIN + ".evil.example/"},
    ],
)
def test_a_post_from_another_origin_is_refused_and_nothing_is_forgotten(
    headers: dict[str, str], tool: MnemoMemoryToolServer, owner: MnemoClient, guard: Guard,
    browser: TestClient,
) -> None:
    create(tool, "/memories/a.md", "keep me")
    [info] = owner.list_records()
    head = owner.head
    page = browser.post("/forget", data=_form(guard, browser, ids=info.id), headers=headers)
    assert (page.status_code, page.text) == (403, ORIGIN_REFUSED)
    assert owner.head == head and owner.get(info.id).content == "keep me"


def test_a_referer_of_this_server_stands_for_a_missing_origin(
    tool: MnemoMemoryToolServer, owner: MnemoClient, guard: Guard, browser: TestClient
) -> None:
    create(tool, "/memories/a.md", "bye")
    [info] = owner.list_records()
    page = browser.post("/forget", data=_form(guard, browser, ids=info.id),
                        headers={"referer": ORIGIN + "/forget?path=/memories/a.md"})
    assert page.status_code == 200
    assert owner.list_records() == []


@pytest.mark.parametrize("token", [None, "", "wrong", "x" * 43])
def test_a_post_without_the_sessions_csrf_token_is_refused_and_nothing_is_forgotten(
    token: str | None, tool: MnemoMemoryToolServer, owner: MnemoClient, guard: Guard, browser: TestClient
) -> None:
    create(tool, "/memories/a.md", "keep me")
    [info] = owner.list_records()
    head = owner.head
    page = browser.post("/forget", data=_form(guard, browser, ids=info.id, csrf=token), headers={"origin": ORIGIN})
    assert page.status_code == 403
    assert "the form&#39;s CSRF token is missing or wrong: open the page again" in page.text
    assert owner.head == head and owner.get(info.id).content == "keep me"


def test_one_sessions_csrf_token_does_not_serve_another(
    tool: MnemoMemoryToolServer, owner: MnemoClient, guard: Guard, browser: TestClient
) -> None:
    create(tool, "/memories/a.md", "keep me")
    [info] = owner.list_records()
    with TestClient(create_app(owner, guard=guard), base_url=ORIGIN) as other:
        other.get(f"/?token={TOKEN}")
        theirs = csrf(guard, other)
    assert theirs != csrf(guard, browser)
    page = browser.post("/forget", data=_form(guard, browser, ids=info.id, csrf=theirs), headers={"origin": ORIGIN})
    assert page.status_code == 403
    assert owner.get(info.id).content == "keep me"


def test_tokens_are_256_bits_and_the_cookie_is_named_for_its_server() -> None:
    guard = Guard()
    session = guard.open_session()
    csrf_token = guard.csrf_of(session)
    # token_urlsafe(32): 32 random bytes, 43 characters of base64url
    assert [len(t) for t in (guard.token, session, csrf_token or "")] == [43, 43, 43]
    assert len({guard.token, session, csrf_token}) == 3
    assert re.fullmatch(r"mnemo_ui_[0-9a-f]{8}", guard.cookie) and Guard().cookie != guard.cookie
    assert guard.csrf_matches(session, 42) is False and guard.csrf_matches("no-such-session", csrf_token) is False
    assert guard.csrf_matches(session, csrf_token) is True


def test_the_oldest_sessions_are_dropped_past_64() -> None:
    guard = Guard()
    sessions = [guard.open_session() for _ in range(64)]
    assert all(guard.csrf_of(s) is not None for s in sessions)
    newest = guard.open_session()
    assert guard.csrf_of(sessions[0]) is None  # the oldest went
    assert all(guard.csrf_of(s) is not None for s in [*sessions[1:], newest])
