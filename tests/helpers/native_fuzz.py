"""Runs of tools/fuzz_native.py (atheris over the C extension and its pure-Python twins) for the tests:
coverage-guided over the twin with the extension as installed, then the corpus it grew, mutated further,
through an AddressSanitizer + UBSan build of the extension (the sanitizer runtime preloaded into
Python)."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "fuzz_native.py"


@dataclass
class FuzzRun:
    runs: int
    seconds: int
    corpus: int
    output: str


def _run(args: list[str], env: dict[str, str], timeout: float) -> FuzzRun:
    proc = subprocess.run([sys.executable, str(TOOL), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "ERROR: AddressSanitizer" not in out and "runtime error:" not in out, out[-4000:]
    done = re.search(r"Done (\d+) runs in (\d+) second", out)
    assert done is not None, out[-4000:]
    return FuzzRun(int(done.group(1)), int(done.group(2)), 0, out)


_BUILT: dict[str, list[str]] = {}


def sanitized_build() -> list[str]:
    """The paths of the extensions built with ASan + UBSan by the tool, built once for a run of the tests
    (the build is most of a brief run's fixed cost) and again whenever the C sources or headers change."""
    sources = sorted([*(ROOT / "mnemo").glob("*.c"), *(ROOT / "mnemo").glob("*.h")])
    key = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()
    if key not in _BUILT:
        out = Path(tempfile.mkdtemp(prefix="mnemo-asan-"))
        atexit.register(shutil.rmtree, out, ignore_errors=True)
        build = subprocess.run([sys.executable, str(TOOL), "--build", str(out)], capture_output=True, text=True,
                               check=True, timeout=300)
        _BUILT[key] = build.stdout.strip().splitlines()
    return _BUILT[key]


def fuzz(
    tmp: Path, guided: int, sanitized: int, target: str = "scan", unit: str = "seconds"
) -> tuple[FuzzRun, FuzzRun]:
    """(the guided run, the sanitized run) of the tool's `target` over one corpus in tmp, each `guided` and
    `sanitized` seconds long, or (`unit="runs"`) that many inputs: a brief run in the default suite
    counts inputs, so that a machine busy with other work takes longer instead of trying fewer."""
    limit = {"seconds": lambda n: n * 4 + 120, "runs": lambda n: 600}[unit]
    corpus = tmp / "corpus"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("MNEMO_PURE_PYTHON", None)
    first = _run(["--target", target, f"--{unit}", str(guided), str(corpus)], env, limit(guided))
    first.corpus = len(list(corpus.iterdir()))
    module = {"readpath": "_readpath", "writepath": "_writepath", "pgread": "_pgread"}.get(target, "_speedups")
    ext = next(p for p in sanitized_build() if Path(p).name.split(".")[0] == module)
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=True).stdout.strip()
    senv = dict(env, LD_PRELOAD=asan, PYTHONMALLOC="malloc", ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    second = _run(["--ext", ext, "--target", target, f"--{unit}", str(sanitized), str(corpus)], senv,
                  limit(sanitized))
    second.corpus = len(list(corpus.iterdir()))
    return first, second
