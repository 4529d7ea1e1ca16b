"""The README's command table and the command line agree: every command it names exists, with the
options it shows, and every command exists in it. And every shell block of the README runs as a newcomer
pastes it, in order, in a fresh environment, on the database it names."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import pytest
from helpers.paths import ROOT

from mnemo.cli import cli
from mnemo.cli.transparency import NO_CHECKPOINT_OF_KEY

README = ROOT / "README.md"


def table_rows() -> list[str]:
    """The first cell of each row of the table under `## The command line`."""
    text = README.read_text(encoding="utf-8")
    section = text.split("## The command line\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `mnemo")]
    assert rows, "the README's command table is gone"
    return [re.match(r"\| `([^`]+)`", row).group(1) for row in rows]  # type: ignore[union-attr]


def resolve(words: list[str]) -> tuple[tuple[str, ...], click.Command]:
    """The command a row names: `mnemo` and its lowercase words, down the groups."""
    command: click.Command = cli
    path: list[str] = []
    for word in words:
        if not isinstance(command, click.Group) or not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        sub = command.commands.get(word)
        assert sub is not None, f"the README names `mnemo {' '.join([*path, word])}`, which does not exist"
        command, path = sub, [*path, word]
    return tuple(path), command


def leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for name, command in group.commands.items():
        out |= leaf_commands(command, (*prefix, name)) if isinstance(command, click.Group) else {(*prefix, name)}
    return out


def test_every_command_in_the_readme_table_exists_with_its_options() -> None:
    named = set()
    for row in table_rows():
        words = row.split()
        assert words[0] == "mnemo", row
        path, command = resolve(words[1:])
        assert path and not isinstance(command, click.Group), f"`{row}` names no command"
        named.add(path)
        options = {opt for p in command.params for opt in getattr(p, "opts", ())}
        for option in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", row):
            assert option in options, f"`{row}`: mnemo {' '.join(path)} has no {option}"
    assert len(named) == len(table_rows()), "a command has two rows"


def test_every_command_is_in_the_readme_table() -> None:
    named = {resolve(row.split()[1:])[0] for row in table_rows()}
    missing = leaf_commands(cli) - named
    assert not missing, f"add a row to the README's command table for: {sorted(' '.join(p) for p in missing)}"


# -- every shell block of the README runs as pasted ---------------------------------------------------------

# A block the README cannot have run here says so just above its fence, visibly in the source:
# `<!-- readme-test: skip: WHY -->`. A python block is run only where it says `<!-- readme-test: run -->`
# (most are fragments of a program); bash blocks are all run unless marked.
MARK = re.compile(r"<!-- readme-test: (skip|run)(?:: (.+?))? -->")
# A skipped `claude mcp add NAME -- COMMAND` block: Claude Code would start COMMAND and write memories
# through it. The test does that much with the MCP SDK's client, so that the blocks after it (what did
# Claude remember?) run on the database it names.
CLAUDE_ADD = re.compile(r"^claude mcp add \S+ -- (.+)$", re.M)
STAND_IN = """
import sys
import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

async def main(command):
    server = StdioServerParameters(command="bash", args=["-c", "exec " + command])
    async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for name, arguments in [
            ("memory_create", {"path": "/memories/user.md", "file_text": "The user prefers trains.\\n"}),
            ("memory_str_replace", {"path": "/memories/user.md", "old_str": "trains", "new_str": "night trains"}),
        ]:
            result = await session.call_tool(name, arguments)
            assert not result.is_error, result.content

anyio.run(main, sys.argv[1])
"""


@dataclass(frozen=True)
class Block:
    name: str  # the section's heading and the block's number in it, e.g. "Install #1"
    lang: str
    code: str
    skip: str | None
    run: bool


def readme_blocks() -> list[Block]:
    blocks: list[Block] = []
    section, count, mark = "(top)", 0, None
    lines = README.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            section, count = line.lstrip("#").strip(), 0
        elif found := MARK.fullmatch(line.strip()):
            mark = found
        elif line.startswith("```") and len(line) > 3:
            end = lines.index("```", i + 1)
            count += 1
            lang = line[3:].strip()
            skip = mark.group(2) if mark and mark.group(1) == "skip" else None
            assert not (mark and mark.group(1) == "skip" and not skip), f"{section} #{count}: say why it is skipped"
            blocks.append(Block(f"{section} #{count}", lang, "\n".join(lines[i + 1:end]) + "\n", skip,
                                bool(mark and mark.group(1) == "run")))
            mark, i = None, end
        elif line.strip():
            mark = None  # a mark holds for the block right below it only
        i += 1
    return blocks


SHELL_BLOCKS = [b for b in readme_blocks() if b.lang in ("bash", "sh", "shell", "console")]


@dataclass
class Outcome:
    code: int
    output: str


def _checkout_copy(dest: Path) -> Path:
    """What a newcomer has: the checkout's files, without what a build, a venv or a run left in it."""
    ignore = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.so", "build", "dist", "*.egg-info",
                                    ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", "results",
                                    "*.mnemo.db*", "*.note", "*.tlog-proof", "mnemo-key*")
    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    """Every runnable block of the README, in order, as a newcomer pastes them: in a fresh virtual
    environment, in a fresh copy of the checkout, with a home folder of its own. Stops at the first block
    that fails (the ones after it depend on it)."""
    base = tmp_path_factory.mktemp("readme")
    checkout = _checkout_copy(base / "mnemo")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    (base / "home").mkdir()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "MNEMO_AGENT", "MNEMO_PURE_PYTHON", "XDG_DATA_HOME", "PYTHONHOME")}
    env.update(HOME=str(base / "home"), VIRTUAL_ENV=str(venv), PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}")
    outcomes: dict[str, Outcome] = {}
    for block in readme_blocks():
        if block.lang == "python" and block.run:
            argv = [str(venv / "bin" / "python"), "-c", block.code]
        elif block in SHELL_BLOCKS and block.skip is None:
            argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
        else:
            standin = CLAUDE_ADD.search(block.code) if block.skip else None
            if standin is None:
                continue
            argv = [str(venv / "bin" / "python"), "-c", STAND_IN, standin.group(1)]
        done = subprocess.run(argv, cwd=checkout, env=env, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
        outcomes[block.name] = Outcome(done.returncode, f"$ {shlex.join(argv)}\n{done.stdout}{done.stderr}")
        if done.returncode != 0:
            break
    return outcomes


# The two tests below are `slow` (left out of the default run; .ci/run runs them with -m slow): readme_run
# builds and installs the package five times, as the blocks say, in a fresh venv.
@pytest.mark.slow
@pytest.mark.timeout(1200)  # the first one waits for readme_run: a venv, installs from the index, every block
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.name for b in SHELL_BLOCKS])
def test_every_readme_shell_block_runs_as_pasted(block: Block, readme_run: dict[str, Outcome]) -> None:
    if block.skip is not None:
        pytest.skip(f"marked in README.md: {block.skip}")
    outcome = readme_run.get(block.name)
    assert outcome is not None, "not run: a block before it failed"
    assert outcome.code == 0, outcome.output


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_readme_blocks_ran_on_the_databases_they_name(readme_run: dict[str, Outcome]) -> None:
    """What the blocks say they make is there: the proofs of "Proofs for auditors" on the database of "Use
    it from Python" (written without a signing key), and the files Claude Code wrote, listed."""
    proofs = readme_run.get("Proofs for auditors #1")
    assert proofs is not None and proofs.code == 0
    assert "OK: seq 1 (put by agent-1" in proofs.output
    assert NO_CHECKPOINT_OF_KEY in proofs.output and "checkpoint kept.note: OK: the log (" in proofs.output
    remembered = readme_run.get("What did Claude remember? #1")
    assert remembered is not None and remembered.code == 0
    assert "path:/memories/user.md" in remembered.output and "The user prefers night trains." in remembered.output
