"""Shared pieces of the benchmark suite: configuration, the record generator, timing, results, the
table and the JSON report.

Every workload returns a list of `Result`s. A result holds the samples (one per repetition) of Mnemo and,
when there is one, of its baseline measured in the same process run; the table shows medians and the
ratio Mnemo / baseline. Values with a baseline are always rates (higher is better), so a ratio above 1.0
means Mnemo is faster.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import datetime as _dt
import gc
import hashlib
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

AGENT = "bench-agent"
CONTENT_BYTES = 400

_FILLER = (
    "The user prefers concise answers with metric units and ISO dates; they work on a distributed "
    "storage engine written in Rust and Python, review pull requests in the morning, and asked the "
    "assistant to remember the names of the three services that page them most often at night. "
)


# -- configuration -----------------------------------------------------------------------------------


@dataclass
class Config:
    """What a run measures and how much. `quick` keeps the whole suite within a few minutes."""

    quick: bool
    workdir: str
    reps: int
    remember_n: int  # records per repetition, non-durable modes
    fsync_n: int  # records per repetition, durable modes
    threads: int
    per_thread: int
    tx_size: int
    sizes: tuple[int, ...]  # record counts of the large databases (open, query, verify, memory)
    big_reps: int  # repetitions of the slow measurements on the large databases
    replay_reps: int  # repetitions of opening a large database without its snapshot
    query_hits: int
    build_tx: int  # records per transaction while building a large database
    verbose: bool = True

    @classmethod
    def make(cls, quick: bool, workdir: str, reps: int | None = None, verbose: bool = True) -> Config:
        if quick:
            return cls(
                quick=True, workdir=workdir, reps=reps or 3, remember_n=2_000, fsync_n=200, threads=8,
                per_thread=60, tx_size=1_000, sizes=(100_000,), big_reps=reps or 3,
                replay_reps=reps or 2, query_hits=100, build_tx=1_000, verbose=verbose,
            )
        return cls(
            quick=False, workdir=workdir, reps=reps or 5, remember_n=5_000, fsync_n=500, threads=8,
            per_thread=100, tx_size=1_000, sizes=(100_000, 1_000_000), big_reps=reps or 3,
            replay_reps=reps or 3, query_hits=100, build_tx=1_000, verbose=verbose,
        )

    def log(self, message: str) -> None:
        if self.verbose:
            print(f"  {message}", file=sys.stderr, flush=True)


# -- records -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordSpec:
    content: str
    tags: tuple[str, ...]
    metadata: dict[str, Any]


def make_record(i: int, tag_groups: int) -> RecordSpec:
    """Record number i: 400 bytes of text, two tags, a small metadata map.

    Tag `t{i % tag_groups}` is shared by every `tag_groups`-th record, so in a database of n records each
    such tag has n / tag_groups hits; `k{i % 7}` is a coarse second tag."""
    head = f"memory {i}: "
    body = (_FILLER * 3)[: CONTENT_BYTES - len(head)]
    return RecordSpec(head + body, (f"k{i % 7}", f"t{i % tag_groups}"), {"i": i, "source": "bench"})


# -- timing ------------------------------------------------------------------------------------------


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of fn takes."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def alternate(reps: int, *fns: Callable[[], float]) -> list[list[float]]:
    """Run each measurement `reps` times, interleaved (and the order rotated every repetition) so that
    drift of a noisy machine falls on all of them alike. Returns the samples of each fn."""
    out: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        order = list(range(len(fns)))
        k = r % len(fns)
        order = order[k:] + order[:k]
        for i in order:
            out[i].append(fns[i]())
    return out


def settled_rss_bytes() -> int:
    """rss_bytes() after a garbage collection and, with glibc, malloc_trim(0): the pages freed before
    are given back first, so that a growth measured between two such readings is the work's alone (the
    C extension trims the heap after a bulk catch-up, which would otherwise give back, inside the
    measurement, pages freed before it)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):  # (no glibc: nothing to trim)
        ctypes.CDLL(None).malloc_trim(0)
    return rss_bytes()


def rss_bytes() -> int:
    """Resident set size of this process (VmRSS from /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


# -- results -----------------------------------------------------------------------------------------


@dataclass
class Target:
    """A target from the issue: the ratio at least or at most `value` ("ratio>=" / "ratio<="), or the
    value itself at most or at least `value` ("<=" / ">=")."""

    kind: str
    value: float

    def describe(self, unit: str) -> str:
        if self.kind in ("ratio>=", "ratio<="):
            return f"{self.kind[5:]} {self.value:g}x"
        return f"{self.kind} {fmt_value(self.value, unit)}"


@dataclass
class Result:
    workload: str  # the registered workload it came from, e.g. "remember"
    case: str  # what was measured, e.g. "remember, durability=none"
    unit: str  # "records/s", "s", "B/record", ...
    mnemo: list[float]
    baseline_name: str | None = None
    baseline: list[float] | None = None
    target: Target | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def value(self) -> float:
        return statistics.median(self.mnemo)

    @property
    def baseline_value(self) -> float | None:
        return None if not self.baseline else statistics.median(self.baseline)

    @property
    def ratio(self) -> float | None:
        b = self.baseline_value
        return None if b is None or b == 0 else self.value / b

    @property
    def met(self) -> bool | None:
        t = self.target
        if t is None:
            return None
        if t.kind in ("ratio>=", "ratio<="):
            r = self.ratio
            return None if r is None else (r >= t.value if t.kind == "ratio>=" else r <= t.value)
        if t.kind == "<=":
            return self.value <= t.value
        return self.value >= t.value

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            median=self.value, baseline_median=self.baseline_value, ratio=self.ratio, met=self.met,
            target=None if self.target is None else {"kind": self.target.kind, "value": self.target.value},
        )
        return d


def rate_samples(count: int, seconds: Sequence[float]) -> list[float]:
    return [count / s for s in seconds]


# -- output ------------------------------------------------------------------------------------------


def fmt_value(v: float, unit: str) -> str:
    if unit == "s":
        return f"{v * 1000:.1f} ms" if v < 1 else f"{v:.2f} s"
    if unit == "B/record":
        return f"{v:.0f} B/rec"
    if v >= 100_000:
        text = f"{v / 1000:,.0f}k"
    elif v >= 100:
        text = f"{v:,.0f}"
    else:
        text = f"{v:.1f}"
    return f"{text} {unit}"


def table(results: Sequence[Result]) -> str:
    """A Markdown table of medians, baselines, ratios and targets."""
    head = ["workload", "Mnemo (median)", "baseline", "baseline (median)", "ratio", "target", "met"]
    rows = [head, ["---"] * len(head)]
    for r in results:
        b = r.baseline_value
        ratio = r.ratio
        met = r.met
        rows.append([
            r.case,
            fmt_value(r.value, r.unit),
            r.baseline_name or "—",
            "—" if b is None else fmt_value(b, r.unit),
            "—" if ratio is None else f"{ratio:.2f}x",
            "—" if r.target is None else r.target.describe(r.unit),
            "—" if met is None else ("yes" if met else "**no**"),
        ])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


MNEMO_DIR = Path(__file__).resolve().parents[1] / "mnemo"


def source_digest() -> str:
    """A digest of the mnemo package's source: tells whether the code changed during a run, and whether
    a kept database was built by this code."""
    h = hashlib.sha256()
    for path in sorted(MNEMO_DIR.rglob("*.py")):
        h.update(str(path.relative_to(MNEMO_DIR)).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()[:12]


def git_revision() -> str | None:
    """The checkout's commit, with "+dirty" when mnemo/ differs from it; None outside git."""
    root = str(MNEMO_DIR.parent)
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "mnemo"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+dirty" if dirty else "")


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = None
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_bytes": mem,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "git": git_revision(),
        "mnemo_source": source_digest(),
    }


def write_json(
    path: str, config: Config, results: Sequence[Result], errors: dict[str, str],
    script_output: dict[str, str] | None = None, machine: dict[str, Any] | None = None,
) -> None:
    report = {
        "machine": machine or machine_info(),
        "mode": "quick" if config.quick else "full",
        "config": {k: v for k, v in asdict(config).items() if k not in ("workdir", "verbose")},
        "results": [r.to_json() for r in results],
        "errors": errors,
        "script_output": script_output or {},
        "mnemo_source_at_end": source_digest(),
    }
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")


def standalone(doc: str, run: Callable[[Config, int], list[Result]], files: int, argv: list[str] | None,
               reps: int = 5) -> int:
    """A workload module run alone (`python -m benchmarks.bench_NAME`): `--files N`, `--reps N` and `--dir
    DIR` (default benchmarks/results/), one quick Config, the table printed."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=files)
    parser.add_argument("--reps", type=int, default=reps)
    parser.add_argument("--dir", default=os.path.join(os.path.dirname(__file__), "results"))
    args = parser.parse_args(argv)
    os.makedirs(args.dir, exist_ok=True)
    print(table(run(Config.make(True, args.dir, args.reps), args.files)))
    return 0
