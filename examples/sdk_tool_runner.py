"""Claude's memory tool through the Anthropic SDK's tool runner, its files kept in Mnemo.

    pip install -e '.[anthropic-memory-tool]'      # in the checkout
    python examples/sdk_tool_runner.py

This runs offline: a scripted transport plays the API (the SDK's own MockTransport), answering with the
tool calls Claude would make, so no key and no network are needed. To talk to Claude, drop
`http_client=...` and set ANTHROPIC_API_KEY: nothing else changes.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import anthropic
import httpx2  # the SDK's HTTP layer; only the scripted transport needs it

from mnemo import MnemoClient
from mnemo.tools.anthropic import MnemoMemoryTool

MODEL = "claude-sonnet-5-5"

# What the scripted "API" answers, one message per request.
SCRIPT: list[dict[str, Any]] = [
    {"type": "tool_use", "id": "toolu_1", "name": "memory", "input": {"command": "view", "path": "/memories"}},
    {"type": "tool_use", "id": "toolu_2", "name": "memory",
     "input": {"command": "create", "path": "/memories/preferences.md", "file_text": "- travels by train\n"}},
    {"type": "text", "text": "Noted: you travel by train."},
    # a later conversation: the memory is all that carries over
    {"type": "tool_use", "id": "toolu_3", "name": "memory",
     "input": {"command": "view", "path": "/memories/preferences.md"}},
    {"type": "text", "text": "You prefer trains, so here are the night trains to Lisbon."},
]


class ScriptedAPI:
    """Stands in for api.anthropic.com: records each request, answers with the next scripted block."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.requests.append(json.loads(request.content))
        block = SCRIPT[len(self.requests) - 1]
        return httpx2.Response(200, json={
            "id": f"msg_{len(self.requests)}", "type": "message", "role": "assistant", "model": MODEL,
            "content": [block], "stop_reason": "tool_use" if block["type"] == "tool_use" else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
        })


def converse(sdk: anthropic.Anthropic, memory: MnemoMemoryTool, text: str) -> str:
    runner = sdk.beta.messages.tool_runner(
        model=MODEL, max_tokens=1024, tools=[memory], messages=[{"role": "user", "content": text}],
    )
    final = runner.until_done()
    return "".join(getattr(block, "text", "") for block in final.content)


def main() -> None:
    api = ScriptedAPI()
    sdk = anthropic.Anthropic(api_key="sk-offline", max_retries=0,
                              http_client=httpx2.Client(transport=httpx2.MockTransport(api)))
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "memory.mnemo.db")
        with MnemoClient(db, agent_id="assistant") as client:
            memory = MnemoMemoryTool(client)  # the memory tool, in the agent's home scope
            print("user: I always travel by train.")
            print("claude:", converse(sdk, memory, "I always travel by train."))
            print("user: Plan my trip to Lisbon.")
            print("claude:", converse(sdk, memory, "Plan my trip to Lisbon."))

            print(f"the SDK sent the tool as: {json.dumps(api.requests[0]['tools'])}")
            for request in api.requests:
                for block in request["messages"][-1]["content"]:
                    if isinstance(block, dict) and block.get("type") == "tool_result":
                        print(f"tool result for {block['tool_use_id']}: {json.dumps(block['content'])}")
            for record in client.query(tags=["memorytool"]):
                print(f"stored: {record.tags[1]} v{record.version} {record.content!r}")
            print(f"chain check: {'OK' if client.verify().ok else 'FAILED'}")


if __name__ == "__main__":
    main()
