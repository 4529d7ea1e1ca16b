"""A memory-tool command's transaction and the quotas checked in it (docs/MEMORY_TOOL.md): each scope's
usage is read from the index once and remembered with the log head it holds for, so that the next
command of this server, if nothing was written since, checks its quotas without reading it again."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from mnemo.tools.files import Files, Refusal, Settings
from mnemo.tools.paths import MEMORY_TAG, PATH_TAG_PREFIX
from mnemo.tools.quotas import Usage, refusal

if TYPE_CHECKING:
    from mnemo.client import MnemoClient
    from mnemo.tools.layout import Layout

_Head = tuple[int, str]  # a log head, (seq, hash): what a remembered usage holds for


class Writing(Files):
    """The commands' transactions, with the usage each scope's quotas are checked against."""

    def __init__(self, client: MnemoClient, settings: Settings, layout: Layout) -> None:
        super().__init__(client, settings, layout)
        # Per scope, its usage and the log head it holds for; a write by anyone moves the head.
        self._usage_at: dict[str, tuple[_Head, Usage]] = {}
        self._planned: list[tuple[str, _Head, Usage]] = []

    def _usage(self, scope: str, head: _Head) -> Usage:
        """The scope's usage as of `head`: remembered from this server's last write if nothing was
        written since, else read from the index (one pass over the memory-tool records)."""
        cached = self._usage_at.get(scope)
        if cached is not None and cached[0] == head:
            return cached[1]
        found = self._client.scope_usage(scope, MEMORY_TAG, PATH_TAG_PREFIX + self._root + "/")
        usage = Usage(found.records, found.latest_bytes, found.version_bytes)
        self._usage_at[scope] = (head, usage)
        return usage

    def _check_quotas(
        self,
        scope: str,
        action: str,
        *,
        history_delta: int,  # every write keeps a version: no default, so no caller leaves it out
        new_files: int = 0,
        live_delta: int = 0,
        versioned: Sequence[tuple[str, int]] = (),
    ) -> None:
        """Refuse the write if a quota forbids it; else note its change of usage for `_writing`."""
        head = self._client._chain_head()  # inside the command's transaction: the log as it stands, locked
        quotas = self._settings.quotas
        text = refusal(
            quotas, lambda: self._usage(scope, head), action, new_files, live_delta, history_delta, versioned,
            readable=self._may_read(scope),
        )
        if text is not None:
            raise Refusal(text)
        self._planned.append((scope, head, Usage(new_files, live_delta, history_delta)))

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """A command's transaction. After it commits, the usage remembered for each scope it wrote is
        carried over, with the change the command made, to the head it left (else forgotten)."""
        with self._client.transaction():
            self._planned = []
            yield
            planned, self._planned = self._planned, []
            after = self._client._chain_head() if planned else None  # the head this commit leaves
        for scope, before, change in planned:
            cached = self._usage_at.get(scope)
            if after is None or cached is None or cached[0] != before:
                self._usage_at.pop(scope, None)
                continue
            now = cached[1]
            self._usage_at[scope] = (
                after,
                Usage(now.files + change.files, now.live_bytes + change.live_bytes,
                      now.history_bytes + change.history_bytes),
            )
