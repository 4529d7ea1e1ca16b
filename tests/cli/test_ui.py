"""`mnemo ui` on the command line: what it prints and refuses, what `--host 0.0.0.0` says, `--open`, and
that the token it prints is never logged."""

from __future__ import annotations

import http.cookiejar
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers.cli import run
from helpers.ui import OWNER, Served

from mnemo import MnemoClient

pytest.importorskip("jinja2")


@pytest.fixture
def db(tmp_path: Path) -> str:
    path = str(tmp_path / "memory.mnemo.db")
    with MnemoClient(path, OWNER) as client:
        client.remember("x")
    return path


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--mount", "team"], "--mount team: expected POINT=SCOPE, such as /memories/team=team:research"),
        (["--agent", ""], "--agent: agent must be a non-empty string, got ''"),
        (["--port", "70000"], "Invalid value for '--port': 70000 is not in the range 0<=x<=65535."),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, db: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "ui", "--db", db, *argv)
    assert (code, out) == (2, "")
    assert message in err


def test_a_missing_database_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "none.mnemo.db"
    code, out, err = run(capsys, "ui", "--db", str(missing))
    assert (code, out, err) == (2, "", f"mnemo: error: cannot open {missing}: No such file or directory\n")
    assert list(tmp_path.iterdir()) == []


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))


def test_it_prints_its_address_on_loopback_and_never_logs_the_token(db: str) -> None:
    served = Served(db)
    try:
        assert served.host == "127.0.0.1"
        assert served.line == f"mnemo ui: {db} as {OWNER} at {served.url}\n"
        assert len(served.token) >= 43
        web = _opener()
        with web.open(served.url) as page:  # the token sets the cookie, the redirect drops the token
            assert page.url == served.base + "/memories" and page.status == 200
        with web.open(served.base + "/search?q=x") as page:
            assert page.status == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(served.base + "/memories")  # no cookie: refused
        assert refused.value.code == 403
        with pytest.raises(urllib.error.HTTPError) as outside:
            web.open(served.origin + "/memories")  # outside the secret prefix: nothing there
        assert (outside.value.code, outside.value.read()) == (404, b"404 Not Found\n")
    finally:
        err = served.stop()
    assert served.token not in err and served.prefix not in err  # the log names neither secret
    assert '"GET /u/.../?token' not in err and '"GET /u/.../ HTTP/1.1" 303' in err
    assert '"GET /u/.../search HTTP/1.1" 200' in err and '"GET /u/.../memories HTTP/1.1" 403' in err
    assert '"GET /memories HTTP/1.1" 404' in err


def test_beyond_loopback_it_says_what_that_exposes(db: str) -> None:
    served = Served(db, "--host", "0.0.0.0")
    try:
        with _opener().open(f"{served.base}/?token={served.token}") as page:
            assert page.status == 200
    finally:
        err = served.stop()
    assert err.startswith(
        f"mnemo ui: warning: listening on 0.0.0.0:{served.port}, beyond this machine: whoever can reach that "
        f"address and holds the token may read every memory {OWNER} may read, see its history, and forget what "
        f"{OWNER} may forget; the token and every page cross the network in plain HTTP (no TLS), readable by "
        "anyone on the way\n"
    )


def test_open_opens_the_address_in_a_browser(db: str, tmp_path: Path) -> None:
    opened = tmp_path / "opened"
    browser = f"{sys.executable} -c \"import sys; open({str(opened)!r}, 'w').write(sys.argv[1])\" %s"
    served = Served(db, "--open", env={**os.environ, "BROWSER": browser})
    try:
        for _ in range(200):
            if opened.exists() and opened.read_text():
                break
            time.sleep(0.05)
        assert opened.read_text() == served.url
    finally:
        served.stop()


def test_open_without_a_browser_says_so_with_the_address(db: str) -> None:
    # no display, no terminal browser, and $BROWSER a command that fails: webbrowser starts nothing
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "TERM")}
    served = Served(db, "--open", env={**env, "BROWSER": "false %s"})
    try:
        with _opener().open(served.url) as page:  # it serves all the same
            assert page.status == 200
    finally:
        err = served.stop()
    assert f"mnemo ui: --open: no browser could be started here: open {served.url} in one\n" in err
