"""`mnemo demo` and `mnemo chat`: the memory tool, end to end.

`run_demo` plays a scripted conversation (no network, no API key) whose tool calls go through
`MnemoMemoryToolServer.handle` exactly as Claude's would, prints it as a transcript, then checks the
chain and shows an excerpt of the audit export. `run_chat` holds a real conversation with Claude
through the Anthropic SDK's tool runner, with its memory in a local Mnemo database.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from mnemo.client import MnemoClient
from mnemo.tools.server import CommandResult, MnemoMemoryToolServer

if TYPE_CHECKING:
    from anthropic.types.beta import BetaMessageParam

__all__ = ["DEFAULT_CHAT_MODEL", "run_chat", "run_demo"]

DEFAULT_CHAT_MODEL = "claude-sonnet-5-5"
DEMO_AGENT = "demo-agent"
_WIDTH = 100


@dataclass
class _Turn:
    user: str | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)
    reply: str = ""


def _session_one() -> list[_Turn]:
    return [
        _Turn(
            user="Hi! I'm Ana. I'm planning a trip to Lisbon in May. "
            "I'm vegetarian and I'd rather take trains than fly.",
            calls=[
                {"command": "view", "path": "/memories"},
                {
                    "command": "create",
                    "path": "/memories/user/profile.md",
                    "file_text": "# Ana\n- vegetarian\n- prefers trains over planes\n",
                },
                {
                    "command": "create",
                    "path": "/memories/trips/lisbon.md",
                    "file_text": "# Trip: Lisbon\n- when: May\n- travelling: alone\n",
                },
            ],
            reply="Nice to meet you, Ana! I've noted your preferences and started a page for the Lisbon trip.",
        ),
        _Turn(
            user="Change of plan: it's June now, and my sister is coming along.",
            calls=[
                {
                    "command": "str_replace",
                    "path": "/memories/trips/lisbon.md",
                    "old_str": "May",
                    "new_str": "June",
                },
                {
                    "command": "str_replace",
                    "path": "/memories/trips/lisbon.md",
                    "old_str": "- travelling: alone",
                    "new_str": "- travelling: with her sister",
                },
                {
                    "command": "insert",
                    "path": "/memories/trips/lisbon.md",
                    "insert_line": 3,
                    "insert_text": "- book: night train via Madrid",
                },
            ],
            reply="Updated: Lisbon in June, with your sister. I added a note to look at the night train.",
        ),
    ]


def _session_two() -> list[_Turn]:
    return [
        _Turn(
            user="Where am I travelling this summer?",
            calls=[
                {"command": "view", "path": "/memories"},
                {"command": "view", "path": "/memories/trips/lisbon.md"},
                {"command": "view", "path": "/memories/../../etc/passwd"},
            ],
            reply="To Lisbon in June with your sister, by train if we can. "
            "(A stray path outside /memories was refused.)",
        ),
        _Turn(
            user="The trip is cancelled. Please forget everything about it, and file my profile under people/.",
            calls=[
                {"command": "delete", "path": "/memories/trips"},
                {"command": "rename", "old_path": "/memories/user", "new_path": "/memories/people/ana"},
                {"command": "view", "path": "/memories/"},
            ],
            reply="Done: the trip is forgotten, and your profile now lives in /memories/people/ana/.",
        ),
    ]


def _describe_call(tool_input: Mapping[str, Any]) -> str:
    command = str(tool_input.get("command"))
    if command == "rename":
        return f"memory.rename {tool_input.get('old_path')} -> {tool_input.get('new_path')}"
    detail = str(tool_input.get("path"))
    if command == "view" and tool_input.get("view_range") is not None:
        detail += f" {tool_input['view_range']}"
    if command == "insert":
        detail += f" after line {tool_input.get('insert_line')}"
    if command == "str_replace":
        detail += f" {json.dumps(tool_input.get('old_str'))} -> {json.dumps(tool_input.get('new_str', ''))}"
    return f"memory.{command} {detail}"


def _indent(text: str, prefix: str = "      ") -> str:
    return textwrap.indent(text.replace("\t", "  "), prefix, lambda _line: True)


def _say(out: TextIO, who: str, text: str) -> None:
    wrapped = textwrap.fill(text, width=_WIDTH, initial_indent=f"{who}: ", subsequent_indent=" " * (len(who) + 2))
    out.write(wrapped + "\n")


def _show_result(out: TextIO, result: Mapping[str, Any] | CommandResult) -> None:
    if isinstance(result, CommandResult):
        text, is_error = result.text, result.is_error
    else:
        text, is_error = str(result.get("content", "")), bool(result.get("is_error", False))
    marker = "  ! " if is_error else "  = "
    lines = text.split("\n")
    out.write(marker + lines[0].replace("\t", "  ") + "\n")
    if len(lines) > 1:
        out.write(_indent("\n".join(lines[1:])) + "\n")


def _play(out: TextIO, server: MnemoMemoryToolServer, turns: list[_Turn], first_id: int) -> int:
    n = first_id
    for turn in turns:
        if turn.user is not None:
            _say(out, "User", turn.user)
        for call in turn.calls:
            n += 1
            out.write(f"  > {_describe_call(call)}\n")
            block = server.handle({"type": "tool_use", "id": f"toolu_demo_{n:02d}", "name": "memory", "input": call})
            _show_result(out, block)
        _say(out, "Claude", turn.reply)
        out.write("\n")
    return n


def _count_in_files(db_path: str, needle: bytes) -> int:
    directory = os.path.dirname(os.path.abspath(db_path))
    base = os.path.basename(db_path)
    found = 0
    for name in os.listdir(directory):
        if name == base or name.startswith(base + "."):
            with open(os.path.join(directory, name), "rb") as f:
                found += f.read().count(needle)
    return found


def _audit_excerpt(out: TextIO, db_path: str, lines: int = 4) -> None:
    from mnemo.audit import export_audit

    buffer = io.StringIO()
    total = export_audit(db_path, buffer, since=0, include_content=False)
    rows = buffer.getvalue().splitlines()
    shown = rows[:2] + (["..."] if len(rows) > lines else []) + rows[max(2, len(rows) - (lines - 2)) :]
    out.write(f"Audit export (JSON Lines, {total} entries, no content; long fields shortened):\n")
    for row in shown:
        if row == "...":
            out.write("  ...\n")
            continue
        entry = json.loads(row)
        for key in ("prev", "hash"):
            entry[key] = entry[key][:16] + "…"
        entry["entry"] = entry["entry"][:12] + "…"
        out.write("  " + json.dumps(entry, ensure_ascii=False, separators=(",", ":")) + "\n")


def run_demo(out: TextIO, db_dir: str | None = None) -> int:
    """Play the scripted memory-tool conversation on a fresh database and print it. 0 if the chain checks."""
    workdir = tempfile.mkdtemp(prefix="mnemo-demo-") if db_dir is None else db_dir
    db_path = os.path.join(workdir, "demo.mnemo.db")
    if db_dir is not None and os.path.exists(db_path):
        out.write(f"mnemo demo: {db_path} already exists; give an empty directory\n")
        return 2
    try:
        with MnemoClient(db_path, DEMO_AGENT) as client:
            server = MnemoMemoryToolServer(client)
            out.write("Mnemo memory-tool demo (scripted, offline: no API key, no network)\n")
            out.write(f"database: {db_path}   agent: {DEMO_AGENT}   scope: {server.scope}\n")
            out.write(f"tool definition: {json.dumps(server.tool_schema())}\n\n")
            out.write("--- conversation 1 ---\n")
            n = _play(out, server, _session_one(), 0)
            out.write("--- conversation 2 (a new chat: only the memory carries over) ---\n")
            _play(out, server, _session_two(), n)

            history = server.history("/memories/people/ana/profile.md")
            out.write("History of /memories/people/ana/profile.md (one record, every version kept):\n")
            for record in history:
                path = next((t[5:] for t in record.tags if t.startswith("path:")), "?")
                out.write(f"  v{record.version}  seq {record.seq}  {path}  hash {record.hash[:16]}…\n")
            leftover = _count_in_files(db_path, b"Lisbon")
            out.write(f"Bytes of the forgotten trip ('Lisbon') left in the database files: {leftover}\n\n")

            report = client.verify()
            status = "OK" if report.ok else "FAILED"
            out.write(
                f"Chain check: {status}: {report.entries} entries, head seq {report.head_seq}, "
                f"head hash {report.head_hash[:16]}…, {report.erased} erased payloads, "
                f"{len(report.problems)} problems\n"
            )
            for problem in report.problems:
                out.write(f"  problem: {problem.kind}: {problem.message}\n")
        _audit_excerpt(out, db_path)
        return 0 if report.ok and leftover == 0 else 1
    finally:
        if db_dir is None:
            shutil.rmtree(workdir, ignore_errors=True)


# -- mnemo chat ----------------------------------------------------------------------------------------


class _EchoingServer(MnemoMemoryToolServer):
    """A server that prints each command and its result as the conversation goes."""

    def __init__(self, client: MnemoClient, out: TextIO) -> None:
        super().__init__(client)
        self._out = out

    def execute(self, tool_input: object) -> CommandResult:
        result = super().execute(tool_input)
        if isinstance(tool_input, Mapping):
            self._out.write(f"  > {_describe_call(tool_input)}\n")
        _show_result(self._out, result)
        return result


def run_chat(
    out: TextIO | None = None,
    inp: TextIO | None = None,
    *,
    db_path: str | None = None,
    agent_id: str = "chat",
    model: str | None = None,
    environ: Mapping[str, str] | None = None,
    make_client: Callable[[], Any] | None = None,
) -> int:
    """Chat with Claude, its memory tool served from a local Mnemo database. Exit code: 0 done,
    1 an API error ended the chat, 2 something needed is missing (API key or the SDK)."""
    out = sys.stdout if out is None else out
    inp = sys.stdin if inp is None else inp
    env = os.environ if environ is None else environ
    if make_client is None and not env.get("ANTHROPIC_API_KEY"):
        out.write(
            "mnemo chat needs an Anthropic API key: set ANTHROPIC_API_KEY in the environment "
            "(for an offline run, try `mnemo demo`).\n"
        )
        return 2
    try:
        import anthropic

        from mnemo.tools.anthropic import MnemoMemoryTool
    except ImportError:
        out.write("mnemo chat needs the Anthropic SDK: pip install 'mnemo-chain[anthropic-memory-tool]'\n")
        return 2
    db_path = db_path or env.get("MNEMO_CHAT_DB") or "memory.mnemo.db"
    model = model or env.get("MNEMO_CHAT_MODEL") or DEFAULT_CHAT_MODEL
    sdk = make_client() if make_client is not None else anthropic.Anthropic(api_key=env["ANTHROPIC_API_KEY"])
    history: list[BetaMessageParam] = []
    with MnemoClient(db_path, agent_id) as client:
        tool = MnemoMemoryTool(_EchoingServer(client, out))
        out.write(f"Chatting with {model}; memory in {db_path} (scope {client.home_scope}). Empty line to quit.\n")
        while True:
            out.write("you> ")
            out.flush()
            line = inp.readline()
            if not line or not line.strip() or line.strip() in ("exit", "quit"):
                out.write("\n")
                return 0
            history.append({"role": "user", "content": line.strip()})
            try:
                runner = sdk.beta.messages.tool_runner(
                    model=model, max_tokens=4096, messages=list(history), tools=[tool]
                )
                reply = ""
                for message in runner:
                    for block in message.content:
                        text = getattr(block, "text", None) if block.type == "text" else None
                        if isinstance(text, str) and text:
                            _say(out, "claude", text)
                            reply = text
            except anthropic.APIError as exc:
                out.write(f"mnemo chat: the API call failed: {exc}\n")
                return 1
            history.append({"role": "assistant", "content": reply or "(no text)"})
