"""`mnemo mcp` for the tests while the command line has no `mcp` command: the same options, run
through the library entry points `serve_stdio` and `serve_http`."""

from __future__ import annotations

import argparse
import gc
import sys

from mnemo.errors import MnemoError
from mnemo.tools.mcp import load_tokens


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mnemo mcp")
    parser.add_argument("--db")
    parser.add_argument("--agent")
    parser.add_argument("--scope")
    parser.add_argument("--read-only", action="store_true")
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--tokens")
    args = parser.parse_args(argv)
    try:
        if args.transport == "stdio":
            from mnemo.tools.mcp.app import serve_stdio

            serve_stdio(args.db, args.agent, args.scope, args.read_only)
        else:
            tokens = load_tokens(args.tokens)  # before the SDK is loaded: a refusal is quick
            from mnemo.tools.mcp.app import serve_http

            serve_http(args.db, tokens, host=args.host, port=args.port, agent=args.agent, scope=args.scope,
                       read_only=args.read_only)
    except (MnemoError, OSError) as exc:
        print(f"mnemo mcp: error: {exc}", file=sys.stderr)
        return 2
    finally:
        gc.freeze()  # exiting: skip the final collection of the SDK's large object graph (about a second)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
