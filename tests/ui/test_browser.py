"""`mnemo ui` in a real browser: the command started as a user starts it, and headless Chromium (Debian's
`chromium`, driven by Playwright, never a browser Playwright downloads) clicking through tree → file →
versions → diff → search → forget → verify, and another server on 127.0.0.1 that the session cookie does
not reach. Each page's screenshot is kept in test-artifacts/ui/ (or
$MNEMO_TEST_ARTIFACTS/ui/). Skipped when /usr/bin/chromium or Playwright is missing, unless
MNEMO_REQUIRE_BROWSER=1 (as .ci/run sets), which makes that a failure."""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from helpers.paths import ROOT
from helpers.ui import IMG, OWNER, SCRIPT, Served, create, edit

from mnemo import MnemoClient
from mnemo.tools.server import MnemoMemoryToolServer

CHROMIUM = Path("/usr/bin/chromium")
REQUIRE = "MNEMO_REQUIRE_BROWSER"


def _missing(why: str) -> None:
    if os.environ.get(REQUIRE) == "1":
        pytest.fail(f"{REQUIRE}=1 and {why}")
    pytest.skip(why)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        _missing(f"the browser tests need Debian's chromium at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("the browser tests need Playwright for Python (the `test` extra)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def artifacts() -> Path:
    base = Path(os.environ.get("MNEMO_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    folder = base / "ui"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    return folder


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Served]]:
    """A database with files and a record, and `mnemo ui` serving it."""
    db = str(tmp_path / "memory.mnemo.db")
    with MnemoClient(db, OWNER) as client:
        tool = MnemoMemoryToolServer(client)
        create(tool, "/memories/people/ana.md", f"Ana likes green tea\nsays {SCRIPT}\n{IMG}\n")
        edit(tool, "/memories/people/ana.md", "green tea", "green tea and Lisbon")
        create(tool, "/memories/trips/lisbon.md", "Lisbon in May\nflights booked")
        client.remember("a fact beside the files", tags=["facts"], metadata={"source": "chat"})
    server = Served(db)
    try:
        yield db, server
    finally:
        server.stop()


def test_a_click_through_every_page(chromium: Any, served: tuple[str, Served], artifacts: Path) -> None:
    db, server = served
    url = server.url
    context = chromium.new_context(viewport={"width": 1200, "height": 800})
    page = context.new_page()
    dialogs: list[str] = []
    errors: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def shot(name: str) -> None:
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)

    # the tree: the token opens the session and leaves the address
    page.goto(url)
    assert page.url == server.base + "/memories"  # under the secret prefix, without the token
    tree = page.locator("#tree-rows")
    assert tree.locator("a", has_text="ana.md").count() == 1
    assert "lisbon.md" in tree.inner_text()
    shot("01-tree")
    # live: a write by another process appears without a reload
    with MnemoClient(db, OWNER) as other:
        create(MnemoMemoryToolServer(other), "/memories/later.md", "written while the page was open")
    page.wait_for_selector("#tree-rows >> text=later.md", timeout=15_000)
    shot("02-tree-refreshed")

    # a file: its lines as text, never markup
    tree.locator("a", has_text="ana.md").click()
    page.wait_for_url(re.compile(r"/file\?path="))
    content = page.locator("#content").inner_text()
    assert SCRIPT in content and IMG in content
    assert page.locator("#content script, #content img").count() == 0
    shot("03-file")

    # its first version
    page.locator("#versions a", has_text="v1").click()
    page.wait_for_url(re.compile(r"version=1"))
    assert "Ana likes green tea" in page.locator("#content").inner_text()
    assert "Lisbon" not in page.locator("#content").inner_text()
    shot("04-version-1")

    # the diff of v1 → v2 (the radios' defaults)
    page.locator("#diff").click()
    page.wait_for_url(re.compile(r"/diff\?"))
    diff = page.locator("#diff").inner_text()
    assert "-Ana likes green tea" in diff and "+Ana likes green tea and Lisbon" in diff
    shot("05-diff")

    # search, with the matching words marked
    page.get_by_role("link", name="Search").click()
    page.fill("input[name=q]", "lisbon")
    page.locator("#search").click()
    page.wait_for_url(re.compile(r"/search\?q=lisbon"))
    marks = page.locator("#results mark").all_inner_texts()
    assert marks and {m.lower() for m in marks} == {"lisbon"}
    shot("06-search")

    # forget a folder: the confirmation lists it, the reason is required
    page.goto(url.split("/?", 1)[0] + "/memories")
    page.locator("#tree-rows tr", has_text="trips/").locator("a.act").click()
    page.wait_for_url(re.compile(r"/forget\?path="))
    assert "/memories/trips/lisbon.md" in page.locator("#targets").inner_text()
    shot("07-forget-confirm")
    page.locator("#confirm").click()  # no reason yet: the browser's own `required` holds the form
    assert "/forget?path=" in page.url
    page.fill("#reason", "trip cancelled")
    page.locator("#confirm").click()
    page.wait_for_selector("#entry")
    entry = page.locator("#entry").inner_text()
    with MnemoClient(db, OWNER, readonly=True) as reader:
        seq, digest = reader.head
        assert reader.log(since=seq)[0].op == "forget"
    assert f"forget entry seq {seq}, hash {digest}" in entry
    shot("08-forgotten")

    # the chain, and verify
    page.get_by_role("link", name="Chain").click()
    page.wait_for_url(re.compile(r"/chain$"))
    assert "forget" in page.locator("#log").inner_text()
    shot("09-chain")
    page.locator("#verify").click()
    page.wait_for_url(re.compile(r"/verify$"))
    assert page.locator("#report").inner_text().startswith("OK:")
    shot("10-verify")

    assert dialogs == []  # no script of a memory ran
    assert errors == []  # nothing the page does is refused by its own Content-Security-Policy
    context.close()
    assert sorted(p.name for p in artifacts.glob("*.png")) == [
        "01-tree.png", "02-tree-refreshed.png", "03-file.png", "04-version-1.png", "05-diff.png", "06-search.png",
        "07-forget-confirm.png", "08-forgotten.png", "09-chain.png", "10-verify.png",
    ]
    err = server.stop()
    assert server.token not in err  # the access log has every request, without its query string
    assert 'mnemo ui: 127.0.0.1:' in err and '"GET /u/.../memories HTTP/1.1" 200' in err
    assert '"GET /u/.../ HTTP/1.1" 303' in err and server.prefix not in err


class _Recorder(BaseHTTPRequestHandler):
    """Another user's server on 127.0.0.1: it answers every GET and keeps the path and Cookie header."""

    seen: list[tuple[str, str | None]]

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        self.seen.append((self.path, self.headers.get("cookie")))
        body = b"another server"
        self.send_response(200)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's own signature
        pass


@pytest.fixture
def other_server() -> Iterator[tuple[str, list[tuple[str, str | None]]]]:
    seen: list[tuple[str, str | None]] = []
    handler = type("Recorder", (_Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def test_the_session_cookie_goes_to_the_secret_prefix_only(
    chromium: Any, served: tuple[str, Served], other_server: tuple[str, list[tuple[str, str | None]]]
) -> None:
    """Browsers keep cookies by host, not port: Chromium sends the UI's cookie to any server on 127.0.0.1
    whose path is under the cookie's Path, and to no other path. Another user's server, not knowing the
    prefix, gets no cookie; the same server asked at the prefix would (which is why the prefix is secret)."""
    _, server = served
    other, seen = other_server
    context = chromium.new_context()
    page = context.new_page()
    page.goto(server.url)
    assert page.url == server.base + "/memories"
    [cookie] = context.cookies()
    assert (cookie["domain"], cookie["path"], cookie["httpOnly"], cookie["sameSite"]) == (
        "127.0.0.1", server.prefix, True, "Strict")
    for path in ("/", "/memories", "/u/", "/u/" + "0" * 32 + "/memories", server.prefix + "x/memories"):
        page.goto(other + path)
        assert page.locator("body").inner_text() == "another server"
    page.goto(other + server.prefix + "/memories")  # only a server that knew the prefix
    asked = [(path, sent) for path, sent in seen if path != "/favicon.ico"]  # what the browser asks on its own
    assert [sent for _, sent in asked] == [None] * 5 + [f"{cookie['name']}={cookie['value']}"], seen
    outside = page.goto(server.origin + "/memories")  # the UI itself answers nothing outside its prefix
    assert outside is not None and (outside.status, outside.text()) == (404, "404 Not Found\n")
    assert "cookie" not in outside.request.all_headers()
    context.close()
