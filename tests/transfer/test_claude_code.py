"""Claude Code's memory files of a project, and of the user, where docs/TRANSFER.md says they land."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.transfer import write_tree

from mnemo import MnemoClient, MnemoMemoryToolServer
from mnemo.transfer import SourceError, import_source, open_source
from mnemo.transfer.claude_code import claude_home, project_slug
from mnemo.transfer.folder import FolderSource
from mnemo.transfer.items import SourceFile


def test_the_project_user_and_auto_memory_files(client: MnemoClient, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    project = write_tree(tmp_path / "code" / "my.app", {
        "CLAUDE.md": "# Project\n", "CLAUDE.local.md": "local\n", ".claude/CLAUDE.md": "also project\n",
        ".claude/rules/testing.md": "run pytest\n", ".claude/rules/frontend/react.md": "hooks\n",
        ".claude/settings.json": "{}", "src/CLAUDE.md": "nested: not loaded at start, not imported\n",
    })
    home = write_tree(tmp_path / "home" / ".claude", {
        "CLAUDE.md": "# Me\n", "rules/style.md": "short lines\n",
        f"projects/{project_slug(str(project))}/memory/MEMORY.md": "- use uv\n",
        f"projects/{project_slug(str(project))}/memory/debugging.md": "notes\n",
        "projects/-other-project/memory/MEMORY.md": "another project's\n",
    })
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))
    assert claude_home() == str(home) and project_slug("/home/ana/my.app") == "-home-ana-my-app"
    report = import_source(MnemoMemoryToolServer(client), open_source(project, "claude-code"))
    base = "/memories/claude-code"
    assert report.created == tuple(f"{base}/{p}" for p in (
        "project/CLAUDE.md", "project/claude/CLAUDE.md", "project/CLAUDE.local.md", "user/CLAUDE.md",
        "project/claude/rules/frontend/react.md", "project/claude/rules/testing.md",
        "project/auto-memory/MEMORY.md", "project/auto-memory/debugging.md", "user/rules/style.md"))
    assert report.source == f"Claude Code memory of {project}" and report.skipped == ()


def test_a_project_without_claude_code_memory_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "nohome"))
    (tmp_path / "p").mkdir()
    with pytest.raises(SourceError, match=r"^no Claude Code memory found for .*/p: none of .*/p/CLAUDE.md, .* exists "
                                          r"\(give the project's top folder, where Claude Code runs\)$"):
        list(open_source(tmp_path / "p", "claude-code").scan())
    with pytest.raises(SourceError, match="No such file or directory"):
        list(open_source(tmp_path / "missing", "claude-code").scan())


def test_a_linked_claude_md_is_skipped_not_followed(client: MnemoClient, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "nohome"))
    project = write_tree(tmp_path / "p", {"AGENTS.md": "shared\n"})
    os.symlink("AGENTS.md", project / "CLAUDE.md")
    report = import_source(MnemoMemoryToolServer(client), open_source(project, "claude-code"))
    assert report.created == ()
    assert [s.reason for s in report.skipped] == [
        "a symbolic link: links are never followed (import the file it points to by itself)"]


_FOLDER_LINK = ("a symbolic link: links are never followed, and nothing below it is imported (import the folder it "
                "points to by itself)")


def test_a_linked_claude_folder_or_rules_folder_is_skipped_not_followed(
    client: MnemoClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A repository can hold links: `.claude/rules` -> ~/.ssh would import the user's keys as memories.
    outside = write_tree(tmp_path / "outside", {"id_rsa": "PRIVATE KEY\n", "CLAUDE.md": "outside\n",
                                                "rules/r.md": "outside rule\n"})
    home = write_tree(tmp_path / "home", {"CLAUDE.md": "# Me\n"})
    os.symlink(outside, home / "rules")
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(home))
    project = write_tree(tmp_path / "p", {"CLAUDE.md": "# P\n", ".claude/settings.json": "{}"})
    os.symlink(outside, project / ".claude" / "rules")
    server = MnemoMemoryToolServer(client)
    report = import_source(server, open_source(project, "claude-code"))
    assert report.created == ("/memories/claude-code/project/CLAUDE.md", "/memories/claude-code/user/CLAUDE.md")
    assert [(s.origin, s.reason) for s in report.skipped] == [
        (f"{project}/.claude/rules", _FOLDER_LINK), (f"{home}/rules", _FOLDER_LINK)]
    # the whole `.claude` a link: said once, for the file and the folder below it
    (project / ".claude" / "rules").unlink()
    (project / ".claude" / "settings.json").unlink()
    (project / ".claude").rmdir()
    os.symlink(outside, project / ".claude")
    report = import_source(server, open_source(project, "claude-code"), dry_run=True)
    assert report.created == () and report.unchanged == ("/memories/claude-code/project/CLAUDE.md",
                                                         "/memories/claude-code/user/CLAUDE.md")
    assert [(s.origin, s.reason) for s in report.skipped] == [
        (f"{project}/.claude", _FOLDER_LINK), (f"{home}/rules", _FOLDER_LINK)]
    assert [r.content for r in client.query()] == ["# P\n", "# Me\n"]


def test_a_folder_below_its_top_is_opened_without_following_a_link(tmp_path: Path) -> None:
    # what the scan's check passed and a link then replaced: opening it fails, and nothing is read
    outside = write_tree(tmp_path / "outside", {"a.md": "a\n"})
    project = write_tree(tmp_path / "p", {"x.md": "x\n"})
    os.symlink(outside, project / "linked")
    source = FolderSource(project / "linked", top=str(project), below=("linked",))
    with pytest.raises(SourceError, match=f"^cannot import {project}/linked: "):
        list(source.scan())
    assert source.count() == 0
    assert [f.rel for f in FolderSource(outside, top=str(tmp_path), below=("outside",)).scan()
            if isinstance(f, SourceFile)] == ["a.md"]
