"""The UI's web app: `create_app(client, ...)` gives the Starlette app that serves every page (docs/UI.md).

Each page is read afresh on each load through the memory tool server and the client, as the client's
agent; the templates (jinja2, autoescaped: memory content is always text) are package data beside this
module, and so are the stylesheet and the few lines of script that refresh the tree.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup, escape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import audit
from ..client import MnemoClient
from ..errors import InvalidInput, LockTimeout, MnemoError, NotFound, PermissionDenied, ReadOnly
from ..recall.embedding import MODES
from ..storage.contract import shown_name
from ..storage.gc_pause import gc_paused
from ..tools.server import MnemoMemoryToolServer
from ..tools.text import format_size
from . import views
from .security import CSRF_FIELD, Guard, GuardMiddleware

STATIC = Path(__file__).parent / "static"
REFRESH_SECONDS = 5
"""How often the tree page asks whether the tree changed (a cheap fragment, or 204 when it did not)."""


def _when(value: datetime | int) -> str:
    """A time as the pages show it: UTC to the second (the title of each carries the full RFC 3339)."""
    if isinstance(value, int):
        value = datetime.fromtimestamp(value // 1_000_000_000, timezone.utc)
    return value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _rfc3339(value: datetime | int) -> str:
    if isinstance(value, datetime):
        delta = value - datetime(1970, 1, 1, tzinfo=timezone.utc)
        value = (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000
    return audit.format_ts(value)


def _hex(value: bytes | str) -> str:
    return value.hex() if isinstance(value, bytes) else value


BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""The characters that reorder the text around them (Unicode's bidirectional controls): shown by name,
so that what a page shows is what the memory holds (a memory can make its text read otherwise)."""


def _visible(value: object) -> Markup:
    """`value` as escaped text, each bidirectional control in it shown as a marked `U+XXXX`."""
    text = str(value)
    if BIDI_CONTROLS.search(text) is None:
        return escape(text)
    out: list[Markup] = []
    at = 0
    for found in BIDI_CONTROLS.finditer(text):
        char = found.group()
        out += [escape(text[at : found.start()]),
                Markup('<span class="ctl" title="{}">U+{:04X}</span>').format(unicodedata.name(char, ""), ord(char))]
        at = found.end()
    out.append(escape(text[at:]))
    return Markup("").join(out)


def templates(base: str = "") -> Environment:
    """The pages' templates, autoescaped: every value is text in the page, never markup. `base`: the path
    every link, form and static file of the pages starts with (the guard's prefix)."""
    env = Environment(loader=PackageLoader("mnemo.ui", "templates"), autoescape=select_autoescape(default=True),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(when=_when, rfc3339=_rfc3339, size=format_size, hex=_hex,
                       summary=lambda e: audit.entry_summary(e.op, e.body), visible=_visible)
    env.globals["base"] = base
    return env


class Pages:
    """The routes, over one client and the memory tool server made on it."""

    def __init__(self, client: MnemoClient, server: MnemoMemoryToolServer, guard: Guard, env: Environment) -> None:
        self.client, self.server, self.guard, self.env = client, server, guard, env
        self._forgetting = threading.Lock()  # the forget entry shown is the one this request wrote

    def render(self, request: Request, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        session = request.scope.get("state", {}).get("session")
        page = self.env.get_template(name).render(
            agent=self.client.agent_id, db=shown_name(self.client.path), root=self.server.root,
            csrf=self.guard.csrf_of(session) if session else "", csrf_field=CSRF_FIELD, refresh=REFRESH_SECONDS,
            **values,
        )
        return HTMLResponse(page, status)

    # -- the tree ---------------------------------------------------------------------------------------

    def home(self, request: Request) -> Response:
        return RedirectResponse(self.guard.prefix + "/memories", 303)

    # The tree's page builds a tuple and a few strings per file, and no cycles: the cyclic collector is
    # paused meanwhile, so that it does not rescan them again and again (10,000 files, 10,000 lines).

    def memories(self, request: Request) -> Response:
        with gc_paused():
            return self.render(request, "tree.html", tree=views.tree(self.server))

    def fragment(self, request: Request) -> Response:
        """The tree's rows alone, for the page's refresh; 204 when the tree is still the one of `stamp`."""
        with gc_paused():
            tree = views.tree(self.server)
            if request.query_params.get("stamp") == tree.stamp:
                return Response(status_code=204)
            page = self.env.get_template("tree_rows.html").render(tree=tree)
        return HTMLResponse(page, headers={"x-tree-stamp": tree.stamp})

    # -- a file, a record, their versions ------------------------------------------------------------------

    def file(self, request: Request) -> Response:
        path = _required(request, "path")
        subject = views.file_versions(self.server, path, _int(request, "version"))
        return self.render(request, "versions.html", subject=subject, shown=views.SHOWN_LINES)

    def record(self, request: Request) -> Response:
        subject = views.record_versions(self.client, _required(request, "id"), _int(request, "version"))
        return self.render(request, "versions.html", subject=subject, shown=views.SHOWN_LINES)

    def diff(self, request: Request) -> Response:
        path = request.query_params.get("path")
        if path is not None:
            subject = views.file_versions(self.server, path)
        else:
            subject = views.record_versions(self.client, _required(request, "id"))
        old, new = _int(request, "a"), _int(request, "b")
        if old is None or new is None:
            raise InvalidInput("a diff needs two versions, a and b")
        return self.render(request, "diff.html", diff=views.diff(subject, old, new), align=views.DIFF_ALIGN_LINES,
                           shown=views.SHOWN_LINES)

    def records(self, request: Request) -> Response:
        found = views.records(self.client, request.query_params.get("scope") or None,
                              request.query_params.get("tag") or None)
        return self.render(request, "records.html", found=found)

    # -- search, the chain ------------------------------------------------------------------------------------

    def search(self, request: Request) -> Response:
        query = request.query_params.get("q", "")
        mode = request.query_params.get("mode") or None
        modes = list(MODES) if self.client.embedder is not None else []
        result = None
        if query.strip():
            result = views.search(self.server, query, request.query_params.get("path") or None, mode)
        return self.render(request, "search.html", query=query, result=result, modes=modes, mode=mode,
                           default_mode=self.client.default_mode, path=request.query_params.get("path") or "")

    def chain(self, request: Request) -> Response:
        return self.render(request, "chain.html", chain=views.chain(self.client))

    def verify(self, request: Request) -> Response:
        return self.render(request, "verify.html", report=views.verify(self.client, self.server))

    # -- forget -----------------------------------------------------------------------------------------------

    def forget_form(self, request: Request) -> Response:
        params = request.query_params
        chosen = views.selection(self.server, self.client, params.get("path"), params.get("id"))
        views.may_forget(self.client, chosen)  # a read-only scope: refused here, before a reason is asked for
        return self.render(request, "forget.html", chosen=chosen, error=None, reason="")

    async def forget(self, request: Request) -> Response:
        form = await request.form()
        session = request.scope["state"]["session"]
        if not self.guard.csrf_matches(session, form.get(CSRF_FIELD)):
            return self.render(request, "error.html", 403, title="Forbidden",
                               message="the form's CSRF token is missing or wrong: open the page again")
        fields = {key: value for key, value in form.multi_items() if isinstance(value, str)}
        confirmed = [value for key, value in form.multi_items() if key == "ids" and isinstance(value, str)]
        return await run_in_threadpool(self._forget, request, fields, confirmed)

    def _forget(self, request: Request, fields: dict[str, str], confirmed: list[str]) -> Response:
        path, rec_id = fields.get("path") or None, fields.get("id") or None
        reason = fields.get("reason", "").strip()
        if not reason:
            chosen = views.selection(self.server, self.client, path, rec_id)
            return self.render(request, "forget.html", 400, chosen=chosen, reason="",
                               error="say why: a forget needs a reason, kept in its entry")
        with self._forgetting:
            with self.client.transaction():  # what is forgotten is exactly what the page listed
                chosen = views.selection(self.server, self.client, path, rec_id)
                if chosen.ids != confirmed:
                    return self.render(request, "forget.html", 409, chosen=chosen, reason=reason,
                                       error="what this would forget changed since the page was shown (another "
                                             "writer): nothing forgotten; here is what it forgets now")
                count = self.client.forget(chosen.ids, reason=reason)
            entry = self.client.last_entry
        assert entry is not None
        return self.render(request, "forgotten.html", chosen=chosen, count=count, seq=entry[0], hash=entry[1],
                           reason=reason)


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise InvalidInput(f"the page needs its {name}")
    return value


def _int(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if not (value.isascii() and value.isdigit()) or len(value) > 18:  # not `²`, a digit int() refuses
        raise InvalidInput(f"{name} must be a number, got {value[:40]!r}")
    return int(value)


_STATUS: Sequence[tuple[type[Exception], int, str]] = (
    (NotFound, 404, "Not found"),  # RecordUnavailable too: what the agent cannot read does not exist
    (PermissionDenied, 403, "Not permitted"),
    (InvalidInput, 400, "Cannot do that"),
    (LockTimeout, 503, "Busy"),
    (ReadOnly, 409, "Read-only"),
    (MnemoError, 500, "Error"),
)


def create_app(
    client: MnemoClient,
    *,
    guard: Guard | None = None,
    mounts: Mapping[str, str] | None = None,
    hosts: Sequence[str] | None = None,
) -> Starlette:
    """The UI over `client`, as its agent: the memory tool's tree in the agent's home scope with
    `mounts` (point -> scope, docs/MOUNTS.md), behind `guard` (a new token and prefix if None), every page
    under `guard.prefix`. `hosts`: the Host header values to answer (None: any, for tests)."""
    guard = guard if guard is not None else Guard()
    server = MnemoMemoryToolServer(client, mounts=dict(mounts) if mounts else None)
    env = templates(guard.prefix)
    pages = Pages(client, server, guard, env)

    def failed(request: Request, exc: Exception) -> Response:
        for kind, status, title in _STATUS:
            if isinstance(exc, kind):
                return pages.render(request, "error.html", status, title=title, message=str(exc))
        raise exc

    routes = [
        Route("/", pages.home),
        Route("/memories", pages.memories),
        Route("/memories/fragment", pages.fragment),
        Route("/file", pages.file),
        Route("/record", pages.record),
        Route("/diff", pages.diff),
        Route("/records", pages.records),
        Route("/search", pages.search),
        Route("/chain", pages.chain),
        Route("/verify", pages.verify),
        Route("/forget", pages.forget_form, methods=["GET"]),
        Route("/forget", pages.forget, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    # every page under the guard's secret prefix, the session cookie's Path: the guard answers 404 to
    # anything else before a route is looked at
    return Starlette(
        routes=[Mount(guard.prefix, routes=routes)],
        middleware=[Middleware(GuardMiddleware, guard=guard, hosts=hosts)],
        exception_handlers={MnemoError: failed},
    )
