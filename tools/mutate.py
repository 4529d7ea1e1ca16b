"""Mutation testing: change one small thing in a module, run the tests that exercise it, see if they notice.

    python tools/mutate.py --list                    # the targets (tools/mutation/targets.json)
    python tools/mutate.py acl.names                 # mutate one target against its test selection
    python tools/mutate.py acl.names paths --max 80  # several targets, at most 80 mutants each
    python tools/mutate.py mnemo/validation.py --tests tests/contract/test_bad_input.py
    python tools/mutate.py acl.names --rerun before.txt   # only the survivors a report lists
    python tools/mutate.py file.index --covered      # each mutant against the tests that execute it
    python tools/mutate.py --check                   # every listed equivalent and target path still exists

Each mutant is one of the operator classes below, applied to a copy of the source tree in a scratch
directory (the checkout is never written), and judged by running the target's tests in a subprocess
(`pytest -x`, with a timeout) against that copy: a failing or timed-out run kills it. The kill rate counts
only mutants not listed as equivalent in tools/mutation/equivalent.json, each named by what survives an edit
elsewhere in its file: the function it is in, the text of its line and the mutation (see `EquivalentKey`).
Where a module has more mutants than `--max`, an even sample over the file is taken (every k-th, in
source order), so a rerun picks the same ones. The summary, and each survivor with its file:line and the
mutation, go to stdout; `--report FILE` also writes them, with the exact test selection, to a file.

Operators: `cmp` (< and <=, > and >=, == and !=, in and not in, is and is not, each into the other),
`const` (an int ±1, True and False swapped, a bytes constant's last byte changed), `raise` (a raise
replaced by `pass`), `boolop` (and/or swapped), `not` (an if/while/ternary condition negated, a `not`
removed), `return` (the value of a return replaced by None), `slice` (a slice bound that is not a literal
moved by ±1), `arith` (+ and - swapped). A line ending in `# pragma: no mutate` is left alone, and so are
`if TYPE_CHECKING:` blocks, `__all__` and annotations.

Not part of the default test run: it runs the selected tests once per mutant, so a target takes minutes.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import dataclasses
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "tools" / "mutation"
TARGETS = HERE / "targets.json"
EQUIVALENT = HERE / "equivalent.json"
# What the scratch copy holds: the package, its tests and whatever the tests read from the checkout.
COPIED = ("mnemo", "tests", "docs", "examples", "benchmarks", "tools", "pyproject.toml", "README.md",
          "CHANGELOG.md", "LICENSE")
NO_MUTATE = "pragma: no mutate"

_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}
_CMP_TEXT: dict[type[ast.cmpop], str] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}


@dataclass(frozen=True)
class Mutant:
    """One mutation site: the `index`-th node of a walk, and what is done to it."""

    index: int  # position of the node in ast.walk order
    line: int
    col: int
    kind: str
    detail: str
    variant: int = 0  # which of the node's mutations (e.g. +1 or -1)
    span: tuple[int, int] = (0, 0)  # the lines whose execution runs the mutated code (for --covered)
    where: str = "<module>"  # the qualified name of the function or class it is in
    code: str = ""  # the text of its line, stripped
    nth: int = 1  # which of the mutants with the same where, code, kind and detail (in source order)

    @property
    def key(self) -> str:
        """Where it is now: what a report prints, and what --line and --rerun take."""
        return f"{self.line}:{self.col} {self.kind} {self.detail}"

    @property
    def mutation(self) -> str:
        return f"{self.kind} {self.detail}"

    def stable_key(self, relpath: str) -> EquivalentKey:
        """What names it in the equivalents list: unchanged by edits that only move its line."""
        return EquivalentKey(relpath, self.where, self.code, self.mutation, self.nth)


@dataclass(frozen=True)
class EquivalentKey:
    """A mutant as equivalent.json names it: its file, the function (or class, or <module>) it is in,
    the text of its line and the mutation, and `nth` where that line holds the same mutation more than
    once in that function. Lines added or removed around it leave it as it is; an edit of its own line,
    or a move to another function, makes it a new mutant, to be judged again."""

    file: str
    where: str
    code: str
    mutation: str
    nth: int = 1


# -- finding the sites --------------------------------------------------------------------------------------


def _skipped_nodes(tree: ast.Module) -> set[int]:
    """ids of nodes never mutated: annotations, TYPE_CHECKING blocks, __all__, docstrings."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            mark(node.returns)
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs,
                        node.args.vararg, node.args.kwarg]:
                if arg is not None:
                    mark(arg.annotation)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        elif _never_mutated(node):
            mark(node)
    return skip


def _never_mutated(node: ast.AST) -> bool:
    """An `if TYPE_CHECKING:` block or the `__all__` list."""
    if isinstance(node, ast.If):
        return ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
    return isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets)


def _sites(node: ast.AST) -> Iterator[tuple[str, str, int]]:
    """(kind, detail, variant) for every mutation of this one node."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            swapped = _CMP_SWAP[type(op)]
            which = f" (comparison {i + 1} of {len(node.ops)})" if len(node.ops) > 1 else ""
            yield "cmp", f"{_CMP_TEXT[type(op)]} -> {_CMP_TEXT[swapped]}{which}", i
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            yield "const", f"{value} -> {not value}", 0
        elif isinstance(value, int):
            yield "const", f"{value} -> {value + 1}", 1
            yield "const", f"{value} -> {value - 1}", -1
        elif isinstance(value, bytes) and value:
            yield "const", f"{value!r} -> last byte changed", 0
    elif isinstance(node, ast.Raise):
        yield "raise", "raise -> pass", 0
    elif isinstance(node, ast.BoolOp):
        yield "boolop", "and -> or" if isinstance(node.op, ast.And) else "or -> and", 0
    elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
        if not (isinstance(node.test, ast.UnaryOp) and isinstance(node.test.op, ast.Not)):  # removing it does that
            yield "not", f"{type(node).__name__.lower()} condition negated", 0
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not", "`not` removed", 0
    elif isinstance(node, ast.Return) and node.value is not None and not (
            isinstance(node.value, ast.Constant) and node.value.value is None):
        yield "return", "return value -> None", 0
    elif isinstance(node, ast.Slice):
        for name in ("lower", "upper"):
            bound = getattr(node, name)
            if bound is not None and not isinstance(bound, (ast.Constant, ast.UnaryOp)):
                yield "slice", f"{name} bound +1", 1 if name == "lower" else 2
                yield "slice", f"{name} bound -1", -1 if name == "lower" else -2
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        yield "arith", "+ -> -" if isinstance(node.op, ast.Add) else "- -> +", 0


def _statement_lines(tree: ast.Module) -> dict[int, int]:
    """id(node) -> the first line of the innermost statement holding it: coverage records a statement's
    execution on its first line, which may not be the line of a node inside it."""
    first: dict[int, int] = {}

    def visit(node: ast.AST, line: int) -> None:
        if isinstance(node, ast.stmt):
            line = node.lineno
        first[id(node)] = line
        for child in ast.iter_child_nodes(node):
            visit(child, line)

    visit(tree, 1)
    return first


def _span(node: ast.AST, statement_line: int) -> tuple[int, int]:
    """The lines whose execution runs `node`: from its statement's first line (or the node's, for a
    decorator, which comes before the `def` or `class` line a statement's number is) to the node's end
    (for a condition negated on an if or a while, the end of its test, not of its body)."""
    end = node.test if isinstance(node, (ast.If, ast.While)) else node
    first = min(statement_line, getattr(node, "lineno", statement_line))
    return first, max(first, getattr(end, "end_lineno", None) or statement_line)


def _qualified_names(tree: ast.Module) -> dict[int, str]:
    """id(node) -> the qualified name of the innermost function or class whose body holds it (<module>
    if none). A def's decorators, defaults and annotations run where the def stands: they are outside."""
    names: dict[int, str] = {}

    def visit(node: ast.AST, name: str) -> None:
        names[id(node)] = name
        body: set[int] = set()
        inner = name
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner = node.name if name == "<module>" else f"{name}.{node.name}"
            body = {id(stmt) for stmt in node.body}
        for child in ast.iter_child_nodes(node):
            visit(child, inner if id(child) in body else name)

    visit(tree, "<module>")
    return names


def find_mutants(source: str) -> list[Mutant]:
    tree = ast.parse(source)
    lines = source.splitlines()
    skip = _skipped_nodes(tree)
    statement = _statement_lines(tree)
    where = _qualified_names(tree)
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    out: list[Mutant] = []
    for index, node in enumerate(ast.walk(tree)):
        if id(node) in skip or id(node) in docstrings or not hasattr(node, "lineno"):
            continue
        if NO_MUTATE in lines[node.lineno - 1]:
            continue
        span = _span(node, statement[id(node)])
        code = lines[node.lineno - 1].strip()
        for kind, detail, variant in _sites(node):
            out.append(Mutant(index, node.lineno, node.col_offset, kind, detail, variant, span, where[id(node)], code))
    out.sort(key=lambda m: (m.line, m.col, m.kind, m.variant))
    seen: dict[tuple[str, str, str], int] = {}
    for i, m in enumerate(out):
        same = (m.where, m.code, m.mutation)
        seen[same] = seen.get(same, 0) + 1
        if seen[same] > 1:
            out[i] = dataclasses.replace(m, nth=seen[same])
    return out


# -- applying one --------------------------------------------------------------------------------------------


def _plus(expr: ast.expr, delta: int) -> ast.expr:
    op: ast.operator = ast.Add() if delta > 0 else ast.Sub()
    return ast.BinOp(left=expr, op=op, right=ast.Constant(abs(delta)))


def _mutate_node(node: ast.AST, mutant: Mutant) -> ast.AST:
    if isinstance(node, ast.Compare):
        ops = list(node.ops)
        ops[mutant.variant] = _CMP_SWAP[type(ops[mutant.variant])]()
        node.ops = ops
    elif isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            node.value = not value
        elif isinstance(value, int):
            node.value = value + mutant.variant
        elif isinstance(value, bytes):
            node.value = value[:-1] + bytes([(value[-1] + 1) % 256])
    elif isinstance(node, ast.Raise):
        return ast.Pass()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
        node.test = ast.UnaryOp(op=ast.Not(), operand=node.test)
    elif isinstance(node, ast.UnaryOp):
        return node.operand
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)
    elif isinstance(node, ast.Slice):
        name = "lower" if abs(mutant.variant) == 1 else "upper"
        setattr(node, name, _plus(getattr(node, name), 1 if mutant.variant > 0 else -1))
    elif isinstance(node, ast.BinOp):
        node.op = ast.Sub() if isinstance(node.op, ast.Add) else ast.Add()
    return node


def apply(source: str, mutant: Mutant) -> str:
    """The module's source with `mutant` applied (unparsed: comments and layout are not kept)."""
    tree = ast.parse(source)
    target = next(node for i, node in enumerate(ast.walk(tree)) if i == mutant.index)

    class Swap(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            if node is target:
                return _mutate_node(copy.copy(node), mutant)
            return super().visit(node)

    mutated = ast.fix_missing_locations(Swap().visit(tree))
    return ast.unparse(mutated) + "\n"


def sample(mutants: list[Mutant], limit: int | None, shift: float = 0.0) -> list[Mutant]:
    """At most `limit` mutants spread evenly over the file (every k-th in source order), starting
    `shift` (a fraction of k) in: another shift picks other mutants, for a second, independent sample."""
    if limit is None or len(mutants) <= limit:
        return mutants
    step = len(mutants) / limit
    return [mutants[int((i + shift) * step)] for i in range(limit)]


# -- running the tests ---------------------------------------------------------------------------------------


class Sandbox:
    """A scratch copy of the checkout the tests run against; one mutated file at a time."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="mnemo-mutate-"))
        for name in COPIED:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, self.dir / name, ignore=shutil.ignore_patterns(
                    "__pycache__", "*.pyc", ".hypothesis", "results", "*.egg-info"))
            elif src.exists():
                shutil.copy2(src, self.dir / name)
        # A failing hypothesis test would spend its time shrinking: a mutant needs only the failure.
        (self.dir / "_mutation_plugin.py").write_text(
            "from hypothesis import Phase, settings\n"
            "settings.register_profile('mutation', phases=[Phase.explicit, Phase.reuse, Phase.generate])\n"
            "settings.load_profile('mutation')\n", encoding="utf-8")
        (self.dir / "_mutation_coverage.py").write_text(COVERAGE_PLUGIN, encoding="utf-8")
        self.env = dict(os.environ, PYTHONPATH=str(self.dir), PYTHONDONTWRITEBYTECODE="1")
        self.proc: subprocess.Popen[bytes] | None = None  # the test run in progress, if any

    def run(self, tests: list[str], extra: list[str], timeout: float,
            plugins: tuple[str, ...] = ()) -> tuple[str, float]:
        """('passed' | 'failed' | 'timeout', seconds) for one run of the test selection (paths, or test
        ids, which go to pytest in a file: there can be thousands)."""
        if any("::" in t for t in tests):
            (self.dir / "_mutation_tests.txt").write_text("\n".join(tests) + "\n", encoding="utf-8")
            tests = ["@_mutation_tests.txt"]
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "--no-header",
               "-p", "_mutation_plugin", *(a for p in plugins for a in ("-p", p)), "-W", "ignore", *extra, *tests]
        start = time.monotonic()
        proc = self.proc = subprocess.Popen(cmd, cwd=self.dir, env=self.env, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the run's own process group: its test servers too
            proc.wait()
            return "timeout", time.monotonic() - start
        except BaseException:  # interrupted: leave no test run behind
            self.kill()
            raise
        finally:
            self.proc = None
        return ("passed" if code == 0 else "failed"), time.monotonic() - start

    def kill(self) -> None:
        """End the test run in progress (another thread's, when the run as a whole is interrupted)."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def clone(self) -> Sandbox:
        """Another scratch copy holding what this one holds (for a second job at a time)."""
        other = Sandbox.__new__(Sandbox)
        other.dir = Path(tempfile.mkdtemp(prefix="mnemo-mutate-"))
        shutil.copytree(self.dir, other.dir, dirs_exist_ok=True)
        other.env = dict(self.env, PYTHONPATH=str(other.dir))
        other.proc = None
        return other

    def write(self, relpath: str, text: str) -> None:
        (self.dir / relpath).write_text(text, encoding="utf-8")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# -- which tests reach which lines (--covered) ---------------------------------------------------------------

# Loaded into the one run of the selection under coverage: each test's lines are recorded under its id,
# and a test that starts another process (whose lines coverage does not see here) is named as such.
COVERAGE_PLUGIN = '''
import importlib, json, os, subprocess
import coverage, pytest

_cov = coverage.Coverage(data_file=os.environ["MNEMO_MUTATE_COVERAGE"], config_file=False,
                         include=json.loads(os.environ["MNEMO_MUTATE_FILES"]))
_current = [""]
_order = []  # the test ids in the order they ran
_spawners = []


def _wrap(owner, name):
    real = getattr(owner, name, None)
    if real is not None:
        def spawn(*args, **kwargs):
            if _current[0] and _current[0] not in _spawners:
                _spawners.append(_current[0])
            return real(*args, **kwargs)
        setattr(owner, name, spawn)


_wrap(subprocess.Popen, "__init__")
for _name in ("fork", "posix_spawn", "posix_spawnp", "forkpty"):
    _wrap(os, _name)
_cov.start()
# The mutated modules are imported now, outside every test: a module the package imports lazily would
# otherwise run its import-time lines (constants, decorators, defaults) inside the first test that needs
# it, and they would count as reached by that test alone, though every later test depends on them.
for _path in json.loads(os.environ["MNEMO_MUTATE_FILES"]):
    _module = os.path.relpath(_path)[:-3].replace(os.sep, ".")
    importlib.import_module(_module[: -len(".__init__")] if _module.endswith(".__init__") else _module)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item.nodeid
    _order.append(item.nodeid)
    _cov.switch_context(item.nodeid)
    yield
    _current[0] = ""
    _cov.switch_context("")


def pytest_unconfigure(config):
    _cov.stop()
    _cov.save()
    with open(os.environ["MNEMO_MUTATE_COVERAGE"] + ".tests", "w", encoding="utf-8") as f:
        json.dump({"order": _order, "spawners": _spawners}, f)
'''


@dataclass
class Reach:
    """What one run of a selection under coverage found: for each file, the tests (ids, in run order)
    that executed each line, the lines executed outside any test (imports, definitions), and the tests
    that started other processes."""

    order: dict[str, int]
    lines: dict[str, dict[int, set[str]]]
    outside: dict[str, set[int]]
    spawners: list[str]

    def tests_for(self, relpath: str, mutant: Mutant) -> list[str] | None:
        """The tests that can tell this mutant from the original, in run order; None for the whole
        selection (the mutated line runs when the module is imported, before any test)."""
        first, last = mutant.span
        span = range(first, last + 1)
        if any(n in self.outside.get(relpath, ()) for n in span):
            return None
        by_line = self.lines.get(relpath, {})
        tests = set(self.spawners).union(*(by_line.get(n, set()) for n in span))
        return sorted(tests, key=self.order.__getitem__)


def measure_reach(target: Target, box: Sandbox) -> Reach:
    import coverage  # a tool dependency (the dev extra), only for --covered

    data_file = box.dir / "_mutation.coverage"
    box.env["MNEMO_MUTATE_COVERAGE"] = str(data_file)
    box.env["MNEMO_MUTATE_FILES"] = json.dumps([str(box.dir / f) for f in target.files])
    try:
        result, _seconds = box.run(target.tests, target.extra, timeout=3600, plugins=("_mutation_coverage",))
    finally:
        del box.env["MNEMO_MUTATE_COVERAGE"], box.env["MNEMO_MUTATE_FILES"]
    if result != "passed":
        raise SystemExit(f"{target.name}: the test selection does not pass under coverage ({result})")
    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    ran = json.loads(Path(f"{data_file}.tests").read_text(encoding="utf-8"))
    lines: dict[str, dict[int, set[str]]] = {}
    outside: dict[str, set[int]] = {}
    for relpath in target.files:
        by_line = data.contexts_by_lineno(str(box.dir / relpath))
        lines[relpath] = {n: {c for c in ctx if c} for n, ctx in by_line.items()}
        outside[relpath] = {n for n, ctx in by_line.items() if "" in ctx}
    return Reach({t: i for i, t in enumerate(ran["order"])}, lines, outside, ran["spawners"])


# -- targets, equivalents, the report ------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    files: list[str]
    tests: list[str]
    extra: list[str]
    max: int | None


def load_targets() -> dict[str, Target]:
    raw = json.loads(TARGETS.read_text(encoding="utf-8"))
    return {name: Target(name, t["files"], t["tests"], t.get("pytest_args", []), t.get("max"))
            for name, t in raw.items() if not name.startswith("_")}


def missing_paths(targets: dict[str, Target]) -> list[str]:
    """Each file or test a target names that the checkout no longer has (a module or test file moved)."""
    out = []
    for t in targets.values():
        for path in [*t.files, *t.tests]:
            if not (ROOT / path.split("::")[0]).exists():
                out.append(f"{t.name}: {path}")
    return out


def load_equivalent(path: Path | None = None) -> dict[EquivalentKey, str]:
    """{key: why} from equivalent.json: a list of objects, one a line, each with `file`, `in` (the
    function), `code` (its line's text), `mutant` (kind and detail, as a report prints them), `why`,
    and `nth` where it is not the first of its kind on that line in that function."""
    entries = json.loads((path or EQUIVALENT).read_text(encoding="utf-8"))
    out: dict[EquivalentKey, str] = {}
    for e in entries:
        key = EquivalentKey(e["file"], e["in"], e["code"], e["mutant"], e.get("nth", 1))
        if key in out:
            raise SystemExit(f"equivalent.json lists {key} twice")
        if not e.get("why"):
            raise SystemExit(f"equivalent.json lists {key} with no reason")
        out[key] = e["why"]
    return out


def equivalent_entry(key: EquivalentKey, why: str) -> str:
    """One line of equivalent.json."""
    entry: dict[str, object] = {"file": key.file, "in": key.where, "code": key.code, "mutant": key.mutation}
    if key.nth != 1:
        entry["nth"] = key.nth
    entry["why"] = why
    return json.dumps(entry, ensure_ascii=False)


def stale_equivalents(equivalent: dict[EquivalentKey, str], root: Path | None = None) -> list[EquivalentKey]:
    """The listed keys that name no mutant of the code as it is: their line was edited, or went (judge
    the mutants of the new line again, and remove the entry)."""
    base = root or ROOT
    found: dict[str, set[EquivalentKey]] = {}
    stale = []
    for key in equivalent:
        if key.file not in found:
            source = base / key.file
            found[key.file] = ({m.stable_key(key.file) for m in find_mutants(source.read_text(encoding="utf-8"))}
                               if source.is_file() else set())
        if key not in found[key.file]:
            stale.append(key)
    return stale


def _split_key(key: str) -> tuple[str, int, str] | None:
    """("file", line, "col kind detail") of a report's key `file:line:col kind detail`, or None."""
    where, space, rest = key.partition(" ")
    path, _, pos = where.rpartition(":")
    path, _, line = path.rpartition(":")
    if not space or not path or not line.isdigit():
        return None
    return path, int(line), f"{pos} {rest}"


def line_map(rev: str, path: str) -> dict[int, int]:
    """Line numbers of `path` at git revision `rev` -> its line numbers now, for the lines an edit
    since has moved but left as they were (a changed or removed line has none)."""
    import difflib

    old = subprocess.run(["git", "show", f"{rev}:{path}"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    new = (ROOT / path).read_text(encoding="utf-8").splitlines()
    moved: dict[int, int] = {}
    for block in difflib.SequenceMatcher(None, old, new, autojunk=False).get_matching_blocks():
        moved.update({block.a + i + 1: block.b + i + 1 for i in range(block.size)})
    return moved


def moved_keys(keys: list[str], rev: str) -> dict[str, str | None]:
    """Each of `keys` -> the same key with its line moved from the code at `rev` to the code now, or
    None when its line changed or went since (it cannot be moved). Each file is diffed once."""
    maps: dict[str, dict[int, int]] = {}
    out: dict[str, str | None] = {}
    for key in keys:
        parts = _split_key(key)
        if parts is None:
            out[key] = None
            continue
        path, line, rest = parts
        if path not in maps:
            maps[path] = line_map(rev, path)
        now = maps[path].get(line)
        out[key] = None if now is None else f"{path}:{now}:{rest}"
    return out


def code_revision() -> str:
    """The commit the checkout is at, and whether the package differs from it (then a report's line
    numbers are those of uncommitted code, and a later --rerun can move them only approximately)."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "mnemo"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    return head + (" with uncommitted changes" if dirty else "")


@dataclass
class Outcome:
    file: str
    mutant: Mutant
    result: str  # killed, timeout, survived, equivalent, invalid
    seconds: float


def survivors_of(report: Path, rev: str | None = None, log: Callable[[str], None] = print) -> set[str]:
    """The keys (`file:line:col kind detail`) a report lists as survivors, with their lines moved to
    the code as it is now from the revision the report ran on (its `code:` line, or `rev`)."""
    marker, code = "SURVIVED ", "code: "
    lines = [line.strip() for line in report.read_text(encoding="utf-8").splitlines()]
    keys = [line[len(marker):] for line in lines if line.startswith(marker)]
    if rev is None:
        rev = next((line[len(code):].split()[0] for line in lines if line.startswith(code)), None)
    if rev is None:
        return set(keys)
    moved = moved_keys(keys, rev)
    for key, now in moved.items():
        if now is None:
            log(f"not rerun: the line of {key} changed since {rev[:12]} (judge it again with --line)")
    return {now for now in moved.values() if now is not None}


def run_target(target: Target, box: Sandbox, equivalent: dict[EquivalentKey, str], only: set[int] | None,
               log: Callable[[str], None], keys: set[str] | None = None, from_line: int = 0,
               shift: float = 0.0, covered: bool = False, jobs: int = 1) -> tuple[list[Outcome], float, list[str]]:
    base, seconds = box.run(target.tests, target.extra, timeout=1800)
    if base != "passed":
        raise SystemExit(f"{target.name}: the test selection does not pass unmutated ({base}); fix that first")
    timeout = max(30.0, 4 * seconds)
    log(f"{target.name}: unmutated run {seconds:.1f}s, timeout per mutant {timeout:.0f}s")
    reach = measure_reach(target, box) if covered else None
    outcomes: list[Outcome] = []
    used: list[EquivalentKey] = []
    # Each job runs its mutants in a scratch copy of its own, made from the first (the copy the
    # unmutated and coverage runs used); a copy returns to the pool with its file restored.
    boxes = [box] + [box.clone() for _ in range(jobs - 1)]
    pool: queue.SimpleQueue[Sandbox] = queue.SimpleQueue()
    for b in boxes:
        pool.put(b)
    try:
        for relpath in target.files:
            # the copy the tests (and the coverage run) ran against: the checkout may have changed since
            original = (box.dir / relpath).read_text(encoding="utf-8")
            found = find_mutants(original)
            # A rerun looks for the mutants its report names among all of them: an edit to the file since
            # may have moved what an even sample picks.
            chosen = found if keys is not None else sample(found, target.max, shift)
            if only is not None:
                chosen = [m for m in chosen if m.line in only]
            if keys is not None:  # (reports older than the "(comparison i of n)" suffix name a chain's mutants alike)
                chosen = [m for m in chosen if f"{relpath}:{m.key}" in keys
                          or f"{relpath}:{m.key}".split(" (comparison ")[0] in keys]
            chosen = [m for m in chosen if m.line >= from_line]
            judged: dict[int, Outcome] = {}

            def judge(n: int, mutant: Mutant, text: str, tests: list[str] | None,
                      relpath: str = relpath, original: str = original, total: int = len(chosen)) -> Outcome:
                mine = pool.get()  # a copy is free whenever a job runs: there are as many as jobs
                try:
                    mine.write(relpath, text)
                    result, took = mine.run(target.tests if tests is None else tests, target.extra, timeout)
                finally:
                    mine.write(relpath, original)
                    pool.put(mine)
                verdict = {"passed": "survived", "failed": "killed", "timeout": "timeout"}[result]
                what = "" if tests is None or reach is None else f", {len(tests)} tests"
                log(f"  [{n}/{total}] {relpath}:{mutant.line} {mutant.kind} {mutant.detail}: {verdict}"
                    f" ({took:.1f}s{what})")
                return Outcome(relpath, mutant, verdict, took)

            with ThreadPoolExecutor(max_workers=jobs) as executor:
                futures: dict[int, Future[Outcome]] = {}
                try:
                    for n, mutant in enumerate(chosen, 1):
                        key = mutant.stable_key(relpath)
                        if key in equivalent:
                            used.append(key)
                            judged[n] = Outcome(relpath, mutant, "equivalent", 0.0)
                            continue
                        text = apply(original, mutant)
                        try:
                            compile(text, relpath, "exec")
                        except SyntaxError:
                            judged[n] = Outcome(relpath, mutant, "invalid", 0.0)
                            continue
                        tests = target.tests if reach is None else reach.tests_for(relpath, mutant)
                        if tests == []:  # no test runs the line: nothing can tell the mutant apart
                            judged[n] = Outcome(relpath, mutant, "survived", 0.0)
                            log(f"  [{n}/{len(chosen)}] {relpath}:{mutant.line} {mutant.kind} {mutant.detail}: "
                                "survived (no test reaches it)")
                            continue
                        futures[n] = executor.submit(judge, n, mutant, text, tests)
                    for n, future in futures.items():
                        judged[n] = future.result()
                except BaseException:  # interrupted, or a run that could not start: stop every job
                    for future in futures.values():
                        future.cancel()
                    for b in boxes:
                        b.kill()
                    raise
            outcomes.extend(judged[n] for n in sorted(judged))
    finally:
        for b in boxes[1:]:
            b.close()
    return outcomes, seconds, used


def summarize(target: Target, outcomes: list[Outcome], base_seconds: float) -> list[str]:
    count = {k: sum(o.result == k for o in outcomes) for k in
             ("killed", "timeout", "survived", "equivalent", "invalid")}
    judged = count["killed"] + count["timeout"] + count["survived"]
    rate = 100.0 * (count["killed"] + count["timeout"]) / judged if judged else 100.0
    lines = [
        f"## {target.name}: {rate:.1f}% killed of {judged} non-equivalent mutants",
        f"files: {' '.join(target.files)}",
        f"tests: {' '.join(target.tests)} {' '.join(target.extra)}".rstrip(),
        f"mutants {len(outcomes)} (max {target.max} per file), killed {count['killed']}, timeout "
        f"{count['timeout']}, survived {count['survived']}, equivalent {count['equivalent']}, "
        f"invalid {count['invalid']}; unmutated run {base_seconds:.1f}s",
    ]
    for o in outcomes:
        if o.result == "survived":
            # the second line is the entry to add to equivalent.json, once the mutant is shown equivalent
            lines.append(f"  SURVIVED {o.file}:{o.mutant.key}")
            lines.append(f"    {equivalent_entry(o.mutant.stable_key(o.file), 'WHY')}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("targets", nargs="*", help="target names from targets.json, or module paths")
    parser.add_argument("--tests", nargs="+", help="the test selection (default: the target's)")
    parser.add_argument("--max", type=int, help="at most this many mutants per file (even sample)")
    parser.add_argument("--shift", type=float, default=0.0,
                        help="start the even sample this fraction of a step in (0 to below 1; 0: the first)")
    parser.add_argument("--line", type=int, action="append", help="only the mutants on this line")
    parser.add_argument("--from-line", type=int, default=0, help="only the mutants on this line or after it")
    parser.add_argument("--rerun", type=Path, metavar="REPORT",
                        help="only the mutants a report (--report) lists as survivors")
    parser.add_argument("--rerun-from", metavar="REV",
                        help="the git revision the --rerun report ran on, for a report without a code: line")
    parser.add_argument("--list", action="store_true", help="list the targets and their mutant counts")
    parser.add_argument("--report", type=Path, help="also write the summary to this file")
    parser.add_argument("--quiet", action="store_true", help="no per-mutant progress on stderr")
    parser.add_argument("--covered", action="store_true",
                        help="run, for each mutant, only the tests that execute its lines (and those that "
                             "start other processes), found by one run of the selection under coverage")
    parser.add_argument("--jobs", type=int, default=1,
                        help="judge this many mutants at a time, each in a scratch copy of its own (at most "
                             "the number of cores: the timeout is set by the unmutated run, made alone)")
    parser.add_argument("--check", action="store_true",
                        help="name each mutant equivalent.json lists that the code no longer has (its line "
                             "was edited or removed: judge the new line again) and each path targets.json "
                             "names that is not there, and stop; exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_equivalents(load_equivalent())
        for key in stale:
            print(f"no longer in the code: {equivalent_entry(key, '...')}")
        print(f"{len(load_equivalent())} listed, {len(stale)} no longer in the code")
        missing = missing_paths(load_targets())
        for where in missing:
            print(f"targets.json names a path that is not there: {where}")
        return 1 if stale or missing else 0
    if not 0.0 <= args.shift < 1.0:
        parser.error("--shift must be at least 0 and below 1")
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    targets = load_targets()
    if args.list or not args.targets:
        for t in targets.values():
            total = sum(len(find_mutants((ROOT / f).read_text(encoding="utf-8"))) for f in t.files)
            print(f"{t.name:22} {total:4} mutants (max {t.max} per file)  {' '.join(t.files)}")
        return 0
    chosen: list[Target] = []
    for name in args.targets:
        if name in targets:
            t = targets[name]
        elif (ROOT / name).is_file():
            t = Target(name, [name], [], [], None)
        else:
            parser.error(f"no target or file named {name!r}")
        if args.tests:
            t.tests = args.tests
        if args.max is not None:
            t.max = args.max
        if not t.tests:
            parser.error(f"{name}: no test selection (give --tests)")
        chosen.append(t)
    equivalent = load_equivalent()

    def log(text: str) -> None:
        if not args.quiet:
            print(text, file=sys.stderr, flush=True)

    # A background job ignores SIGINT: make SIGTERM unwind too, so the scratch copy is removed.
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    rerun = survivors_of(args.rerun, args.rerun_from, log) if args.rerun else None
    box = Sandbox()
    report: list[str] = [f"# mutation run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
                         f"command: python tools/mutate.py {' '.join(argv if argv is not None else sys.argv[1:])}",
                         f"code: {code_revision()}"]
    survivors = 0
    try:
        for t in chosen:
            for key in stale_equivalents({k: w for k, w in equivalent.items() if k.file in t.files}):
                log(f"listed, but no longer in the code (its line was edited: judge it again): {key}")
            outcomes, base, _ = run_target(t, box, equivalent, set(args.line) if args.line else None, log,
                                           rerun, args.from_line, args.shift, args.covered, args.jobs)
            lines = summarize(t, outcomes, base)
            survivors += sum(o.result == "survived" for o in outcomes)
            print("\n".join(lines), flush=True)
            report.extend(lines)
    finally:
        box.close()
    if args.report:
        args.report.write_text("\n".join(report) + "\n", encoding="utf-8")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
