"""Run the benchmark suite: `python -m benchmarks.run [--quick] [--only NAME ...] [--json FILE]`.

Prints a Markdown table of medians, baselines, ratios (Mnemo / baseline) and targets on stdout, progress
on stderr, and writes the full samples as JSON with --json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import json
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import bench_core
from .common import Config, Result, Target, machine_info, source_digest, table, write_json

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = ROOT / "benchmarks" / "results"

Workload = Callable[[Config], list[Result]]

# The import names of what the `bench` extra of pyproject.toml installs for the baselines: without one, the
# workloads that need it are left out (and the run says so) rather than the run failing.
BENCH_EXTRA = ("anthropic", "lmdb")
# ... and of the `ui` extra, which the `ui` workload needs.
UI_EXTRA = ("starlette", "jinja2", "uvicorn")


@dataclass
class External:
    """A benchmark module owned elsewhere. If it defines `WORKLOADS: dict[str, Callable[[Config],
    list[Result]]]` or `run(config: Config) -> list[Result]`, those are used. Otherwise its stand-alone
    `main(argv) -> int` is called with `argv(config)` (None: not in this mode); what it prints is shown
    after the table, and `results(json_path)` may turn the JSON it wrote into table rows."""

    module: str
    argv: Callable[[Config, str], list[str] | None]
    results: Callable[[str], list[Result]] | None = None


def _memory_tool_results(path: str) -> list[Result]:
    """Rows for the issue-8 memory-tool targets from bench_memory_tool.py's JSON report."""
    with open(path) as f:
        data = json.load(f)
    mixed, big = data["mixed"], data["big_directory"]
    files = int(big["mnemo"]["files"])
    return [
        Result("memory_tool", f"memory tool mixed workload ({mixed['mnemo']['ops']} ops, fsync)", "ops/s",
               [mixed["mnemo"]["ops_per_s"]], "BetaLocalFilesystemMemoryTool",
               [mixed["reference"]["ops_per_s"]], Target("ratio>=", 3.0),
               "one run of bench_memory_tool.py"),
        Result("memory_tool", f"memory tool view of a {files:,}-file directory", "views/s",
               [1000 / big["mnemo"]["view_p50_ms"]], "BetaLocalFilesystemMemoryTool",
               [1000 / big["reference"]["view_p50_ms"]],
               Target("ratio>=", 5.0) if files >= 10_000 else None, "median of 5 views"),
    ]


EXTERNAL: dict[str, External] = {
    "memory_tool": External(
        "benchmarks.bench_memory_tool",
        lambda cfg, out: (["--quick"] if cfg.quick else []) + ["--dir", cfg.workdir, "--json", out],
        _memory_tool_results,
    ),
    "verify_extra": External("benchmarks.bench_verify", lambda cfg, out: None if cfg.quick else []),
    "mounts": External("benchmarks.bench_mounts", lambda cfg, out: None),
    # WORKLOADS: "recall" (full-text recall beside SQLite FTS5 and tantivy, and what its index costs)
    "recall": External("benchmarks.bench_recall", lambda cfg, out: None),
    # WORKLOADS: "transfer" (mnemo import and export of 10,000 files beside cp -r + sync)
    "transfer": External("benchmarks.bench_transfer", lambda cfg, out: None),
    # WORKLOADS: "ui" (mnemo ui's tree of 10,000 files and a file's page, beside the library calls under them)
    "ui": External("benchmarks.bench_ui", lambda cfg, out: None),
}

# Printed reports of stand-alone external scripts, by workload name.
SCRIPT_OUTPUT: dict[str, str] = {}


def _adapt(fn: Callable[..., Any]) -> Workload:
    """Call an external run() with the config, or with quick= if that is what it takes."""
    params = inspect.signature(fn).parameters

    def call(cfg: Config) -> list[Result]:
        if "quick" in params and "config" not in params:
            out = fn(quick=cfg.quick)
        elif params:
            out = fn(cfg)
        else:
            out = fn()
        results = list(out or [])
        for r in results:
            if not isinstance(r, Result):
                raise TypeError(f"a workload returned {type(r).__name__}, not benchmarks.common.Result")
        return results

    return call


def _script(name: str, ext: External, main: Callable[..., Any]) -> Workload:
    """Run a stand-alone benchmark script's main(), keeping what it prints."""

    def call(cfg: Config) -> list[Result]:
        out_json = os.path.join(cfg.workdir, f"{name}.json")
        argv = ext.argv(cfg, out_json)
        if argv is None:
            SCRIPT_OUTPUT[name] = f"not run in --quick: python -m {ext.module} runs it on its own"
            return []
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(argv)
        SCRIPT_OUTPUT[name] = buf.getvalue().rstrip()
        if code:
            raise RuntimeError(f"{name}: main() returned {code}")
        return ext.results(out_json) if ext.results is not None else []

    return call


def registry() -> tuple[dict[str, Workload], dict[str, str]]:
    """Every workload by name, and why any external module contributes none."""
    workloads: dict[str, Workload] = dict(bench_core.WORKLOADS)
    missing: dict[str, str] = {}
    for name, ext in EXTERNAL.items():
        module_name = ext.module
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                missing[name] = f"{module_name.replace('.', '/')}.py does not exist yet"
            elif exc.name is not None and exc.name.split(".")[0] in BENCH_EXTRA:
                # a baseline from the `bench` extra that is not installed: run the rest, saying what is left out
                missing[name] = (f"it needs {exc.name.split('.')[0]}, which is not installed (the `bench` extra: "
                                 "pip install -e '.[bench]')")
            elif exc.name is not None and exc.name.split(".")[0] in UI_EXTRA:
                missing[name] = (f"it needs {exc.name.split('.')[0]}, which is not installed (the `ui` extra: "
                                 "pip install -e '.[ui]')")
            else:
                raise
            continue
        provided = getattr(module, "WORKLOADS", None)
        if isinstance(provided, dict):
            for key, fn in provided.items():
                if key in workloads:
                    raise SystemExit(f"{module_name} registers workload {key!r}, which already exists")
                workloads[key] = _adapt(fn)
        elif callable(getattr(module, "run", None)):
            workloads[name] = _adapt(module.run)
        elif callable(getattr(module, "main", None)):
            workloads[name] = _script(name, ext, module.main)
        else:
            missing[name] = f"{module_name} defines neither WORKLOADS, run() nor main()"
    return workloads, missing


def _fs_type(path: str) -> str:
    """The file system type holding `path` (from /proc/mounts), or '?'."""
    best, fstype = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and (path == parts[1] or path.startswith(parts[1].rstrip("/") + "/")) \
                        and len(parts[1]) > len(best):
                    best, fstype = parts[1], parts[2]
    except OSError:
        pass
    return fstype


def main(argv: list[str] | None = None) -> int:
    workloads, missing = registry()
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, 100k records only (~3 min)")
    parser.add_argument("--only", nargs="+", metavar="NAME", choices=sorted(workloads),
                        help=f"run only these workloads: {', '.join(workloads)}")
    parser.add_argument("--json", metavar="FILE", help="write every sample and the machine details here")
    parser.add_argument("--reps", type=int, help="repetitions per measurement (default 3 quick, 5 full)")
    parser.add_argument("--dir", metavar="DIR", default=str(DEFAULT_WORKDIR),
                        help="where scratch databases go (a real disk, not tmpfs; default %(default)s)")
    parser.add_argument("--keep-data", action="store_true",
                        help="keep the large databases in DIR/data-N and reuse them on the next run")
    parser.add_argument("--label", help="a note for the header and the JSON, e.g. the commit measured")
    parser.add_argument("--list", action="store_true", help="list the workloads and exit")
    args = parser.parse_args(argv)

    if args.list:
        for name in workloads:
            print(name)
        for name, why in missing.items():
            print(f"{name} (not available: {why})")
        return 0

    base = os.path.abspath(args.dir)
    os.makedirs(base, exist_ok=True)
    workdir = os.path.join(base, "work") if args.keep_data else tempfile.mkdtemp(prefix="run-", dir=base)
    os.makedirs(workdir, exist_ok=True)
    cfg = Config.make(args.quick, workdir, args.reps)
    fstype = _fs_type(workdir)
    info = machine_info()
    info["label"] = args.label
    print(f"# Mnemo benchmarks ({'quick' if cfg.quick else 'full'}), {info['date']}", file=sys.stderr)
    print(f"# {info['cpu']}, {info['cores']} cores, Python {info['python']}, SQLite {info['sqlite']}, "
          f"scratch on {fstype} ({workdir}); mnemo {args.label or info['git']} source {info['mnemo_source']}",
          file=sys.stderr)
    if fstype in ("tmpfs", "ramfs"):
        print("# warning: scratch is in memory, fsync costs nothing there; use --dir on a disk",
              file=sys.stderr)
    for name, why in missing.items():
        print(f"# {name}: skipped, {why}", file=sys.stderr)

    selected = args.only or list(workloads)
    results: list[Result] = []
    errors: dict[str, str] = {}
    t_start = time.perf_counter()
    try:
        for name in selected:
            print(f"[{name}]", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            try:
                results += workloads[name](cfg)
            except Exception:
                errors[name] = traceback.format_exc()
                print(errors[name], file=sys.stderr)
            print(f"[{name}] {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:
        if not args.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"\n{'Quick' if cfg.quick else 'Full'} run, {info['date']}, {info['cpu']}, {info['cores']} cores, "
          f"Python {info['python']}, SQLite {info['sqlite']}, {fstype}; "
          f"{cfg.reps} reps ({cfg.big_reps} on large dbs, {cfg.replay_reps} for opens without snapshot), "
          "medians; "
          f"total {time.perf_counter() - t_start:.0f} s\n")
    print(f"mnemo at {args.label or info['git'] or '?'} (source {info['mnemo_source']})\n")
    print(table(results) if results else "(no results)")
    if source_digest() != info["mnemo_source"]:
        print("\n**Warning: the mnemo source changed during this run; its numbers mix two versions.**")
    for name, text in SCRIPT_OUTPUT.items():
        print(f"\n{name} (its own report):\n\n```\n{text}\n```")
    for name in errors:
        print(f"\n{name}: FAILED (traceback above)")
    for name, why in missing.items():
        print(f"\n{name}: not run, {why}")
    if args.json:
        write_json(args.json, cfg, results, errors, SCRIPT_OUTPUT, info)
        print(f"\nJSON: {args.json}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
