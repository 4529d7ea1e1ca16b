"""The descriptors a store reads its log through: the current log's, and those of logs a compaction
replaced, each closed as soon as the last read through it ends (and the writer lock taken through it,
if any, is let go of)."""

from __future__ import annotations

import contextlib
import os
import stat
import threading
import time

from ...errors import ErasureIncomplete, MnemoError


class LogHandle:
    """One open descriptor of a log file, shared by a store's threads. A compaction replaces the log
    with a new file: the old handle is then retired, and closed as soon as no thread is reading
    through it, so that a process never keeps an unlinked copy of the log (holding payloads that are
    forgotten later) beyond the reads in flight. A thread waiting for (or holding) the writer lock
    through a handle holds it as a read does (opening.Opening._lock): closed under it, the descriptor
    would fail the wait, or its number, reused, name another file."""

    __slots__ = ("fd", "users", "retired")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.retired = False


class LogHandles:
    """A store's log handles: `current`, which reads and the writer lock take (acquire) and give back
    (release), and the retired ones that they still hold."""

    def __init__(self) -> None:
        self.current = LogHandle(-1)
        self.retired: list[LogHandle] = []  # replaced logs still being read through (see LogHandle)
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)

    def retire(self, handle: LogHandle) -> None:
        """Stop using a replaced log's descriptor: closed now if no thread reads through it, else by the
        last reader (see release)."""
        with self.lock:
            handle.retired = True
            if handle.users:
                self.retired.append(handle)
                return
        close_handle(handle)

    def acquire(self) -> LogHandle:
        with self.lock:
            handle = self.current
            handle.users += 1
            return handle

    def hold(self, handle: LogHandle) -> LogHandle:
        """Hold `handle` as acquire holds the current one (a compaction, for the new log it locked before
        that log becomes the current one); release lets go of it."""
        with self.lock:
            handle.users += 1
            return handle

    def release(self, handle: LogHandle) -> None:
        with self.lock:
            handle.users -= 1
            if not (handle.retired and handle.users == 0):
                return
            # Closed before it leaves the list and the waiters hear of it: a forget waiting in
            # drain must not return while the descriptor is still open.
            close_handle(handle)
            if handle in self.retired:
                self.retired.remove(handle)
            self.idle.notify_all()

    def drain(self, path: str, timeout: float) -> None:
        """Wait, `timeout` seconds at most, until no thread reads through a replaced log, so that every
        retired descriptor is closed (a forget must leave no copy of what it erased open in this
        process). ErasureIncomplete, naming the descriptor, if a read still holds one then."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.retired:
                left = deadline - time.monotonic()
                if left <= 0:
                    held = self.retired[0]
                    raise ErasureIncomplete(
                        f"{path}: the forget is committed and its content erased from the log, but "
                        f"descriptor {held.fd} of this process (/proc/{os.getpid()}/fd/{held.fd}) still holds "
                        f"the log a compaction replaced, kept open by {held.users} read(s) in progress for over "
                        f"{timeout} s; the erased bytes stay readable through it until they finish"
                    )
                self.idle.wait(left)

    def close_all(self) -> None:
        handles, self.retired = [self.current, *self.retired], []
        self.current = LogHandle(-1)
        for handle in handles:
            close_handle(handle)


def open_regular(path: str, readonly: bool) -> int:
    """Open the log, refusing anything but a regular file without ever blocking on one (a FIFO)."""
    fd = os.open(path, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise MnemoError(f"cannot open the database at {path}: not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def close_handle(handle: LogHandle) -> None:
    if handle.fd >= 0:
        with contextlib.suppress(OSError):
            os.close(handle.fd)
        handle.fd = -1
