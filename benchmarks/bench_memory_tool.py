"""Memory-tool benchmark: Mnemo vs the SDK's BetaLocalFilesystemMemoryTool, side by side in one run.

Both are driven through the same interface, the SDK tool's `call(input)` (for Mnemo, the
`MnemoMemoryTool` adapter over `MnemoMemoryToolServer`), each with its durable default: Mnemo with
`durability="fsync"` (every command is one fsynced commit), the reference with its own fsync of each
written file. Measured:

- per-command latency (p50 / p95 / mean) of view (directory), view (file), create, str_replace,
  insert, rename and delete, on a working set of files;
- a mixed workload of those seven commands, in operations per second;
- a directory of 10,000 files: `view` of it (Mnemo lists it from the path index, reading no content),
  then renaming and deleting the whole directory (one atomic commit each in Mnemo).

Usage: python benchmarks/bench_memory_tool.py [--quick] [--json FILE] [--dir DIR]
(results go to benchmarks/results/bench_memory_tool.json by default)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anthropic.lib.tools import ToolError  # noqa: E402
from anthropic.tools import BetaLocalFilesystemMemoryTool  # noqa: E402

from mnemo import MnemoClient  # noqa: E402
from mnemo.tools import MnemoMemoryToolServer  # noqa: E402
from mnemo.tools.anthropic import MnemoMemoryTool  # noqa: E402

COMMANDS = ["view_dir", "view_file", "create", "str_replace", "insert", "rename", "delete"]
MIX = {
    "view_dir": 10,
    "view_file": 35,
    "create": 10,
    "str_replace": 20,
    "insert": 10,
    "rename": 10,
    "delete": 5,
}


def file_text(i: int) -> str:
    body = "".join(f"- note {j} about item {i}: some remembered detail\n" for j in range(18))
    return f"# file {i}\ncounter: 0\n{body}"


class Workload:
    """One system's working set: which files exist, their counters, and how to act on them."""

    def __init__(self, name: str, tool: Any, rng: random.Random) -> None:
        self.name = name
        self.tool = tool
        self.rng = rng
        self.files: list[str] = []
        self.counters: dict[str, int] = {}
        self.next_id = 0

    def call(self, tool_input: dict[str, Any]) -> str:
        try:
            result = self.tool.call(tool_input)
        except ToolError as exc:
            raise RuntimeError(f"{self.name}: {tool_input} failed: {exc.content}") from None
        return str(result)

    def new_path(self) -> str:
        self.next_id += 1
        return f"/memories/bench/d{self.next_id % 8}/f{self.next_id:06d}.md"

    def seed(self, n: int) -> None:
        for _ in range(n):
            self.op_create()

    def pick(self) -> str:
        return self.rng.choice(self.files)

    def op_view_dir(self) -> None:
        self.call({"command": "view", "path": "/memories/bench"})

    def op_view_file(self) -> None:
        self.call({"command": "view", "path": self.pick()})

    def op_create(self) -> None:
        path = self.new_path()
        self.call({"command": "create", "path": path, "file_text": file_text(self.next_id)})
        self.files.append(path)
        self.counters[path] = 0

    def op_str_replace(self) -> None:
        path = self.pick()
        n = self.counters[path]
        self.call(
            {
                "command": "str_replace",
                "path": path,
                "old_str": f"counter: {n}\n",
                "new_str": f"counter: {n + 1}\n",
            }
        )
        self.counters[path] = n + 1

    def op_insert(self) -> None:
        self.call({"command": "insert", "path": self.pick(), "insert_line": 1, "insert_text": "- inserted line"})

    def op_rename(self) -> None:
        index = self.rng.randrange(len(self.files))
        old = self.files[index]
        new = self.new_path()
        self.call({"command": "rename", "old_path": old, "new_path": new})
        self.files[index] = new
        self.counters[new] = self.counters.pop(old)

    def op_delete(self) -> None:
        if len(self.files) < 20:
            self.op_create()
        index = self.rng.randrange(len(self.files))
        path = self.files.pop(index)
        del self.counters[path]
        self.call({"command": "delete", "path": path})

    def op(self, name: str) -> Callable[[], None]:
        method: Callable[[], None] = getattr(self, "op_" + name)
        return method


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "n": len(ordered),
        "p50_ms": statistics.median(ordered) * 1e3,
        "p95_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1e3,
        "mean_ms": statistics.fmean(ordered) * 1e3,
    }


def latency(systems: list[Workload], ops: int) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for command in COMMANDS:
        out[command] = {}
        for system in systems:
            fn = system.op(command)
            for _ in range(min(5, ops)):
                fn()  # warm up
            out[command][system.name] = summary([timed(fn) for _ in range(ops)])
    return out


def mixed(systems: list[Workload], ops: int, seed: int) -> dict[str, dict[str, float]]:
    plan = random.Random(seed).choices(list(MIX), weights=list(MIX.values()), k=ops)
    out = {}
    for system in systems:
        start = time.perf_counter()
        for command in plan:
            system.op(command)()
        elapsed = time.perf_counter() - start
        out[system.name] = {"ops": ops, "seconds": elapsed, "ops_per_s": ops / elapsed}
    return out


def big_directory(workdir: str, files: int) -> dict[str, dict[str, float]]:
    """Seed a directory of `files` files (bulk, outside the timing), then time view, rename, delete."""
    results: dict[str, dict[str, float]] = {}
    text = "a remembered fact, one line of it\n"
    # Mnemo: the records the memory tool would write, bulk-loaded in one transaction
    db = os.path.join(workdir, "big.mnemo.db")
    with MnemoClient(db, "bench") as client:
        start = time.perf_counter()
        with client.transaction():
            for i in range(files):
                client.remember(text, tags=("memorytool", f"path:/memories/big/f{i:05d}.md"))
        seed_s = time.perf_counter() - start
        # Views are cut at max_view_chars (16,000 by default, what a model's context can take): here it
        # is raised so that both tools list every file and the timings compare the same work.
        server = MnemoMemoryToolServer(client, max_view_chars=max(16_000, 64 * files + 1_000))
        results["mnemo"] = _big_ops(MnemoMemoryTool(server), files) | {"seed_s": seed_s}
    # the reference: plain files
    ref = BetaLocalFilesystemMemoryTool(base_path=os.path.join(workdir, "big-ref"))
    big = os.path.join(workdir, "big-ref", "memories", "big")
    os.makedirs(big)
    start = time.perf_counter()
    for i in range(files):
        with open(os.path.join(big, f"f{i:05d}.md"), "w") as f:
            f.write(text)
    seed_s = time.perf_counter() - start
    results["reference"] = _big_ops(ref, files) | {"seed_s": seed_s}
    return results


def _big_ops(tool: Any, files: int) -> dict[str, float]:
    views = []
    for _ in range(5):
        start = time.perf_counter()
        listing = tool.call({"command": "view", "path": "/memories/big"})
        views.append(time.perf_counter() - start)
        assert str(listing).count("\n") == files + 1
    rename_s = timed(
        lambda: tool.call({"command": "rename", "old_path": "/memories/big", "new_path": "/memories/moved"})
    )
    delete_s = timed(lambda: tool.call({"command": "delete", "path": "/memories/moved"}))
    return {
        "files": files,
        "view_p50_ms": statistics.median(views) * 1e3,
        "rename_dir_ms": rename_s * 1e3,
        "delete_dir_ms": delete_s * 1e3,
    }


def table(results: dict[str, Any]) -> str:
    rows = [f"{'command':<14}{'mnemo p50':>11}{'p95':>9}{'reference p50':>15}{'p95':>9}{'mnemo/ref':>11}"]
    for command, by_system in results["latency"].items():
        m, r = by_system["mnemo"], by_system["reference"]
        rows.append(
            f"{command:<14}{m['p50_ms']:>9.3f}ms{m['p95_ms']:>7.2f}ms{r['p50_ms']:>13.3f}ms{r['p95_ms']:>7.2f}ms"
            f"{m['p50_ms'] / r['p50_ms']:>10.2f}x"
        )
    mix = results["mixed"]
    rows.append("")
    rows.append(
        f"mixed workload ({mix['mnemo']['ops']} ops): mnemo {mix['mnemo']['ops_per_s']:.0f} ops/s, "
        f"reference {mix['reference']['ops_per_s']:.0f} ops/s"
    )
    big = results["big_directory"]
    for name in ("mnemo", "reference"):
        b = big[name]
        rows.append(
            f"{b['files']} files, {name:<9}: view {b['view_p50_ms']:.1f} ms,"
            f" rename dir {b['rename_dir_ms']:.1f} ms,"
            f" delete dir {b['delete_dir_ms']:.1f} ms"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=200, help="measured calls per command (default 200)")
    parser.add_argument("--seed-files", type=int, default=200, help="files in the working set (default 200)")
    parser.add_argument("--mixed-ops", type=int, default=1000, help="operations in the mixed workload")
    parser.add_argument("--big-dir", type=int, default=10_000, help="files in the big directory (default 10000)")
    parser.add_argument("--quick", action="store_true", help="a smoke run with tiny sizes")
    parser.add_argument(
        "--json",
        default=str(Path(__file__).resolve().parent / "results" / "bench_memory_tool.json"),
        help="where to write the results (default: benchmarks/results/bench_memory_tool.json)",
    )
    parser.add_argument("--dir", default=None, help="work directory (default: a fresh temporary one)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.quick:
        args.ops, args.seed_files, args.mixed_ops, args.big_dir = 5, 20, 30, 100

    workdir = tempfile.mkdtemp(prefix="mnemo-bench-", dir=args.dir)
    try:
        client = MnemoClient(os.path.join(workdir, "bench.mnemo.db"), "bench")  # durable default: fsync
        mnemo_tool = MnemoMemoryTool(MnemoMemoryToolServer(client))
        ref_tool = BetaLocalFilesystemMemoryTool(base_path=os.path.join(workdir, "ref"))
        systems = [
            Workload("mnemo", mnemo_tool, random.Random(args.seed)),
            Workload("reference", ref_tool, random.Random(args.seed)),
        ]
        for system in systems:
            system.seed(args.seed_files)
        results: dict[str, Any] = {
            "meta": {
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "mnemo_durability": "fsync",
                "interface": "SDK tool .call(input) (MnemoMemoryTool / BetaLocalFilesystemMemoryTool)",
                "ops_per_command": args.ops,
                "working_set_files": args.seed_files,
                "workdir_fs": workdir,
            },
            "latency": latency(systems, args.ops),
            "mixed": mixed(systems, args.mixed_ops, args.seed),
        }
        client.close()
        results["big_directory"] = big_directory(workdir, args.big_dir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(results))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w", encoding="utf-8") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"\nresults written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
