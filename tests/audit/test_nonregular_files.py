"""The file readers (verify_db, read_log, export_audit, verify_export) refuse at once anything that is
not a regular file: a FIFO, a directory, a character device, a socket, or a symbolic link to one. They
never block (a FIFO without a writer would hold a plain open forever), whatever is swapped in between
their check and their open. Every call runs under a time limit, so a regression fails rather than hangs."""

from __future__ import annotations

import io
import os
import signal
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from mnemo import MnemoClient
from mnemo.audit import UnreadableDatabase, UnreadableExport, export_audit, read_log, verify_db, verify_export
from mnemo.storage.file import reader as filelog

LIMIT = 5.0


class Hang(Exception):
    pass


@contextmanager
def time_limit(seconds: float = LIMIT) -> Iterator[None]:
    def on_alarm(_signum: int, _frame: Any) -> None:
        raise Hang(f"no answer within {seconds} s: the reader blocked")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.fixture
def specials(tmp_path: Path) -> Iterator[dict[str, tuple[Path, str]]]:
    """name -> (path, how the error names what it is)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    folder = tmp_path / "folder"
    folder.mkdir()
    sock_path = tmp_path / "sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    links = {}
    for target in (fifo, folder, sock_path, Path("/dev/zero")):
        link = tmp_path / f"link-to-{target.name}"
        link.symlink_to(target)
        links[target.name] = link
    try:
        yield {
            "fifo": (fifo, "it is a FIFO (named pipe), not a regular file"),
            "directory": (folder, "it is a directory, not a regular file"),
            "char-device": (Path("/dev/zero"), "it is a character device, not a regular file"),
            "socket": (sock_path, "it is a socket, not a regular file"),
            "link-to-fifo": (links["fifo"], "it is a symbolic link to a FIFO (named pipe), not a regular file"),
            "link-to-directory": (links["folder"], "it is a symbolic link to a directory, not a regular file"),
            "link-to-socket": (links["sock"], "it is a symbolic link to a socket, not a regular file"),
            "link-to-device": (links["zero"], "it is a symbolic link to a character device, not a regular file"),
        }
    finally:
        sock.close()


KINDS = ["fifo", "directory", "char-device", "socket", "link-to-fifo", "link-to-directory", "link-to-socket",
         "link-to-device"]
DB_READERS: list[tuple[str, Callable[[Path, Path], object]]] = [
    ("verify_db", lambda p, _out: verify_db(p)),
    ("read_log", lambda p, _out: list(read_log(p))),
    ("export_audit-stream", lambda p, _out: export_audit(p, io.StringIO())),
    ("export_audit-file", lambda p, out: export_audit(p, out)),
]


def _listing(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("reader", "call"), DB_READERS, ids=[name for name, _ in DB_READERS])
def test_database_readers_refuse_what_is_not_a_regular_file(
    specials: dict[str, tuple[Path, str]], tmp_path: Path, kind: str, reader: str, call: Callable[[Path, Path], object]
) -> None:
    path, what = specials[kind]
    before = _listing(tmp_path)
    with time_limit(), pytest.raises(UnreadableDatabase) as exc:
        call(path, tmp_path / "export.jsonl")
    assert str(exc.value) == f"cannot read {path}: {what}"
    assert _listing(tmp_path) == before  # no export, no temporary file
    assert os.path.lexists(path)


@pytest.mark.parametrize("kind", KINDS)
def test_verify_export_refuses_what_is_not_a_regular_file(
    specials: dict[str, tuple[Path, str]], kind: str
) -> None:
    path, what = specials[kind]
    with time_limit(), pytest.raises(UnreadableExport) as exc:
        verify_export(path)
    assert str(exc.value) == f"cannot read {path}: {what}"


@pytest.mark.parametrize("swapped_in", ["fifo", "char-device", "directory"])
def test_a_file_swapped_after_the_check_is_refused_without_blocking(
    specials: dict[str, tuple[Path, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped_in: str
) -> None:
    """The check by name sees a regular file; what the open then gets is the FIFO (or device, or
    directory) an attacker put there in between. The open does not block, and its fstat refuses it."""
    regular = tmp_path / "regular"
    regular.write_bytes(b"x")
    path, what = specials[swapped_in]
    real_stat = os.stat

    def stat_before_the_swap(name: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        return real_stat(regular if os.fspath(name) == str(path) else name, *args, **kwargs)

    monkeypatch.setattr(filelog.os, "stat", stat_before_the_swap)
    with time_limit(), pytest.raises(UnreadableDatabase) as exc:
        verify_db(path)
    assert str(exc.value) == f"cannot read {path}: {what}"
    with time_limit(), pytest.raises(UnreadableExport):
        verify_export(path)


def test_a_missing_file_is_named_as_missing(tmp_path: Path) -> None:
    for call in (verify_db, lambda p: list(read_log(p))):
        with pytest.raises(UnreadableDatabase, match=rf"^cannot open {tmp_path}/nothing: No such file or directory$"):
            call(tmp_path / "nothing")
    with pytest.raises(UnreadableExport, match="No such file or directory"):
        verify_export(tmp_path / "nothing")


def test_a_symlink_to_a_regular_database_still_reads(tmp_path: Path) -> None:
    db = tmp_path / "real.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("hello")
    link = tmp_path / "link.db"
    link.symlink_to(db)
    with time_limit():
        assert verify_db(link).ok
        assert len(list(read_log(link))) == 2
        out = tmp_path / "export.jsonl"
        assert export_audit(link, out) == 2
        assert verify_export(out).ok


def test_an_erasure_journal_that_is_a_fifo_is_not_read(tmp_path: Path) -> None:
    """verify_db also reads `DB.erase` beside the log: a FIFO there is named in a note, never opened."""
    db = tmp_path / "j.db"
    with MnemoClient(db, "owner", durability="none") as c:
        c.remember("hello")
    os.mkfifo(f"{db}.erase")
    with time_limit():
        report = verify_db(db)
    assert report.ok
    assert f"cannot read {db}.erase: it is a FIFO (named pipe), not a regular file: not read as an erasure journal" in (
        report.notes
    )
