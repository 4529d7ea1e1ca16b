"""`mnemo demo` and `mnemo chat`: the memory tool, end to end.

`run_demo` plays a scripted conversation (no network, no API key) whose tool calls go through
`MnemoMemoryToolServer.handle` exactly as Claude's would (and its searches through
`MnemoMemoryToolServer.search`, as the `memory_search` tool's would), prints it as a transcript, then checks the
chain and shows an excerpt of the audit export, the chain catching a changed byte, and two agents
sharing a team folder through mounts (one of them read-only). `run_chat` holds a real conversation with Claude
through the Anthropic SDK's tool runner, with its memory in a local Mnemo database.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import struct
import sys
import tempfile
import textwrap
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from mnemo._install import install_hint
from mnemo.audit import export_audit, read_log, verify_db
from mnemo.audit.verify import report_lines
from mnemo.client import MnemoClient
from mnemo.errors import MnemoError
from mnemo.tools.server import DEFAULT_SEARCH_LIMIT, SEARCH_TOOL_NAME, CommandResult, MnemoMemoryToolServer

if TYPE_CHECKING:
    from anthropic.types.beta import BetaMessageParam

__all__ = ["DEFAULT_CHAT_MODEL", "run_chat", "run_demo"]

DEFAULT_CHAT_MODEL = "claude-sonnet-5-5"
DEMO_AGENT = "demo-agent"


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


def _session_three(semantic: bool) -> list[_Turn]:
    """A search that words miss and meaning finds (hybrid needs the `semantic` extra's local model)."""
    query = "air travel preferences"
    turns = [
        _Turn(
            user="Note that I love spicy food, and that deploys at work go out on Tuesdays.",
            calls=[
                {"command": "create", "path": "/memories/people/ana/food.md",
                 "file_text": "- loves spicy food\n"},
                {"command": "create", "path": "/memories/work/deploys.md",
                 "file_text": "- deploys go out on Tuesdays\n"},
            ],
            reply="Noted both.",
        ),
        _Turn(
            user="Book me a trip to Porto. Anything I should keep in mind?",
            calls=[{"tool": SEARCH_TOOL_NAME, "query": query, "mode": "lexical"}],
            reply="No file holds those words." + ("" if semantic else " (Searching by meaning needs the `semantic` "
                                                   f"extra: {install_hint('semantic')}.)"),
        ),
    ]
    if semantic:
        turns.append(_Turn(
            calls=[{"tool": SEARCH_TOOL_NAME, "query": query, "mode": "hybrid", "limit": 1}],
            reply="By meaning: you prefer trains over planes, so I'll look at the train to Porto first.",
        ))
    return turns


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
            user="Remind me: how did I want to travel?",
            calls=[{"tool": SEARCH_TOOL_NAME, "query": "train* plane*"}],
            reply="By train: you prefer trains over planes, and I noted the night train via Madrid for Lisbon.",
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
    if tool_input.get("tool") == SEARCH_TOOL_NAME:
        where = f" in {tool_input['path']}" if tool_input.get("path") is not None else ""
        how = f" (mode {tool_input['mode']})" if tool_input.get("mode") is not None else ""
        return f"{SEARCH_TOOL_NAME} {json.dumps(tool_input.get('query'))}{where}{how}"
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


_MAX_WIDTH = 100
_MIN_WIDTH = 40
PROFILE = "/memories/people/ana/profile.md"
_ATTACK = (b"trains over planes", b"planes over trains")  # same length: only bytes change, none move


def terminal_width() -> int:
    """The width to wrap to: the terminal's (or $COLUMNS), at most 100 columns for prose."""
    return max(_MIN_WIDTH, min(_MAX_WIDTH, shutil.get_terminal_size((_MAX_WIDTH, 24)).columns))


class _Page:
    """The demo's output, each paragraph wrapped to one width."""

    def __init__(self, out: TextIO, width: int) -> None:
        self.out, self.width = out, width

    def line(self, text: str = "", indent: str = "", hang: str = "") -> None:
        """One paragraph; continuation lines hang under `indent + hang`. Long words (paths, hashes) are
        kept whole rather than cut."""
        if not text:
            self.out.write(indent.rstrip() + "\n")
            return
        wrapped = textwrap.fill(text.replace("\t", "  "), width=self.width, initial_indent=indent,
                                subsequent_indent=" " * len(indent) + hang, break_long_words=False,
                                break_on_hyphens=False, drop_whitespace=True)
        self.out.write(wrapped + "\n")

    def raw(self, text: str) -> None:
        """A line of data (JSON) that wrapping would break: written as it is."""
        self.out.write(text + "\n")

    def say(self, who: str, text: str) -> None:
        self.line(text, indent=f"{who}: ", hang="")

    def result(self, result: Mapping[str, Any] | CommandResult) -> None:
        if isinstance(result, CommandResult):
            text, is_error = result.text, result.is_error
        else:
            text, is_error = str(result.get("content", "")), bool(result.get("is_error", False))
        lines = text.split("\n")
        self.line(lines[0], indent="  ! " if is_error else "  = ")
        for rest in lines[1:]:
            self.line(rest, indent="      ", hang="  ")


def _show_result(out: TextIO, result: Mapping[str, Any] | CommandResult) -> None:
    _Page(out, terminal_width()).result(result)


def _say(out: TextIO, who: str, text: str) -> None:
    _Page(out, terminal_width()).say(who, text)


def _call(server: MnemoMemoryToolServer, call: Mapping[str, Any], tool_use_id: str) -> Mapping[str, Any]:
    """The tool_result of one scripted call: a search through `search` (the `memory_search` tool's code
    path), a memory-tool command through `handle`."""
    if call.get("tool") == SEARCH_TOOL_NAME:
        limit = call.get("limit", DEFAULT_SEARCH_LIMIT)
        result = server.search(call["query"], call.get("path"), limit, call.get("mode"))
        return server.result_block(tool_use_id, result)
    return server.handle({"type": "tool_use", "id": tool_use_id, "name": "memory", "input": call})


def _play(page: _Page, server: MnemoMemoryToolServer, turns: list[_Turn], first_id: int) -> int:
    n = first_id
    for turn in turns:
        if turn.user is not None:
            page.say("User", turn.user)
        for call in turn.calls:
            n += 1
            page.line(_describe_call(call), indent="  > ", hang="  ")
            page.result(_call(server, call, f"toolu_demo_{n:02d}"))
        page.say("Claude", turn.reply)
        page.line()
    return n


TEAM_SCOPE = "team:trips"
TEAM_MOUNTS = {"/memories/team": TEAM_SCOPE}
# (agent, tool input): the assistant may read, write and forget in the team's folder; the concierge only read
_TEAM_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("assistant", {"command": "create", "path": "/memories/team/lisbon.md",
                   "file_text": "# Lisbon, June\n- two travellers\n- trains, no flights\n"}),
    ("assistant", {"command": "create", "path": "/memories/notes.md", "file_text": "Ana prefers window seats.\n"}),
    ("assistant", {"command": "view", "path": "/memories"}),
    ("concierge", {"command": "view", "path": "/memories"}),
    ("concierge", {"command": "str_replace", "path": "/memories/team/lisbon.md", "old_str": "June",
                   "new_str": "July"}),
    ("concierge", {"command": "create", "path": "/memories/hotels.md", "file_text": "- Alfama, near the tram\n"}),
    ("concierge", {"command": "rename", "old_path": "/memories/hotels.md", "new_path": "/memories/team/hotels.md"}),
    ("assistant", {"command": "rename", "old_path": "/memories/notes.md", "new_path": "/memories/team/notes.md"}),
    ("concierge", {"command": "view", "path": "/memories/team"}),
    ("concierge", {"tool": SEARCH_TOOL_NAME, "query": "lisbon tram*"}),
]


def _shared_folder(page: _Page, db_path: str) -> bool:
    """Two agents sharing a team folder through mounts, one of them read-only. True if the chain is intact
    and the read-only agent's edits were refused."""
    page.line("--- a shared team folder: two agents, one of them read-only ---")
    with MnemoClient(db_path, DEMO_AGENT) as owner:
        owner.grant("assistant", TEAM_SCOPE, ["read", "write", "forget"])
        owner.grant("concierge", TEAM_SCOPE, ["read"])
        page.line(f"database: {db_path}; {TEAM_SCOPE} is mounted at /memories/team for both agents, beside each "
                  "one's own memory at /memories. The assistant may read, write and forget there; the concierge "
                  "may only read.")
        refused = 0
        with MnemoClient(db_path, "assistant") as a, MnemoClient(db_path, "concierge") as c:
            servers = {"assistant": MnemoMemoryToolServer(a, mounts=TEAM_MOUNTS),
                       "concierge": MnemoMemoryToolServer(c, mounts=TEAM_MOUNTS)}
            for n, (agent, call) in enumerate(_TEAM_CALLS):
                page.line(f"{agent}: {_describe_call(call)}", indent="  > ", hang="  ")
                block = _call(servers[agent], call, f"toolu_team_{n:02d}")
                page.result(block)
                refused += agent == "concierge" and "Permission denied" in str(block["content"])
        page.line("The move of notes.md into the team's folder was one commit: a put in the team's scope and the "
                  "erasure of the assistant's own copy, all or nothing.")
        report = owner.verify()
        page.line(f"Chain check of {os.path.basename(db_path)}: {'OK' if report.ok else 'FAILED'}: "
                  f"{report.entries} entries")
        page.line()
    return report.ok and refused == 2


def _count_in_files(db_path: str, needle: bytes) -> int:
    directory = os.path.dirname(os.path.abspath(db_path))
    base = os.path.basename(db_path)
    found = 0
    for name in os.listdir(directory):
        if name == base or name.startswith(base + "."):
            with open(os.path.join(directory, name), "rb") as f:
                found += f.read().count(needle)
    return found


def _audit_excerpt(page: _Page, db_path: str, lines: int = 4) -> None:
    buffer = io.StringIO()
    total = export_audit(db_path, buffer, since=0, include_content=False)
    rows = buffer.getvalue().splitlines()
    shown = rows[:2] + (["..."] if len(rows) > lines else []) + rows[max(2, len(rows) - (lines - 2)) :]
    page.line(f"Audit export (JSON Lines, {total} entries, no content; long fields shortened):")
    for row in shown:
        if row == "...":
            page.raw("  ...")
            continue
        entry = json.loads(row)
        for key in ("prev", "hash"):
            entry[key] = entry[key][:16] + "…"
        entry["entry"] = entry["entry"][:12] + "…"
        page.raw("  " + json.dumps(entry, ensure_ascii=False, separators=(",", ":")))


def _tamper(copy: str, record_id: str) -> int:
    """Change the latest version of the profile in `copy` as someone who knows the format would: the
    words in the payload, then the slot's CRC-32 so that the cheap checksum still holds. Returns the
    offset of the changed slot."""
    slot = payload = None
    for item in read_log(copy, payloads=True):
        e = item.entry
        if e.op == "put" and e.body.get("id") == record_id and item.payload is not None:
            slot, payload = item.slot, item.payload
    if slot is None or payload is None or _ATTACK[0] not in payload:
        raise RuntimeError("the profile's payload is not where the demo expects it")
    changed = payload.replace(_ATTACK[0], _ATTACK[1], 1)
    with open(copy, "r+b") as f:
        f.seek(slot.offset)
        f.write(struct.pack(">I", zlib.crc32(changed)) + changed)
    return slot.offset


def _copy_new(source: str, copy: str) -> None:
    """Copy the log to a file made fresh at `copy` (one left by an earlier run, or a link, is removed, never
    written through), as private as a new database."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(copy)
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with open(source, "rb") as src, os.fdopen(fd, "wb") as dst:
        shutil.copyfileobj(src, dst)


def _attack(page: _Page, db_path: str, copy: str, record_id: str) -> bool:
    """The chain catching a changed byte, on a copy of the database. True if it was caught."""
    _copy_new(db_path, copy)  # the log alone: a snapshot is rebuilt from it
    offset = _tamper(copy, record_id)
    page.line("--- an attacker edits the profile (on a copy of the database) ---")
    page.line(f"In {copy}, the latest version of {PROFILE} now says {_ATTACK[1].decode()!r} instead of "
              f"{_ATTACK[0].decode()!r}: bytes changed in place at offset {offset}, and the payload's CRC-32 "
              "recomputed to match, as someone who knows the format would do.")
    page.raw(f"$ mnemo verify {shlex.quote(copy)}")
    report = verify_db(copy)
    for text in report_lines(report, copy):
        stripped = text.lstrip(" ")
        page.line(stripped, indent=" " * (len(text) - len(stripped)), hang="    ")
    try:
        with MnemoClient(copy, DEMO_AGENT, readonly=True) as client:
            client.get(record_id)
        served = "the client served the changed version"
    except MnemoError as exc:
        served = f"the client refuses it: {type(exc).__name__}: {exc}"
    page.line(f"A client reading that record from the copy: {served}.")
    page.line()
    return not report.ok and any(p.kind == "payload" for p in report.problems) and "refuses" in served


def _next_steps(page: _Page, db_path: str, copy: str, kept: bool) -> None:
    db, tampered = shlex.quote(db_path), shlex.quote(copy)
    if kept:
        page.line(f"The database is kept in {db_path} (the attacker's copy beside it, in {copy}).")
        page.line("Next steps, to look at what it stored:")
        commands = [f"mnemo ls {db}", f"mnemo cat {db} {PROFILE}", f"mnemo history {db} {PROFILE}",
                    f"mnemo log {db}", f"mnemo verify {db}", f"mnemo verify {tampered}"]
    else:
        page.line("The database was in a temporary folder, removed now.")
        page.line("Next steps, to keep it and look at what it stored, give the demo a folder:")
        db = "mnemo-demo/demo.mnemo.db"
        commands = ["mnemo demo --dir mnemo-demo", f"mnemo ls {db}", f"mnemo cat {db} {PROFILE}",
                    f"mnemo log {db}", f"mnemo verify {db}"]
    for command in commands:
        page.raw(f"  {command}")


def run_demo(out: TextIO, db_dir: str | None = None, width: int | None = None) -> int:
    """Play the scripted memory-tool conversation on a fresh database and print it, then show the chain
    catching a changed byte on a copy. In `db_dir` (created if missing) the database is kept, else it
    lives in a temporary folder. 0 if every check came out as it should; 2 if `db_dir` cannot be used."""
    page = _Page(out, width if width is not None else terminal_width())
    if db_dir is not None:
        if os.path.exists(db_dir) and not os.path.isdir(db_dir):
            out.write(f"mnemo demo: {db_dir} is not a directory\n")
            return 2
        os.makedirs(db_dir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="mnemo-demo-") if db_dir is None else db_dir
    db_path = os.path.join(workdir, "demo.mnemo.db")
    copy = os.path.join(workdir, "tampered.mnemo.db")
    team_db = os.path.join(workdir, "team.mnemo.db")
    if db_dir is not None:
        for path in (db_path, copy, team_db):
            if os.path.exists(path):
                out.write(f"mnemo demo: {path} already exists; give an empty directory\n")
                return 2
    semantic = importlib.util.find_spec("wordllama") is not None  # the `semantic` extra's local model
    try:
        with MnemoClient(db_path, DEMO_AGENT, embedder="local" if semantic else None) as client:
            server = MnemoMemoryToolServer(client)
            page.line("Mnemo memory-tool demo (scripted, offline: no API key, no network)")
            page.line(f"database: {db_path}   agent: {DEMO_AGENT}   scope: {server.scope}")
            page.line(f"tool definition: {json.dumps(server.tool_schema())}")
            page.line()
            page.line("--- conversation 1 ---")
            n = _play(page, server, _session_one(), 0)
            page.line("--- conversation 2 (a new chat: only the memory carries over) ---")
            n = _play(page, server, _session_two(), n)

            history = server.history(PROFILE)
            page.line(f"History of {PROFILE} (one record, every version kept):")
            for record in history:
                path = next((t[5:] for t in record.tags if t.startswith("path:")), "?")
                page.line(f"v{record.version}  seq {record.seq}  {path}  hash {record.hash[:16]}…", indent="  ")
            leftover = _count_in_files(db_path, b"Lisbon")
            page.line(f"Bytes of the forgotten trip ('Lisbon') left in the database files: {leftover}")
            page.line()
            page.line("--- conversation 3 (recall by meaning: a search that shares no word with the note) ---")
            _play(page, server, _session_three(semantic), n)

            report = client.verify()
            status = "OK" if report.ok else "FAILED"
            page.line(
                f"Chain check: {status}: {report.entries} entries, head seq {report.head_seq}, "
                f"head hash {report.head_hash[:16]}…, {report.erased} erased payloads, "
                f"{len(report.problems)} problems"
            )
            for problem in report.problems:
                page.line(f"problem: {problem.kind}: {problem.message}", indent="  ")
            profile_id = history[-1].id
        _audit_excerpt(page, db_path)
        page.line()
        caught = _attack(page, db_path, copy, profile_id)
        shared = _shared_folder(page, team_db)
        _next_steps(page, db_path, copy, kept=db_dir is not None)
        return 0 if report.ok and leftover == 0 and caught and shared else 1
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
        import anthropic  # noqa: PLC0415 - the optional SDK, only `mnemo chat` needs it

        from mnemo.tools.anthropic import MnemoMemoryTool  # noqa: PLC0415 - imports the optional SDK
    except ImportError:
        out.write(f"mnemo chat needs the Anthropic SDK: {install_hint('anthropic-memory-tool')}\n")
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
