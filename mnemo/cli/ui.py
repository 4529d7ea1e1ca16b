"""`mnemo ui`: the database in a browser, as an agent (mnemo.ui does the work)."""

from __future__ import annotations

import click

from ..recall.embedding import Embedder
from .errors import EXIT_OK, UsageError
from .options import (
    CONTEXT_SETTINGS,
    agent_option,
    db_option,
    embedder_option,
    lock_timeout_option,
    mount_table,
    open_client,
)
from .output import examples, json_option


@click.command(
    "ui", context_settings=CONTEXT_SETTINGS,
    short_help="see the memories, their versions and the chain in a browser (local web app)",
    epilog=examples(
        "mnemo ui --db memory.mnemo.db --open",
        "mnemo ui --agent claude --mount /memories/team=team:research --port 8770",
        "mnemo ui --host 0.0.0.0   # beyond this machine: says what that exposes",
    ),
)
@db_option
@agent_option
@click.option("--mount", "mounts", metavar="POINT=SCOPE", multiple=True, callback=mount_table,
              help="also show SCOPE at POINT of the tree, such as /memories/team=team:research (repeatable; "
                   "docs/MOUNTS.md)")
@click.option("--host", default="127.0.0.1", show_default=True, metavar="HOST",
              help="the address to listen on; anything but loopback is reachable from other machines")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, metavar="N",
              help="the port (0: a free one, in the address printed)")
@click.option("--open", "open_browser", is_flag=True, help="open the address in a browser")
@embedder_option(help_text="search matches by meaning too, with this embedder: `local` (the `semantic` extra) "
                           "or module:attribute (docs/RECALL.md §6)")
@lock_timeout_option
@json_option
def ui(db: str, agent: str | None, mounts: dict[str, str] | None, host: str, port: int, open_browser: bool,
       embedder: Embedder | None, lock_timeout: float | None, as_json: bool) -> int:
    """Serve a local web app on the database, as AGENT (default: the owner): the /memories tree with
    sizes, versions and last change; each file's content, versions and diffs; other records; search;
    the chain, verify and grants; forget with a confirmation. Prints the address, which carries a token
    (every request without it, or the session cookie it sets, is refused), and runs until Ctrl-C."""
    try:
        from ..ui import serve  # noqa: PLC0415 - needs the optional ui extra, which this reports
    except ImportError as exc:
        raise UsageError(str(exc), "MissingDependency") from None
    with open_client(db, agent, readonly=False, lock_timeout=lock_timeout, embedder=embedder) as client:
        serve(client, host=host, port=port, mounts=mounts, open_browser=open_browser)
    return EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(ui)
