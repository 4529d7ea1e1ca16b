"""`mnemo demo` and `mnemo chat`: the memory tool, end to end (mnemo.demo does the work).

Neither takes --json: the demo's output is a transcript for people (its machine-readable trail is
`mnemo audit export` of a database), and chat is a conversation on the terminal."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TextIO, cast

import click

from .errors import EXIT_OK, Failure
from .options import CONTEXT_SETTINGS
from .output import examples, output


def _demo_module() -> ModuleType:
    try:
        return importlib.import_module("mnemo.demo")
    except ModuleNotFoundError as exc:
        if exc.name != "mnemo.demo":
            raise
        raise Failure("the demo is not part of this installation") from None


@click.command(
    "demo", context_settings=CONTEXT_SETTINGS,
    short_help="a scripted, offline memory-tool conversation on a fresh local db",
    epilog=examples("mnemo demo", "mnemo demo --dir mnemo-demo   # keeps mnemo-demo/demo.mnemo.db",
                    "mnemo demo | less"),
)
@click.option("--dir", "db_dir", metavar="DIR",
              help="keep the database in DIR (created if missing; it must not hold a demo already), "
                   "rather than in a temporary folder removed at the end")
def demo(db_dir: str | None) -> int:
    """Play a scripted memory-tool conversation (no network, no API key) on a fresh database, and print
    the transcript, the chain check, an excerpt of the audit export, the chain catching a byte an
    attacker changed on a copy, and the commands to look at what it stored. The text is wrapped to the
    terminal's width. No --json: the output is a transcript for people."""
    result = _demo_module().run_demo(cast(TextIO, output()), db_dir=db_dir)
    return result if isinstance(result, int) else EXIT_OK


@click.command(
    "chat", context_settings=CONTEXT_SETTINGS,
    short_help="a real conversation with Claude through the memory tool (needs ANTHROPIC_API_KEY)",
    epilog=examples("ANTHROPIC_API_KEY=... mnemo chat", "MNEMO_CHAT_DB=notes.mnemo.db mnemo chat"),
)
def chat() -> int:
    """Hold a real conversation with Claude through the Anthropic SDK's tool runner, its memory in a local
    Mnemo database. Needs ANTHROPIC_API_KEY; MNEMO_CHAT_DB and MNEMO_CHAT_MODEL choose the database and
    the model. No --json: it is a conversation on the terminal."""
    result = _demo_module().run_chat()
    return result if isinstance(result, int) else EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(demo)
    root.add_command(chat)
