"""The README's command table and the command line agree: every command it names exists, with the
options it shows, and every command exists in it."""

from __future__ import annotations

import re
from pathlib import Path

import click

from mnemo.cli import cli

README = Path(__file__).resolve().parents[1] / "README.md"


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
