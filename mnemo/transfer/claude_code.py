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

from mnemo.transfer.folder import FolderSource, kind_of, open_folder, read_file
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

    def places(self) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        """The files (path on disk, path below the import's folder) and the folders of files it reads."""
        project, home = self.project, self.home
        files = [
            (os.path.join(project, "CLAUDE.md"), "project/CLAUDE.md"),
            (os.path.join(project, ".claude", "CLAUDE.md"), "project/claude/CLAUDE.md"),
            (os.path.join(project, "CLAUDE.local.md"), "project/CLAUDE.local.md"),
            (os.path.join(home, "CLAUDE.md"), "user/CLAUDE.md"),
        ]
        folders = [
            (os.path.join(project, ".claude", "rules"), "project/claude/rules"),
            (os.path.join(home, "projects", project_slug(project), "memory"), "project/auto-memory"),
            (os.path.join(home, "rules"), "user/rules"),
        ]
        return files, folders

    def count(self) -> int:
        """How many files the scan will offer, about (for a progress bar)."""
        files, folders = self.places()
        return sum(os.path.isfile(p) for p, _ in files) + sum(FolderSource(p).count() for p, _ in folders)

    def scan(self) -> Iterator[SourceFile | Skipped]:
        os.close(open_folder(self.project))  # a project that is no folder is an error, not an empty import
        files, folders = self.places()
        found = False
        for path, rel in files:
            item = _single(path, rel)
            if item is not None:
                found = True
                yield item
        for path, rel in folders:
            try:
                st = os.stat(path)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                found = True
                yield from FolderSource(path, prefix=rel).scan()
        if not found:
            looked = ", ".join(p for p, _ in files + folders)
            raise SourceError(f"no Claude Code memory found for {self.project}: none of {looked} exists "
                              "(give the project's top folder, where Claude Code runs)")


def _single(path: str, rel: str) -> SourceFile | Skipped | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return Skipped(path, "a symbolic link: links are never followed (import the file it points to by itself)")
    if not stat.S_ISREG(st.st_mode):
        return Skipped(path, f"{kind_of(st.st_mode)}: only regular files are imported, and this one is never opened")
    folder, name = os.path.split(path)

    def read(limit: int) -> bytes | int:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            return read_file(name, fd, limit)
        finally:
            os.close(fd)

    return SourceFile(rel, path, read)
