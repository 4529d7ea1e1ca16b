"""The search of the memory tool's files (docs/MEMORY_TOOL.md §11), which the MCP server and the SDK
offer beside the six commands: recall in the scope of each mount the path shows, the rankings merged."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mnemo.client import MAX_RECALL
from mnemo.errors import InvalidInput
from mnemo.recall.embedding import MODES
from mnemo.recall.query import parse as parse_query
from mnemo.tools.files import Files, Refusal
from mnemo.tools.layout import Mount, Tree, tagged_path
from mnemo.tools.paths import MEMORY_TAG, path_tag
from mnemo.tools.text import CommandResult, echo_sent, format_search

if TYPE_CHECKING:
    from mnemo.record import Recalled


class Search(Files):
    """The search of the files under a path, best first."""

    def search(self, query: str, path: str | None, limit: int, mode: str | None = None) -> CommandResult:
        """The files under `path` (default: the root) whose content best matches `query`, at most
        `limit` of them, best first, with their matching lines (docs/MEMORY_TOOL.md §11), matched in
        `mode` (None: the client's default). Checked in the tool's order: the path, the query's syntax,
        the mode, `read` in the scope that serves the path, the path's existence. A file's path searches
        that file alone."""
        sent = self._root if path is None else path
        found, more = self.matches(query, path, limit, mode)
        files = []
        for tree_path, hit in found:
            content = hit.record.content
            lines = content.split("\n") if isinstance(content, str) else []  # recall finds text only
            files.append((tree_path, [(n, text, len(lines[n - 1])) for n, text in hit.lines]))
        settings = self._settings
        return CommandResult(format_search(sent, query, files, more, settings.max_view_chars, settings.echo))

    def matches(
        self, query: str, path: str | None, limit: int, mode: str | None = None
    ) -> tuple[list[tuple[str, Recalled]], bool]:
        """What `search` shows, before it is put into words: the best `limit` files with their tree
        paths and recall's hits, best first, and whether more matched. Checked as `search` is; a refusal
        is `Refusal` with the tool's text."""
        sent = self._root if path is None else path
        canonical = self._canonical(sent)
        try:
            parse_query(query)
        except InvalidInput as exc:
            raise Refusal(f"Error: Invalid query: {exc}") from None
        if mode is not None and mode not in MODES:
            raise Refusal(f"Error: Invalid mode: {echo_sent(mode, self._settings.echo)}; use one of {', '.join(MODES)}")
        if mode not in (None, "lexical") and self._client.embedder is None:
            raise Refusal(f"Error: Invalid mode: {mode} needs an embedder, and this memory has none; "
                          "search with mode lexical (by words)")
        with self._reading():
            tree = self._tree()
            mount = tree.owner(canonical)
            self._permit("read", mount.scope)
            found = self._found(tree, mount, canonical, sent, query, limit + 1, mode)
        return found[:limit], len(found) > limit

    def _found(
        self, tree: Tree, mount: Mount, canonical: str, sent: str, query: str, want: int, mode: str | None = None
    ) -> list[tuple[str, Recalled]]:
        """The files at or beneath `canonical` that best match `query` (at least the best `want` of them,
        when there are so many), with their tree paths, best first (equal scores newest first). Each
        shown mount's files are ranked in its own scope, and the mounts' rankings merged by score."""
        file = self._file(tree, mount, canonical)
        if file is not None:
            tags = (MEMORY_TAG, path_tag(tree.stored(mount, canonical)))
            hits = self._client.recall(query, scope=mount.scope, tags=tags, limit=want, mode=mode)
            return [(canonical, hit) for hit in hits if hit.record.id == file.id]
        if not self._is_dir(tree, mount, canonical):
            raise Refusal(f"The path {sent} does not exist. Please provide a valid path.")
        found = self._recall_in(tree, mount, path_tag(tree.stored(mount, canonical)) + "/", query, want, mode)
        for inner in tree.mounts_beneath(canonical):
            found.extend(self._recall_in(tree, inner, path_tag(self._root) + "/", query, want, mode))
        found.sort(key=lambda item: (-item[1].score, -item[1].record.seq))
        return found

    def _recall_in(
        self, tree: Tree, mount: Mount, prefix: str, query: str, want: int, mode: str | None = None
    ) -> list[tuple[str, Recalled]]:
        """The best files of `mount` whose path tag starts with `prefix` that the tree shows (not
        shadowed by a deeper mount, nor at a fixed directory), with their tree paths: the best `want` of
        them at least, when there are so many. The path filter is the recall's own, so it applies before
        the limit; should shadowed files take places, the recall is asked again for twice as many.
        Precondition: `want <= MAX_RECALL`."""
        ask = want
        while True:
            hits = self._client.recall(query, scope=mount.scope, tags=(MEMORY_TAG,), tag_prefix=prefix, limit=ask,
                                       mode=mode)
            kept = []
            for hit in hits:
                tree_path = tree.listed(mount, tagged_path(hit.record))
                if tree_path not in tree.held and tree.owner(tree_path) == mount:
                    kept.append((tree_path, hit))
            if len(kept) >= want or len(hits) < ask or ask == MAX_RECALL:
                return kept
            ask = min(MAX_RECALL, 2 * ask)
