"""Files the command line must refuse at once, and a reader that goes away: run in child processes with
timeouts, so that a command that hangs on a FIFO fails its test instead of hanging the suite."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.logs import erase_slot, sample_log
from helpers.procs import subprocess_env

from mnemo import MnemoClient

# Runs each command line of argv[1] (a JSON list) through main() in this one child process, printing
# one JSON line per command as it ends, so that a hang names the command that hung.
RUNNER = """
import io, json, sys
from mnemo.cli import main
for argv in json.loads(sys.argv[1]):
    print(json.dumps({"start": argv}), flush=True)
    err, out = io.StringIO(), io.StringIO()
    sys.stderr, sys.stdout = err, out
    try:
        code = main(argv)
    finally:
        sys.stderr, sys.stdout = sys.__stderr__, sys.__stdout__
    print(json.dumps({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue()}), flush=True)
"""


def run_all(commands: list[list[str]], timeout: float = 60) -> list[dict[str, object]]:
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, json.dumps(commands)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, env=subprocess_env())
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        started = [json.loads(line)["start"] for line in out.splitlines() if '"start"' in line]
        pytest.fail(f"hung on: mnemo {' '.join(started[-1]) if started else '?'}")
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if not line.startswith('{"start"')]


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a Unix socket's path must fit in about 100 bytes."""
    path = Path(tempfile.mkdtemp(prefix="mnemo-cli-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def short_db(short_dir: Path) -> Path:
    """A file database holding one memory, in the short directory (whose path a socket can take)."""
    path = short_dir / "memory.mnemo.db"
    with MnemoClient(path, "owner", durability="none") as c:
        c.remember("a memory")
    return path


def make_special(kind: str, where: Path) -> tuple[Path, str]:
    """A non-regular file of this kind, and how the refusal names it."""
    if kind == "fifo":
        path = where / "fifo"
        os.mkfifo(path)
        return path, "a FIFO (named pipe)"
    if kind == "directory":
        path = where / "dir"
        path.mkdir()
        return path, "a directory"
    if kind == "device":
        return Path("/dev/zero"), "a character device"
    path = where / "sock"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the socket file stays
    return path, "a socket"


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "socket"])
def test_non_regular_files_are_refused_at_once(kind: str, short_dir: Path, short_db: Path) -> None:
    special, what = make_special(kind, short_dir)
    before = os.stat(special)
    p, d = str(special), str(short_db)
    as_db = [["verify", p], ["log", p], ["audit", "export", p], ["ls", p], ["cat", p, "x"], ["history", p, "x"],
             ["stats", p], ["compact", p], ["verify", p, "--json"], ["ls", p, "--agent", "owner"]]
    as_file = [["audit", "verify", p], ["audit", "verify", p, "--json"]]
    as_output = [["audit", "export", d, "-o", p], ["keygen", "-o", p], ["keygen", "-o", p, "--force"]]
    as_key = [["verify", d, "--pubkey", p], ["audit", "verify", "-", "--pubkey", p]]
    results = run_all(as_db + as_file + as_output + as_key)
    assert len(results) == len(as_db + as_file + as_output + as_key)
    for r in results:
        argv = r["argv"]
        assert isinstance(argv, list) and isinstance(r["err"], str)
        assert (r["code"], r["out"]) == (2, ""), argv
        if "--json" in argv:
            error = json.loads(r["err"])["error"]
            assert error == {"message": f"cannot open {p}: it is {what}, not a regular file",
                             "type": "UnreadableFile", "exit_code": 2}
        elif argv in as_output:
            assert r["err"] == f"mnemo: error: cannot write {p}: it is {what}, not a regular file\n", argv
        elif argv in as_key:
            assert r["err"] == f"mnemo: error: --pubkey: cannot read {p}: it is {what}, not a regular file\n"
        else:
            assert r["err"] == f"mnemo: error: cannot open {p}: it is {what}, not a regular file\n", argv
    after = os.stat(special)
    assert (stat.S_IFMT(after.st_mode), after.st_ino) == (stat.S_IFMT(before.st_mode), before.st_ino)
    assert not any(name.startswith(special.name + ".") for name in os.listdir(special.parent)), "a temp file"


def test_a_missing_output_directory_is_exit_2(short_dir: Path, short_db: Path) -> None:
    [r] = run_all([["audit", "export", str(short_db), "-o", str(short_dir / "no" / "audit.jsonl")]])
    assert r["code"] == 2 and "cannot write" in str(r["err"]) and "No such file" in str(r["err"])


# -- a closed pipe -----------------------------------------------------------------------------------------


@pytest.fixture
def damaged(short_dir: Path) -> Path:
    """A database whose verify report is far larger than a pipe's buffer: 2,000 payloads zeroed."""
    _b, built = sample_log(n_puts=2000)
    for seq in list(built.slots)[2:]:
        erase_slot(built.data, built, seq)
    return built.write(short_dir / "damaged.db")


def first_line_then_close(*args: str) -> tuple[int, str, str]:
    """Run `mnemo ARGS | head -1` with a real pipe: read one line, close the pipe, wait for the exit."""
    proc = subprocess.Popen([sys.executable, "-m", "mnemo", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=subprocess_env())
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = proc.stdout.readline().decode()
        proc.stdout.close()
        code = proc.wait(timeout=60)
        err = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stderr.close()
    return code, line, err


def test_a_closed_pipe_keeps_the_exit_code_of_verify(damaged: Path) -> None:
    code, line, err = first_line_then_close("verify", str(damaged))
    assert line.startswith(f"FAILED: {damaged}: ")
    assert (code, err) == (1, "")
    code, line, err = first_line_then_close("verify", str(damaged), "--json")
    assert (code, line, err) == (1, "{\n", "")


def test_a_closed_pipe_keeps_the_exit_code_of_a_stream(damaged: Path, short_dir: Path) -> None:
    code, line, err = first_line_then_close("log", str(damaged))
    assert (code, err) == (0, "") and " genesis " in line  # zeroed payloads are not the log's to check
    _b, built = sample_log(n_puts=2000)
    built.data[built.frame_spans[-2][0] + 40] ^= 1  # damage near the end, after the reader has gone
    late = built.write(short_dir / "late.db")
    code, line, err = first_line_then_close("log", str(late), "--json")
    assert json.loads(line)["seq"] == 0
    assert code == 1 and "damaged frame at offset" in err
    code, line, err = first_line_then_close("audit", "export", str(damaged))
    assert (code, err) == (0, "") and json.loads(line)["seq"] == 0
    code, line, err = first_line_then_close("audit", "export", str(late))  # finds the damage before writing
    assert (code, line) == (1, "") and "cannot export" in err
