"""A child process that compacts a Mnemo db and dies by SIGKILL part-way through.

Modes:
  count DB AGENT          compact once and print `CALLS n`: how many file operations compaction made
  kill DB AGENT --at N    SIGKILL itself just before the N-th file operation of a compaction
                          (N = n + 1: right after compact() returned, before the client is closed)
  loop DB AGENT           print READY, then compact again and again until the test kills it
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import mnemo.storage.file.atomic as atomic
import mnemo.storage.file.compaction as engine
import mnemo.storage.file.snapshot as snap
from mnemo import MnemoClient


class Tripwire:
    """Counts the file operations it wraps once armed; kills the process before operation `kill_at`."""

    def __init__(self, kill_at: int | None) -> None:
        self.kill_at = kill_at
        self.calls = 0
        self.armed = False

    def hit(self) -> None:
        if not self.armed:
            return
        self.calls += 1
        if self.calls == self.kill_at:
            die()

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.hit()
            return fn(*args, **kwargs)

        return wrapped

    def install(self) -> None:
        """Every way compaction (and the snapshot written after it) touches a file."""
        targets: list[tuple[Any, str]] = [
            (engine, "write_all"), (engine, "sync"), (engine, "fsync_dir"), (atomic, "fsync_dir"), (snap, "remove"),
            (os, "replace"), (os, "write"), (os, "fsync"),
        ]
        for module, name in targets:
            setattr(module, name, self.wrap(getattr(module, name)))


def die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["count", "kill", "loop"])
    p.add_argument("db")
    p.add_argument("agent")
    p.add_argument("--at", type=int, default=None)
    a = p.parse_args()
    wire = Tripwire(a.at if a.mode == "kill" else None)
    wire.install()
    client = MnemoClient(a.db, a.agent, durability="fsync", lock_timeout=30.0)
    wire.armed = True
    if a.mode == "count":
        client.compact()
        print("CALLS", wire.calls, flush=True)
        wire.armed = False
        client.close()
    elif a.mode == "kill":
        client.compact()
        die()
    else:
        print("READY", flush=True)
        while True:
            client.compact()


if __name__ == "__main__":
    main()
