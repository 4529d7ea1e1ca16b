"""Every example runs as a user would run it (`python examples/NAME.py`, its own process) and prints what
its docstring promises, so none of them can rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT
from helpers.procs import subprocess_env

EXAMPLES = ROOT / "examples"
ID = r"[0-9a-f]{32}"


def run_example(name: str) -> list[str]:
    result = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True,
                            env=subprocess_env(), timeout=180, cwd=ROOT)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr
    return result.stdout.splitlines()


def test_every_example_is_run_here() -> None:
    tested = {name for name in re.findall(r'run_example\("([\w.]+)"\)', Path(__file__).read_text())}
    # these take input or a server to talk to; the tests named run them
    elsewhere = {
        "mcp_client.py",  # a `mnemo mcp` server: tests/tools/mcp/test_example.py
        "http_embedders.py",  # fake embedding services: tests/docs/test_http_embedders.py
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested | elsewhere


def test_sdk_tool_runner() -> None:
    pytest.importorskip("anthropic")
    assert run_example("sdk_tool_runner.py") == [
        "user: I always travel by train.",
        "claude: Noted: you travel by train.",
        "user: Plan my trip to Lisbon.",
        "claude: You prefer trains, so here are the night trains to Lisbon.",
        'the SDK sent the tool as: [{"type": "memory_20250818", "name": "memory"}]',
        'tool result for toolu_1: "Here\'re the files and directories up to 2 levels deep in /memories, '
        'excluding hidden items and node_modules:\\n0B\\t/memories"',
        'tool result for toolu_2: "File created successfully at: /memories/preferences.md"',
        'tool result for toolu_3: "Here\'s the content of /memories/preferences.md with line numbers:'
        '\\n     1\\t- travels by train\\n     2\\t"',
        "stored: path:/memories/preferences.md v1 '- travels by train\\n'",
        "chain check: OK",
    ]


def test_async_use() -> None:
    pytest.importorskip("anthropic")
    assert run_example("async_use.py") == [
        "4 coroutines wrote 20 notes through one client",
        "notes of worker-2: ['worker-2: note 0', 'worker-2: note 1', 'worker-2: note 2', 'worker-2: note 3', "
        "'worker-2: note 4']",
        "10 concurrent increments: counter = 10, versions 2..11, none lost",
        "claude: Saved your stand-up note.",
        "the async tool stored path:/memories/standup.md: '- ship the release\\n'",
        "chain check: OK, 33 entries",
    ]


def test_shared_scope() -> None:
    lines = run_example("shared_scope.py")
    assert len(lines) == 9
    assert lines[:5] == [
        "granted: researcher ('read', 'write'), reviewer ('read',)",
        "researcher: File created successfully at: /memories/findings.md",
        "reviewer sees: 1\t- the cache halves read latency",
        "reviewer writes: Error: Permission denied: reviewer may not write in scope team:research",
        "outsider finds 0 records in team:research",
    ]
    assert re.fullmatch(rf"outsider get: RecordUnavailable: no record '{ID}' that you may read", lines[5])
    assert lines[6:] == [
        "after the revoke, reviewer sees: Error: Permission denied: reviewer may not read in scope team:research",
        "on the chain: grant researcher ['read', 'write']; grant reviewer ['read']; revoke reviewer ['read']",
        "chain check: OK",
    ]


def test_shared_folder() -> None:
    assert run_example("shared_folder.py") == [
        "researcher: Successfully renamed /memories/draft.md to /memories/team/cache.md",
        "researcher sees: /memories, /memories/team/, /memories/team/cache.md",
        "reviewer sees: /memories, /memories/team/, /memories/team/cache.md",
        "reviewer writes: Error: Permission denied: reviewer may not write in scope team:research",
        "after the revoke, reviewer sees: /memories",
        "and reads: The path /memories/team/cache.md does not exist. Please provide a valid path.",
    ]


def test_erasure_on_request() -> None:
    assert run_example("erasure_on_request.py") == [
        "before: 3 copies of ana@example.com in the database files",
        "forgot 2 records",
        "after: 0 copies of ana@example.com in the database files",
        "history of the first record: RecordUnavailable",
        "still there: ['The login bug is fixed in 2.3']",
        "chain check: OK, 3 erased versions, 0 problems",
        "audit: seq 1 put v1: erased, forgotten by seq 5",
        "audit: seq 2 put v2: erased, forgotten by seq 5",
        "audit: seq 3 put v1: erased, forgotten by seq 5",
        "audit: seq 5 forget by support-bot, reason 'erasure request from Ana, 2026-11-30'",
        "the export holds the address: False",
    ]


def test_verify_export_alone_makes_an_export_and_checks_it() -> None:
    """Run as it is, without arguments: it makes what it checks (an export of a signed database), passes it,
    and catches one changed line. With arguments it checks a given export (tests/audit/test_export.py)."""
    lines = run_example("verify_export.py")
    assert lines[0] == "made an export of 7 entries; checking it:"
    assert re.fullmatch(r"OK: head 6:[0-9a-f]{64}", lines[1])
    assert lines[2:] == [
        "the same export, one line changed:",
        "line 3 (seq 2): agent does not match the entry",
        "FAILED: 1 problems",
    ]


def test_verify_proof_alone_makes_a_bundle_and_a_proof_and_checks_them() -> None:
    """Run as it is: a bundle and a consistency proof it made are accepted, a bundle with another index is
    not. With arguments it checks given files (tests/transparency/test_database.py)."""
    lines = run_example("verify_proof.py")
    origin = r"mnemo\.local/[0-9a-f]{32}"
    assert lines[0] == "made a database, a key, the bundle of seq 1, two checkpoints and the proof between them"
    assert re.fullmatch(rf"OK: seq 1 \(put by agent-1, hash [0-9a-f]{{64}}\) is in the tree of 4 entries of {origin}",
                        lines[1]), lines[1]
    assert re.fullmatch(rf"OK: the tree of 4 entries of {origin} extends the tree of 2 entries", lines[2]), lines[2]
    assert lines[3:] == [
        "the bundle, its index changed:",
        "the entry is not the Mnemo entry of seq 2",
        "the inclusion path does not lead to the checkpoint's root",
        "FAILED: 2 problems",
    ]
