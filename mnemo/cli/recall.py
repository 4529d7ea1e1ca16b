"""`mnemo recall DB QUERY`: the records whose content best matches a query (MnemoClient.recall), read as
an agent, so every ACL check applies."""

from __future__ import annotations

import sys
from typing import Any

import click

from ..client import MAX_RECALL, reindex
from ..recall.embedding import MODES, Embedder, load_embedder
from ..record import Recalled
from ..storage.contract import shown_name
from ..tools.paths import PATH_TAG_PREFIX
from .errors import EXIT_OK
from .options import (
    CONTEXT_SETTINGS,
    EMBEDDER_HELP,
    agent_option,
    db_argument,
    default_agent,
    embedder_option,
    open_client,
)
from .output import echo, emit_ndjson, examples, json_option
from .records import record_json
from .terminal import inline


def path_of(hit: Recalled) -> str | None:
    """The memory-tool path a record's path tag names, if it has one."""
    return next((t[len(PATH_TAG_PREFIX):] for t in hit.record.tags if t.startswith(PATH_TAG_PREFIX)), None)


def recalled_json(hit: Recalled) -> dict[str, Any]:
    """One result of `--json`: its score, what each ranking gave it (`lexical`: BM25, `semantic`: the
    cosine; null when the mode did not rank by it), its memory-tool path (or null), its matching lines,
    then the record's fields as `mnemo cat --json` gives them (the whole content included)."""
    return {"score": hit.score, "lexical": hit.lexical, "semantic": hit.semantic, "path": path_of(hit),
            "lines": [{"line": n, "text": text} for n, text in hit.lines], **record_json(hit.record)}


def recalled_lines(hit: Recalled) -> list[str]:
    """A result as text: its score, id, scope and path on one line, then its matching lines numbered as
    the memory tool's view numbers them."""
    path = path_of(hit)
    head = f"{hit.score:.3f}  {hit.record.id}  {hit.record.scope}" + (f"  {path}" if path is not None else "")
    return [head, *(f"{n:>6}\t{text}" for n, text in hit.lines)]


@click.command(
    "recall", context_settings=CONTEXT_SETTINGS,
    short_help="the records whose content best matches a query (full-text, ranked)",
    epilog=examples(
        "mnemo recall memory.mnemo.db 'night train*' --agent agent-1",
        "mnemo recall memory.mnemo.db '\"dark mode\" -vim' --scope 'team:*' --limit 5",
        "mnemo recall memory.mnemo.db deploy --tag ops --json   # NDJSON: one result a line",
        "mnemo recall memory.mnemo.db -- '-draft plan*'   # a query that begins with - goes after --",
        "mnemo recall memory.mnemo.db 'air travel preferences' --mode hybrid   # by meaning too",
    ) + "\n\nThe query syntax is docs/RECALL.md's: words (any of them; more, and rarer, matches rank higher), "
    '"a phrase", word* (every word starting with word), -word (leave out records holding it).',
)
@db_argument()
@click.argument("query")
@agent_option
@click.option("--scope", metavar="SCOPE", help="only records in this scope (or `prefix*` pattern)")
@click.option("--tag", "tags", metavar="TAG", multiple=True, help="only records with this tag (repeatable)")
@click.option("--limit", metavar="N", type=click.IntRange(min=1, max=MAX_RECALL), default=10, show_default=True,
              help=f"at most this many results (1 to {MAX_RECALL})")
@click.option("--mode", type=click.Choice(list(MODES)), default="lexical", show_default=True,
              help="lexical: by words (BM25); semantic: by meaning; hybrid: both (docs/RECALL.md §6). The last "
                   "two use the embedder (--embedder)")
@embedder_option(help_text=EMBEDDER_HELP + "; default: local, with --mode semantic or hybrid")
@json_option
def recall(db: str, query: str, agent: str | None, scope: str | None, tags: tuple[str, ...], limit: int,
           mode: str, embedder: Embedder | None, as_json: bool) -> int:
    """The records the agent may read whose content best matches QUERY, best first, ranked by BM25 (or,
    with --mode, by meaning too): each with its score, id, scope, memory-tool path (if it is a file of the
    memory tool) and its matching lines, numbered (a record found by meaning alone: its first lines).
    With --json, one JSON object per result and line (NDJSON): score, lexical, semantic, path, lines,
    and the record's fields as `mnemo cat --json` gives them. When nothing matches, standard error says
    so (exit 0). A query that cannot be read is a usage error (exit 2) saying what is wrong. A database
    whose vectors another embedder made is a usage error pointing to `mnemo reindex`. With --mode semantic
    or hybrid the database is opened for writing, so that the vectors made are kept in its snapshot;
    --embedder names the embedder (`local`, the default, or `module:attribute`)."""
    lexical = mode == "lexical"
    if not lexical and embedder is None:
        embedder = load_embedder("local")
    with open_client(db, agent, readonly=lexical, embedder=None if lexical else embedder) as client:
        hits = client.recall(query, scope=scope, tags=list(tags), limit=limit, mode=mode)
        reader = client.agent_id
    if not hits and not as_json:
        nothing = f"mnemo recall: no record that {reader} may read in {shown_name(db)} matches {query!r}"
        sys.stderr.write(inline(nothing) + "\n")
    for hit in hits:
        if as_json:
            emit_ndjson(recalled_json(hit))
        else:
            for line in recalled_lines(hit):
                echo(line)
    return EXIT_OK


@click.command(
    "reindex", context_settings=CONTEXT_SETTINGS,
    short_help="make the vectors of semantic recall again, with the local model (or --embedder)",
    epilog=examples("mnemo reindex memory.mnemo.db"),
)
@db_argument()
@agent_option
@embedder_option(default="local")
@json_option
def reindex_command(db: str, agent: str | None, embedder: Embedder, as_json: bool) -> int:
    """Make the vector of every live record's text again with the local model (the `semantic` extra; or
    the one --embedder names, `module:attribute`), whatever made the ones DB holds, and keep them: what
    an open with another embedder than the one that made them asks for (docs/RECALL.md §6). A progress
    bar on standard error; then the number made. Needs admin on `*`."""
    name = shown_name(db)
    with click.progressbar(length=0, label=f"embedding {name}", file=sys.stderr) as bar:
        def progress(done: int, total: int) -> None:
            bar.length = total
            bar.update(done - bar.pos)

        made = reindex(db, agent or default_agent(db), embedder, progress)
    if as_json:
        emit_ndjson({"db": name, "vectors": made})
    else:
        by = "the local model" if embedder is load_embedder("local") else f"the embedder {embedder.name!r}"
        echo(f"made {made} vectors of {name} with {by}")
    return EXIT_OK


def register(root: click.Group) -> None:
    root.add_command(recall)
    root.add_command(reindex_command)
