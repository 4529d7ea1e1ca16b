"""Runs of tools/fuzz_native.py (atheris over the C extension and its pure-Python twins) for the tests:
coverage-guided over the twin with the extension as installed, then the corpus it grew, mutated further,
through an AddressSanitizer + UBSan build of the extension (the sanitizer runtime preloaded into
Python)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    build = subprocess.run([sys.executable, str(TOOL), "--build", str(tmp / "asan")], capture_output=True,
                           text=True, check=True, timeout=300)
    built = build.stdout.strip().splitlines()
    stem = {"readpath": "_readpath", "writepath": "_writepath"}.get(target, "_speedups")
    ext = next(p for p in built if Path(p).name.split(".")[0] == stem)
    asan = subprocess.run(["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True,
                          check=True).stdout.strip()
    senv = dict(env, LD_PRELOAD=asan, PYTHONMALLOC="malloc", ASAN_OPTIONS="detect_leaks=0:abort_on_error=1",
                UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1")
    second = _run(["--ext", ext, "--target", target, f"--{unit}", str(sanitized), str(corpus)], senv,
                  limit(sanitized))
    second.corpus = len(list(corpus.iterdir()))
    return first, second
