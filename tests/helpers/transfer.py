"""What the tests of mnemo.transfer share: folders written and read back whole, by the SDK's own
filesystem memory tool or byte for byte."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from mnemo import MnemoClient, MnemoMemoryToolServer


def write_tree(root: Path, files: dict[str, bytes | str]) -> Path:
    """Each file at its relative path below `root` (folders made as needed)."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return root


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file below `root`, by relative path, with its bytes (links and hidden names too)."""
    out: dict[str, bytes] = {}
    for folder, _dirs, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                out[str(path.relative_to(root))] = path.read_bytes()
    return out


def sdk_folder(base: Path, files: dict[str, str]) -> Path:
    """The folder the Anthropic SDK's BetaLocalFilesystemMemoryTool(base_path=base) keeps, written by
    that tool's own `create` (paths relative to /memories); returns its `memories` folder."""
    from anthropic.tools import BetaLocalFilesystemMemoryTool
    from anthropic.types.beta import BetaMemoryTool20250818CreateCommand

    tool = BetaLocalFilesystemMemoryTool(base_path=str(base))
    for rel, text in files.items():
        tool.create(BetaMemoryTool20250818CreateCommand(command="create", path=f"/memories/{rel}", file_text=text))
    return base / "memories"


def view(server: MnemoMemoryToolServer, path: str) -> tuple[str, bool]:
    """The memory tool's `view` of a path: its text, and whether it is an error."""
    block = server.handle({"type": "tool_use", "id": "t", "name": "memory", "input": {"command": "view", "path": path}})
    return block["content"], bool(block.get("is_error"))


def records_state(client: MnemoClient) -> list[tuple[str, tuple[str, ...], str | bytes, Any]]:
    """Every record `client` may read, as what an export must keep of it: scope, tags (sorted), content
    and metadata, sorted."""
    state = []
    for info in client.list_records():
        record = client.get(info.id)
        state.append((record.scope, tuple(sorted(record.tags)), record.content, record.metadata))
    return sorted(state, key=repr)


def restore(export: Path, client: MnemoClient) -> None:
    """An export written back into `client`'s database: each folder of the manifest imported by
    `mnemo import` into the scope the manifest names, and each line of records.jsonl remembered."""
    from mnemo.transfer import import_source, open_source

    manifest = json.loads((export / "manifest.json").read_text(encoding="utf-8"))
    for folder in manifest["folders"]:
        server = MnemoMemoryToolServer(client, scope=folder["scope"])
        report = import_source(server, open_source(export / folder["path"]))
        assert report.skipped == ()
    for line in (export / "records.jsonl").read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        content = doc["content"] if "content" in doc else base64.b64decode(doc["content_base64"])
        client.remember(content, tags=doc["tags"], metadata=doc["metadata"], scope=doc["scope"])
