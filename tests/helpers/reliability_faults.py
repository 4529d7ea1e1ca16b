"""Fault injection at the system-call boundary the storage layer writes through.

`Injector` replaces `os.pwrite`, `os.write`, `os.fsync`, `os.ftruncate`, `os.replace`, `os.unlink` and
the log's `mnemo.storage.file.logfile._sync` (fdatasync) with wrappers. Calls on files outside `root` pass
through untouched. Calls inside `root` are counted as numbered events; a `Fault` acts on one of them:
it can stop the process with SIGKILL (before the call, after it, or in the middle of a write, leaving a
prefix on disk), cut the power (the same, after putting back every byte written or truncated since that
file's last fsync, as if the page cache were lost), or fail it with EIO (again optionally after writing
a prefix). `short` makes every write inside `root` write only part of what it was given, as a kernel may.

The power cut models data only: renames and unlinks are not undone, nor are writes to a file under a
name it no longer has.
"""

from __future__ import annotations

import errno
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import mnemo.storage.file.logfile as logfile

WRITE_KINDS = frozenset({"pwrite", "write"})
SYNC_KINDS = frozenset({"fdatasync", "fsync"})
ALL_KINDS = frozenset(WRITE_KINDS | SYNC_KINDS | {"ftruncate", "replace", "unlink"})


@dataclass
class Fault:
    """Act on the `at`-th event (1-based) whose kind is in `kinds`.

    action: "kill" (SIGKILL this process), "power" (undo unsynced writes, then SIGKILL) or "eio" (the
            call raises OSError(EIO)).
    when:   "before" the call, "after" it completed, or "torn": a write puts `torn` (a fraction) of its
            bytes on disk first; for a call that is not a write, "torn" acts as "before".
    repeat: keep failing every later matching event too (a device that stays broken).
    zeros_only: count only writes of nothing but zero bytes (the overwrites of an erasure).
    """

    at: int
    action: str = "kill"
    when: str = "before"
    torn: float = 0.5
    kinds: frozenset[str] = ALL_KINDS
    repeat: bool = False
    zeros_only: bool = False


@dataclass
class Event:
    kind: str
    path: str
    size: int
    zeros: bool = False  # a write of nothing but zero bytes (an erasure)


@dataclass
class Injector:
    root: str
    fault: Fault | None = None
    short: int | None = None  # at most this many bytes per write call inside root
    short_kinds: frozenset[str] = WRITE_KINDS  # which writes are cut short
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    events: list[Event] = field(default_factory=list)
    fired: int = 0  # how many times the fault acted
    matched: int = 0  # events counted toward fault.at
    _saved: dict[str, Any] = field(default_factory=dict)
    # for a power cut: per path, the bytes each unsynced write or truncate replaced, and the size at the
    # last fsync
    _undo: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    _synced_size: dict[str, int] = field(default_factory=dict)

    # -- installing --------------------------------------------------------------------------------------
    def install(self) -> Injector:
        self.root = os.path.realpath(self.root)
        self._saved = {
            "pwrite": os.pwrite, "write": os.write, "fsync": os.fsync, "ftruncate": os.ftruncate,
            "replace": os.replace, "unlink": os.unlink, "_sync": logfile._sync,
        }  # fmt: skip
        os.pwrite = self._pwrite
        os.write = self._write
        os.fsync = self._fsync  # type: ignore[assignment]
        os.ftruncate = self._ftruncate
        os.replace = self._replace
        os.unlink = self._unlink
        logfile._sync = self._fdatasync
        return self

    def uninstall(self) -> None:
        if not self._saved:
            return
        s = self._saved
        os.pwrite, os.write, os.fsync, os.ftruncate = s["pwrite"], s["write"], s["fsync"], s["ftruncate"]
        os.replace, os.unlink = s["replace"], s["unlink"]
        logfile._sync = s["_sync"]
        self._saved = {}

    def __enter__(self) -> Injector:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.uninstall()

    # -- bookkeeping -------------------------------------------------------------------------------------
    def _inside(self, path: str) -> bool:
        return path == self.root or path.startswith(self.root + os.sep)

    def _fd_path(self, fd: int) -> str:
        try:
            return str(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            return ""

    def _path(self, p: Any) -> str:
        try:
            return str(os.path.realpath(os.fspath(p)))
        except (TypeError, ValueError):
            return ""

    def _decide(self, kind: str, path: str, size: int, zeros: bool = False) -> Fault | None:
        """Record an event inside root; return the fault if it acts on this one."""
        self.events.append(Event(kind, path, size, zeros))
        f = self.fault
        if f is None or kind not in f.kinds or (f.zeros_only and not zeros):
            return None
        self.matched += 1
        if self.matched == f.at or (f.repeat and self.matched > f.at):
            self.fired += 1
            return f
        return None

    @staticmethod
    def _die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # the signal is delivered before this returns

    def _remember_old(self, path: str, offset: int, length: int) -> None:
        """Keep what [offset, offset+length) of `path` holds now, for a power cut to put back."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return
        try:
            self._synced_size.setdefault(path, os.fstat(fd).st_size)
            self._undo.setdefault(path, []).append((offset, os.pread(fd, length, offset)))
        finally:
            os.close(fd)

    def _synced(self, path: str) -> None:
        if not self._inside(path):
            return
        self._undo.pop(path, None)
        try:
            self._synced_size[path] = os.stat(path).st_size
        except OSError:
            self._synced_size.pop(path, None)

    def _power_cut(self) -> None:
        """Put back what every unsynced write and truncate replaced, newest first."""
        for path, undo in self._undo.items():
            try:
                fd = os.open(path, os.O_WRONLY)
            except OSError:
                continue  # renamed or removed since
            try:
                for offset, old in reversed(undo):
                    if old:
                        self._saved["pwrite"](fd, old, offset)
                self._saved["ftruncate"](fd, self._synced_size[path])
            finally:
                os.close(fd)

    @staticmethod
    def _eio(kind: str) -> OSError:
        return OSError(errno.EIO, f"Input/output error (injected into {kind})")

    def _act_before(self, f: Fault, kind: str) -> None:
        if f.when == "after":
            return
        self._act_after(f, kind)

    def _act_after(self, f: Fault, kind: str) -> None:
        if f.action == "power":
            self._power_cut()
        if f.action in ("kill", "power"):
            self._die()
        raise self._eio(kind)

    # -- wrappers ----------------------------------------------------------------------------------------
    def _do_write(
        self, kind: str, fd: int, data: Any, call: Callable[[memoryview], int]
    ) -> int:
        view = memoryview(data).cast("B")
        path = self._fd_path(fd)
        if not self._inside(path):
            return call(view)
        f = self._decide(kind, path, len(view), len(view) > 0 and not any(view))
        if f is not None and f.when == "torn":
            k = min(len(view) - 1, int(len(view) * f.torn)) if len(view) else 0
            written = 0
            while written < k:
                written += call(view[written:k])
            self._act_after(f, kind)
        if f is not None:
            self._act_before(f, kind)
        if self.short is not None and kind in self.short_kinds and len(view) > 1:
            view = view[: self.rng.randint(1, min(self.short, len(view)))]
        try:
            n = call(view)
        finally:
            if f is not None:
                self._act_after(f, kind)  # a call that fails on its own still ends "after" it
        return n

    def _pwrite(self, fd: int, data: Any, offset: int) -> int:
        orig = self._saved["pwrite"]
        state = {"offset": offset}
        path = self._fd_path(fd)
        if self._inside(path):
            self._remember_old(path, offset, len(memoryview(data).cast("B")))

        def call(view: memoryview) -> int:
            n: int = orig(fd, view, state["offset"])
            state["offset"] += n  # a torn write is written in pieces: keep their positions
            return n

        return self._do_write("pwrite", fd, data, call)

    def _write(self, fd: int, data: Any) -> int:
        orig = self._saved["write"]
        path = self._fd_path(fd)
        if self._inside(path):
            self._remember_old(path, os.lseek(fd, 0, os.SEEK_CUR), len(memoryview(data).cast("B")))
        return self._do_write("write", fd, data, lambda view: int(orig(fd, view)))

    def _simple(self, kind: str, path: str, call: Callable[[], Any]) -> Any:
        if not self._inside(path):
            return call()
        f = self._decide(kind, path, 0)
        if f is not None:
            self._act_before(f, kind)
        try:
            result = call()
        finally:
            # "after" even when the call fails on its own (an unlink of a file already gone, which the
            # store ignores): else the fault would be spent without acting, and the run go on unfaulted.
            if f is not None:
                self._act_after(f, kind)
        return result

    def _fsync(self, fd: int) -> None:
        path = self._fd_path(fd)
        self._simple("fsync", path, lambda: self._saved["fsync"](fd))
        self._synced(path)

    def _fdatasync(self, fd: int) -> None:
        path = self._fd_path(fd)
        self._simple("fdatasync", path, lambda: self._saved["_sync"](fd))
        self._synced(path)

    def _ftruncate(self, fd: int, length: int) -> None:
        path = self._fd_path(fd)
        if self._inside(path):
            size = os.fstat(fd).st_size
            if length < size:
                self._remember_old(path, length, size - length)
        self._simple("ftruncate", path, lambda: self._saved["ftruncate"](fd, length))

    def _replace(self, src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        self._simple("replace", self._path(dst), lambda: self._saved["replace"](src, dst, *args, **kwargs))

    def _unlink(self, path: Any, *args: Any, **kwargs: Any) -> None:
        self._simple("unlink", self._path(path), lambda: self._saved["unlink"](path, *args, **kwargs))


def parse_fault(spec: str) -> Fault:
    """`at:action:when[:torn[:kinds]]`, e.g. `17:kill:torn:0.3` or `4:eio:before:0:fdatasync,fsync`."""
    parts = spec.split(":")
    fault = Fault(at=int(parts[0]), action=parts[1], when=parts[2])
    if len(parts) > 3 and parts[3]:
        fault.torn = float(parts[3])
    if len(parts) > 4 and parts[4]:
        fault.kinds = frozenset(parts[4].split(","))
    return fault


def format_fault(fault: Fault) -> str:
    return f"{fault.at}:{fault.action}:{fault.when}:{fault.torn}:{','.join(sorted(fault.kinds))}"
