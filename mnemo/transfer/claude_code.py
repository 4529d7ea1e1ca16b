"""Claude Code's memory files, for one project: what Claude Code loads at the start of a session there.

Where Claude Code keeps them (its memory documentation, code.claude.com/docs/en/memory):
- project memory, shared with the team: `./CLAUDE.md` or `./.claude/CLAUDE.md`, and modular rules in
  `./.claude/rules/` (any depth);
- local project memory, personal: `./CLAUDE.local.md`;
- user memory, for every project: `~/.claude/CLAUDE.md` and `~/.claude/rules/`;
- auto memory, the notes Claude writes itself: `~/.claude/projects/<project>/memory/` (`MEMORY.md` and
  topic files), `<project>` being the project's absolute path with every character other than a letter
  or a digit replaced by `-`.
`~/.claude` is `$CLAUDE_CONFIG_DIR` when that is set. docs/TRANSFER.md says where each lands under
`/memories`; the `.claude` folder becomes `claude`, since the memory tool hides names starting with `.`.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator

from mnemo.transfer.folder import FolderSource, kind_of, open_beneath, open_folder, read_file
from mnemo.transfer.items import Skipped, SourceError, SourceFile

__all__ = ["ClaudeCodeSource", "claude_home", "project_slug"]


def claude_home() -> str:
    """Claude Code's folder of the user: `$CLAUDE_CONFIG_DIR`, else `~/.claude`."""
    return os.environ.get("CLAUDE_CONFIG_DIR") or os.path.join(os.path.expanduser("~"), ".claude")


def project_slug(project: str) -> str:
    """The name of a project's folder under `~/.claude/projects`: its absolute path with every
    character other than an ASCII letter or digit replaced by `-` (`/home/ana/app` -> `-home-ana-app`)."""
    return re.sub(r"[^A-Za-z0-9]", "-", os.path.abspath(project))


class ClaudeCodeSource:
    """The memory files Claude Code keeps for the project folder `project` (and the user's own)."""

    format = "claude-code"
    default_into = "claude-code"

    def __init__(self, project: str | os.PathLike[str], home: str | os.PathLike[str] | None = None) -> None:
        self.project = os.path.abspath(os.fspath(project))
        self.home = os.fspath(home) if home is not None else claude_home()
        self.label = f"Claude Code memory of {self.project}"

    def places(self) -> tuple[list[tuple[str, tuple[str, ...], str]], list[tuple[str, tuple[str, ...], str]]]:
        """The files and the folders of files it reads: each a folder a person named (the project, or
        `~/.claude`), the names below it, and its path below the import's folder."""
        project, home = self.project, self.home
        files = [
            (project, ("CLAUDE.md",), "project/CLAUDE.md"),
            (project, (".claude", "CLAUDE.md"), "project/claude/CLAUDE.md"),
            (project, ("CLAUDE.local.md",), "project/CLAUDE.local.md"),
            (home, ("CLAUDE.md",), "user/CLAUDE.md"),
        ]
        folders = [
            (project, (".claude", "rules"), "project/claude/rules"),
            (home, ("projects", project_slug(project), "memory"), "project/auto-memory"),
            (home, ("rules",), "user/rules"),
        ]
        return files, folders

    def count(self) -> int:
        """How many files the scan will offer, about (for a progress bar)."""
        files, folders = self.places()
        return (sum(isinstance(_single(*place), SourceFile) for place in files)
                + sum(FolderSource(os.path.join(top, *below), top=top, below=below).count()
                      for top, below, _ in folders))

    def scan(self) -> Iterator[SourceFile | Skipped]:
        os.close(open_folder(self.project))  # a project that is no folder is an error, not an empty import
        files, folders = self.places()
        found = False
        links: set[str] = set()  # a linked `.claude` is said once, not for each place below it
        for top, below, rel in files:
            item = _single(top, below, rel)
            if item is not None and item.origin not in links:
                found = True
                links.update([item.origin] if isinstance(item, Skipped) else [])
                yield item
        for top, below, rel in folders:
            path = os.path.join(top, *below)
            link = _link_on_the_way(top, below)
            if link is not None:
                found = True
                if link not in links:
                    links.add(link)
                    yield Skipped(link, _FOLDER_LINK)
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                found = True
                yield from FolderSource(path, prefix=rel, top=top, below=below).scan()
        if not found:
            looked = ", ".join(os.path.join(top, *below) for top, below, _ in files + folders)
            raise SourceError(f"no Claude Code memory found for {self.project}: none of {looked} exists "
                              "(give the project's top folder, where Claude Code runs)")


_LINK = "a symbolic link: links are never followed (import the file it points to by itself)"
_FOLDER_LINK = ("a symbolic link: links are never followed, and nothing below it is imported (import the folder it "
                "points to by itself)")


def _link_on_the_way(top: str, below: tuple[str, ...]) -> str | None:
    """The first path of `top`/`below`... (`top` itself not counted: a person named it) that is a
    symbolic link, or None, also when one of them does not exist. A project's `.claude` or `.claude/rules`
    linked elsewhere (a repository can hold such a link) would import files from outside the project."""
    path = top
    for name in below:
        path = os.path.join(path, name)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return path
        except OSError:
            return None
    return None


def _single(top: str, below: tuple[str, ...], rel: str) -> SourceFile | Skipped | None:
    path = os.path.join(top, *below)
    link = _link_on_the_way(top, below)
    if link is not None:
        return Skipped(link, _LINK if link == path else _FOLDER_LINK)
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return Skipped(path, f"{kind_of(st.st_mode)}: only regular files are imported, and this one is never opened")

    def read(limit: int) -> bytes | int:
        fd = open_beneath(top, below[:-1])  # no link below `top` followed, even one put there since
        try:
            return read_file(below[-1], fd, limit)
        finally:
            os.close(fd)

    return SourceFile(rel, path, read)
