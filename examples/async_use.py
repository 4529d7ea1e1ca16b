"""Mnemo from asyncio: a shared client off the event loop, and the async memory tool in the SDK's runner.

    pip install -e '.[anthropic-memory-tool]'      # in the checkout
    python examples/async_use.py

`MnemoClient` is synchronous and thread-safe: one client serves many coroutines through
`asyncio.to_thread`, so a write that waits for its fsync never blocks the event loop, and concurrent
writers share one fsync. `AsyncMnemoMemoryTool` is the memory tool for `AsyncAnthropic`'s tool runner;
here a scripted transport plays the API, so this runs offline.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
from typing import Any

import anthropic
import httpx2  # the SDK's HTTP layer; only the scripted transport needs it

from mnemo import Conflict, MnemoClient
from mnemo.tools.anthropic import AsyncMnemoMemoryTool

MODEL = "claude-sonnet-5-5"


async def note_taker(client: MnemoClient, name: str, notes: int) -> list[str]:
    """One of several coroutines writing through the same client at once."""
    ids = []
    for i in range(notes):
        record = await asyncio.to_thread(client.remember, f"{name}: note {i}", tags=["notes", name])
        ids.append(record.id)
    return ids


async def bump(client: MnemoClient, rec_id: str) -> int:
    """Read-modify-write from many coroutines: expected_version turns a lost update into a retry."""
    while True:
        current = await asyncio.to_thread(client.get, rec_id)
        try:
            await asyncio.to_thread(client.update, rec_id, content=str(int(current.content) + 1),
                                    expected_version=current.version)
            return current.version + 1
        except Conflict:
            continue  # someone else updated it in between: read again


SCRIPT: list[dict[str, Any]] = [
    {"type": "tool_use", "id": "toolu_1", "name": "memory",
     "input": {"command": "create", "path": "/memories/standup.md", "file_text": "- ship the release\n"}},
    {"type": "text", "text": "Saved your stand-up note."},
]


def scripted_api(requests: list[dict[str, Any]]) -> httpx2.MockTransport:
    def answer(request: httpx2.Request) -> httpx2.Response:
        requests.append(json.loads(request.content))
        block = SCRIPT[len(requests) - 1]
        return httpx2.Response(200, json={
            "id": f"msg_{len(requests)}", "type": "message", "role": "assistant", "model": MODEL,
            "content": [block], "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
        })

    return httpx2.MockTransport(answer)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "memory.mnemo.db")
        with MnemoClient(db, agent_id="assistant") as client:
            written = await asyncio.gather(*(note_taker(client, f"worker-{w}", 5) for w in range(4)))
            print(f"4 coroutines wrote {sum(map(len, written))} notes through one client")
            print(f"notes of worker-2: {[r.content for r in client.query(tags=['worker-2'])]}")

            counter = client.remember("0", tags=["counter"])
            versions = await asyncio.gather(*(bump(client, counter.id) for _ in range(10)))
            print(f"10 concurrent increments: counter = {client.get(counter.id).content}, "
                  f"versions {sorted(versions)[0]}..{sorted(versions)[-1]}, none lost")

            requests: list[dict[str, Any]] = []
            sdk = anthropic.AsyncAnthropic(api_key="sk-offline", max_retries=0,
                                           http_client=httpx2.AsyncClient(transport=scripted_api(requests)))
            runner = sdk.beta.messages.tool_runner(
                model=MODEL, max_tokens=1024, tools=[AsyncMnemoMemoryTool(client)],
                messages=[{"role": "user", "content": "Note for stand-up: ship the release."}],
            )
            final = await runner.until_done()
            print("claude:", "".join(getattr(block, "text", "") for block in final.content))
            note = client.query(tags=["path:/memories/standup.md"])[0]
            print(f"the async tool stored {note.tags[1]}: {note.content!r}")
            print(f"chain check: {'OK' if client.verify().ok else 'FAILED'}, {client.stats()['entries']} entries")


if __name__ == "__main__":
    asyncio.run(main())
