"""Bring memories in, take them out (docs/TRANSFER.md).

`import_source(server, open_source(path))` writes what other tools keep (a folder such as the Anthropic
SDK's filesystem memory tool's, Claude Code's memory files, the reference MCP memory server's knowledge
graph, mcp-memory-service and mem0 exports) as memory-tool files of a `MnemoMemoryToolServer`'s scope,
in one transaction; `export_memories(client, directory)` writes what an agent may read as plain files
and JSON Lines, with a manifest of hashes. `mnemo import` and `mnemo export` are these two calls.
"""

from mnemo.transfer.claude_code import ClaudeCodeSource
from mnemo.transfer.export import EXPORT_FORMATS, ExportError, ExportReport, export_memories
from mnemo.transfer.folder import FolderSource
from mnemo.transfer.graph import KnowledgeGraphSource
from mnemo.transfer.importing import ImportRefused, ImportReport, import_source
from mnemo.transfer.items import Skipped, Source, SourceError, SourceFile
from mnemo.transfer.services import Mem0Source, MemoryServiceSource
from mnemo.transfer.sources import FORMATS, open_source

__all__ = [
    "EXPORT_FORMATS",
    "FORMATS",
    "ClaudeCodeSource",
    "ExportError",
    "ExportReport",
    "FolderSource",
    "ImportRefused",
    "ImportReport",
    "KnowledgeGraphSource",
    "Mem0Source",
    "MemoryServiceSource",
    "Skipped",
    "Source",
    "SourceError",
    "SourceFile",
    "export_memories",
    "import_source",
    "open_source",
]
