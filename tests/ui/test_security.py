"""Who may use the UI: the secret prefix, the token, the session cookie, the Host, the Origin and the CSRF
token, each refusal shown with the database unchanged; and the headers every response carries."""

from __future__ import annotations

import logging
import re

import pytest
from helpers.ui import APP, ORIGIN, PREFIX, TOKEN, create, csrf
from starlette.testclient import TestClient

from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer
from mnemo.ui import Guard, create_app
from mnemo.ui.security import NOT_FOUND, SECURITY_HEADERS
from mnemo.ui.serve import NoQueryString

FORBIDDEN = "403 Forbidden: open the address `mnemo ui` printed (it carries the token)\n"
PAGES = ["/", "/memories", "/memories/fragment", "/file?path=/memories/a.md", "/records", "/search?q=a", "/chain",
         "/verify", "/forget?path=/memories/a.md", "/static/ui.css", "/static/ui.js", "/nowhere"]


@pytest.fixture
def stranger(owner: MnemoClient, guard: Guard) -> TestClient:
    """A client of the same server without the token: another local user, or a page in the browser. Its
    relative URLs are under the prefix (as if it knew it)."""
    return TestClient(create_app(owner, guard=guard), base_url=APP)


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
    # the token is gone from the address, the prefix stays
    assert first.headers["location"] == PREFIX + "/search?q=tea&path=%2Fmemories"
    cookie = first.headers["set-cookie"]
    name, value = cookie.split(";", 1)[0].split("=", 1)
    assert name == guard.cookie and name.startswith("mnemo_ui_")
    assert guard.csrf_of(value) is not None and TOKEN not in cookie
    # the cookie goes to the prefix alone: Path is exactly it (RFC 6265 §5.1.4: /u/X and /u/X/..., not /u/Xy)
    assert [part.strip() for part in cookie.split(";")[1:]] == ["HttpOnly", f"Path={PREFIX}", "SameSite=strict"]
    assert stranger.get("/memories").status_code == 200  # the cookie alone, from now on


def test_the_redirect_after_the_token_stays_on_this_server(stranger: TestClient) -> None:
    outside = stranger.get(f"{ORIGIN}//evil.example/x?token={TOKEN}", follow_redirects=False)
    assert (outside.status_code, outside.text) == (404, NOT_FOUND)
    first = stranger.get(f"{APP}//evil.example/x?token={TOKEN}", follow_redirects=False)
    assert (first.status_code, first.headers["location"]) == (303, PREFIX + "//evil.example/x")  # a path here


# -- the secret prefix: nothing outside it, and the cookie goes nowhere else -------------------------------

OUTSIDE = ["/", "/memories", "/memories/fragment", "/static/ui.css", "/forget?path=/memories/a.md", "/u", "/u/",
           PREFIX[:-1], PREFIX[:-1] + "/memories", PREFIX + "0/memories", "/u/" + "f" * 32 + "/memories",
           PREFIX.upper() + "/memories", "/x" + PREFIX + "/memories", "/nowhere"]


@pytest.mark.parametrize("path", OUTSIDE)
def test_every_path_outside_the_prefix_is_404_and_says_nothing(
    path: str, stranger: TestClient, browser: TestClient, guard: Guard
) -> None:
    session = browser.cookies[guard.cookie]
    for web in (stranger, browser):
        for method in ("GET", "POST"):
            page = web.request(method, ORIGIN + path, follow_redirects=False, headers={"origin": ORIGIN})
            assert (page.status_code, page.text) == (404, NOT_FOUND), (method, path)
            assert "set-cookie" not in page.headers and "location" not in page.headers
            assert PREFIX[3:] not in str(page.headers)
    # the browser's cookie jar keeps the cookie to its Path: it sent none outside the prefix
    assert "cookie" not in browser.get(ORIGIN + path).request.headers
    # the token does not open a session there, nor a session cookie presented there count
    with_token = stranger.get(ORIGIN + path + ("&" if "?" in path else "?") + f"token={TOKEN}", follow_redirects=False)
    assert (with_token.status_code, with_token.text) == (404, NOT_FOUND) and "set-cookie" not in with_token.headers
    presented = stranger.get(ORIGIN + path, headers={"cookie": f"{guard.cookie}={session}"}, follow_redirects=False)
    assert (presented.status_code, presented.text) == (404, NOT_FOUND)
    assert browser.get("/memories").status_code == 200  # the same session, under the prefix


def test_the_cookie_is_sent_under_the_prefix_only(browser: TestClient, guard: Guard) -> None:
    assert browser.get(ORIGIN + PREFIX + "/memories").request.headers["cookie"].startswith(guard.cookie + "=")
    assert browser.get(ORIGIN + PREFIX, follow_redirects=False).request.headers["cookie"].startswith(guard.cookie)
    assert "cookie" not in browser.get(ORIGIN + PREFIX + "0/memories").request.headers


def test_every_link_of_every_page_stays_under_the_prefix(
    tool: MnemoMemoryToolServer, owner: MnemoClient, guard: Guard, browser: TestClient
) -> None:
    create(tool, "/memories/d/a.md", "one")
    owner.remember("a record", tags=["t"])
    [record] = owner.query(tags=["t"])
    pages = ["/memories", "/memories/fragment", "/file?path=/memories/d/a.md", "/record?id=" + record.id,
             "/diff?path=/memories/d/a.md&a=1&b=1", "/records", "/search?q=one", "/chain", "/verify",
             "/forget?path=/memories/d", "/file?path=/memories/none.md"]
    seen = set()
    for url in pages:
        page = browser.get(url)
        assert page.status_code in (200, 404), url
        links = re.findall(r'(?:href|src|action|data-fragment)="([^"]*)"', page.text)
        assert links, url
        for link in links:
            assert link.startswith(PREFIX + "/"), (url, link)
            seen.add(link.split("?", 1)[0])
    assert {PREFIX + p for p in ("/memories", "/records", "/search", "/chain", "/verify", "/file", "/record",
                                 "/forget", "/static/ui.css", "/static/ui.js", "/memories/fragment")} <= seen
    home = browser.get("/", follow_redirects=False)
    assert (home.status_code, home.headers["location"]) == (303, PREFIX + "/memories")
    forgotten = browser.post("/forget", headers={"origin": ORIGIN}, data={
        "csrf": csrf(guard, browser), "path": "/memories/d", "reason": "done",
        "ids": owner.list_records(tags=["path:/memories/d/a.md"])[0].id})
    assert forgotten.status_code == 200
    assert re.findall(r'href="([^"]*)"', forgotten.text)[-2:] == [PREFIX + "/memories", PREFIX + "/verify"]


def test_a_token_on_a_post_is_refused(stranger: TestClient) -> None:
    page = stranger.post(f"/forget?token={TOKEN}", headers={"origin": ORIGIN}, follow_redirects=False)
    assert (page.status_code, page.text) == (403, FORBIDDEN)


@pytest.mark.parametrize("url", ["/static/%2e%2e/app.py", "/static/..%2fapp.py", "/static/%2e%2e%2f%2e%2e%2fui/app.py",
                                 "/static/..%5capp.py", "/static/%2e%2e/templates/base.html", "/static//etc/passwd",
                                 "/static/%2fetc%2fpasswd"])
def test_the_static_files_are_the_static_folder_alone(url: str, browser: TestClient) -> None:
    page = browser.get(url, follow_redirects=False)
    assert (page.status_code, page.text) == (404, "Not Found")


@pytest.mark.parametrize("url", ["/", "/memories", "/static/ui.css", "/nowhere", ORIGIN + "/memories"])
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
    with TestClient(app, base_url="http://127.0.0.1:8765" + PREFIX) as web:
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
                        headers={"referer": APP + "/forget?path=/memories/a.md"})
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
    with TestClient(create_app(owner, guard=guard), base_url=APP) as other:
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
    assert re.fullmatch(r"/u/[0-9a-f]{32}", guard.prefix) and Guard().prefix != guard.prefix  # 128 bits
    assert guard.csrf_matches(session, 42) is False and guard.csrf_matches("no-such-session", csrf_token) is False
    assert guard.csrf_matches(session, csrf_token) is True


@pytest.mark.parametrize("prefix", ["", "/", "u/x", "/u/x/", "/u//x", "/u/x?y", "/u/x y", "/u/é"])
def test_a_given_prefix_is_plain_segments_without_a_trailing_slash(prefix: str) -> None:
    with pytest.raises(ValueError, match=r"a UI prefix is a path of plain segments without a trailing /, got "):
        Guard(prefix=prefix)


def test_within_is_the_prefix_or_beneath_it() -> None:
    guard = Guard(prefix=PREFIX)
    assert [guard.within(p) for p in (PREFIX, PREFIX + "/", PREFIX + "/static/ui.css")] == [True] * 3
    assert [guard.within(p) for p in ("", "/", PREFIX[:-1], PREFIX + "0", PREFIX + "0/x", "/x" + PREFIX)] == [False] * 6


def test_the_oldest_sessions_are_dropped_past_64() -> None:
    guard = Guard()
    sessions = [guard.open_session() for _ in range(64)]
    assert all(guard.csrf_of(s) is not None for s in sessions)
    newest = guard.open_session()
    assert guard.csrf_of(sessions[0]) is None  # the oldest went
    assert all(guard.csrf_of(s) is not None for s in [*sessions[1:], newest])


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        (f"{PREFIX}/?token={TOKEN}", "/u/.../"),
        (PREFIX, "/u/..."),
        (f"{PREFIX}/file?path=/memories/a.md", "/u/.../file"),
        (f"{PREFIX}0/memories", f"{PREFIX}0/memories"),  # not the prefix: shown as asked, like any 404
        ("/memories?token=x", "/memories"),
    ],
)
def test_the_access_log_shows_neither_the_token_nor_the_prefix(path: str, shown: str) -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5", "GET", path, "1.1", 200), None)
    assert NoQueryString(PREFIX).filter(record) is True
    assert record.getMessage() == f'127.0.0.1:5 - "GET {shown} HTTP/1.1" 200'
