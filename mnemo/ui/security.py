"""Who may use the UI, and what a page may do: the guard in front of every route (docs/UI.md, security).

- The whole UI lives under a secret path of its own per server (`/u/` and 128 random bits, in the URL
  `mnemo ui` prints): every request outside it is 404, with nothing said of it. The session cookie's
  Path is that prefix, so a browser sends the cookie nowhere else, not to another server on 127.0.0.1
  (browsers keep cookies by host, not port), which cannot know the prefix.
- The server's token (`secrets.token_urlsafe`, in the URL `mnemo ui` prints) opens a session: the first
  visit with `?token=...` gets a session cookie (HttpOnly, SameSite=Strict, Path=the prefix, named for
  this server) and is sent on to the same page without the token, so that it stays in no address bar,
  history or Referer. Every request under the prefix without a session (or with a wrong token) is 403,
  static files included.
- With the Host header checked against the addresses the server listens on, a DNS-rebinding page
  cannot talk to it under another name.
- A request that changes anything is a POST whose Origin (else Referer) is the server's own origin and
  whose form carries the session's CSRF token (compared with hmac.compare_digest); anything but GET,
  HEAD and POST is 405.
- Every response carries a Content-Security-Policy of `'self'` only (no inline script or style, no
  frames), X-Content-Type-Options, X-Frame-Options DENY, Referrer-Policy same-origin and no-store.
"""

from __future__ import annotations

import hmac
import re
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable
from urllib.parse import urlencode

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

TOKEN_PARAM = "token"
CSRF_FIELD = "csrf"
MAX_SESSIONS = 64  # the oldest session is dropped past this many

SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
        "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    # same-origin, not no-referrer: with no-referrer a browser sends `Origin: null` on a form's POST,
    # which the Origin check must refuse. Pages never carry the token in their URL, so a Referer sent to
    # this origin holds none; other origins get none at all.
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
    "cache-control": "no-store",
}

FORBIDDEN = "403 Forbidden: open the address `mnemo ui` printed (it carries the token)\n"
NOT_FOUND = "404 Not Found\n"
PREFIX = re.compile(r"(/[A-Za-z0-9_-]+)+")


class Guard:
    """The server's token, the secret path its pages live under, and its sessions, each with its own
    CSRF token."""

    def __init__(self, token: str | None = None, prefix: str | None = None) -> None:
        self.token = token if token is not None else secrets.token_urlsafe(32)
        # `/u/` and 32 hex digits: the path every page, link and the cookie live under; given, it must be
        # a path of plain segments with no trailing slash (the cookie's Path and the routes' mount)
        self.prefix = prefix if prefix is not None else "/u/" + secrets.token_hex(16)
        if not PREFIX.fullmatch(self.prefix):
            raise ValueError(f"a UI prefix is a path of plain segments without a trailing /, got {self.prefix!r}")
        self.cookie = "mnemo_ui_" + secrets.token_hex(4)  # two servers on one host keep their own cookie
        self._sessions: OrderedDict[str, str] = OrderedDict()  # session id -> CSRF token
        self._lock = threading.Lock()

    def within(self, path: str) -> bool:
        """Whether `path` is the prefix or beneath it (`/u/X/...`, not `/u/Xy`); compared in constant time,
        so that the time of a 404 says nothing of how much of the prefix a guess got right."""
        head, rest = path[: len(self.prefix)], path[len(self.prefix) :]
        return hmac.compare_digest(head.encode("utf-8"), self.prefix.encode("utf-8")) and rest[:1] in ("", "/")

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8"), self.token.encode("utf-8"))

    def open_session(self) -> str:
        session = secrets.token_urlsafe(32)
        with self._lock:
            self._sessions[session] = secrets.token_urlsafe(32)
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        return session

    def csrf_of(self, session: str) -> str | None:
        with self._lock:
            return self._sessions.get(session)

    def session_of(self, request: Request) -> str | None:
        session = request.cookies.get(self.cookie)
        if session is None or self.csrf_of(session) is None:
            return None
        return session

    def csrf_matches(self, session: str, given: object) -> bool:
        expected = self.csrf_of(session)
        if expected is None or not isinstance(given, str):
            return False
        return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def same_origin(request: Request) -> bool:
    """Whether a state-changing request comes from a page of this server: its Origin header, else its
    Referer, names the server's own origin. Neither: refused."""
    origin = request.headers.get("origin")
    expected = own_origin(request)
    if origin is not None:
        return hmac.compare_digest(origin.encode("utf-8"), expected.encode("utf-8"))
    referer = request.headers.get("referer")
    return referer is not None and (referer == expected or referer.startswith(expected + "/"))


class GuardMiddleware:
    """Every request passes here first: host, token or session, method and origin; every response leaves
    with the security headers."""

    def __init__(self, app: ASGIApp, guard: Guard, hosts: Iterable[str] | None = None) -> None:
        self.app = app
        self.guard = guard
        self.hosts = None if hosts is None else frozenset(hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        response = self._refusal(scope)
        if response is not None:
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> Response | None:
        """The response that ends this request here, or None to let it through (with its session)."""
        request = Request(scope)
        if self.hosts is not None and request.headers.get("host") not in self.hosts:
            return PlainTextResponse("403 Forbidden: not a name this server answers to\n", 403)
        if not self.guard.within(scope["path"]):
            return PlainTextResponse(NOT_FOUND, 404)  # a session cookie, if one came, is not looked at
        token = request.query_params.get(TOKEN_PARAM)
        if token is not None:
            if not self.guard.token_matches(token) or request.method not in ("GET", "HEAD"):
                return PlainTextResponse(FORBIDDEN, 403)
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != TOKEN_PARAM]
            # the same page: under the prefix, so never `//host`, which a browser reads as another site
            response = RedirectResponse(request.url.path + ("?" + urlencode(rest) if rest else ""), 303)
            response.set_cookie(self.guard.cookie, self.guard.open_session(), path=self.guard.prefix,
                                httponly=True, samesite="strict")
            return response
        session = self.guard.session_of(request)
        if session is None:
            return PlainTextResponse(FORBIDDEN, 403)
        if request.method not in ("GET", "HEAD", "POST"):
            return PlainTextResponse("405 Method Not Allowed\n", 405)
        if request.method == "POST" and not same_origin(request):
            return PlainTextResponse("403 Forbidden: a change must come from a page of this server (Origin)\n", 403)
        scope.setdefault("state", {})["session"] = session
        return None
