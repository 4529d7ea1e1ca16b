"""Bearer tokens for the HTTP transport: each token names the agent whose memory it opens.

A tokens source is either JSON, an object `{"token": "agent_id", ...}`, or lines `token agent_id` (blank
lines and lines starting with `#` are skipped; the agent id is the rest of the line). Error messages
name the line, never the token.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import stat
import sys
from collections.abc import Mapping

from mnemo.acl import check_agent_id
from mnemo.errors import InvalidInput

__all__ = ["MIN_TOKEN_LENGTH", "TOKENS_ENV", "TokenTable", "load_tokens", "parse_tokens"]

TOKENS_ENV = "MNEMO_MCP_TOKENS"
MIN_TOKEN_LENGTH = 16
# RFC 6750's b64token: what may follow "Bearer " in an Authorization header.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def _check_pair(token: object, agent: object, where: str, seen: dict[str, str]) -> None:
    if not isinstance(token, str) or not _B64TOKEN.fullmatch(token):
        raise InvalidInput(f"{where}: a token must be letters, digits and -._~+/ (optionally ending in =)")
    if len(token) < MIN_TOKEN_LENGTH:
        raise InvalidInput(f"{where}: a token must be at least {MIN_TOKEN_LENGTH} characters long")
    if token in seen:
        raise InvalidInput(f"{where}: this token is listed twice")
    try:
        seen[token] = check_agent_id(agent, "agent id")
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """Token -> agent id, from the text of a tokens file; `source` names it in error messages."""
    tokens: dict[str, str] = {}
    if text.lstrip().startswith("{"):  # valid JSON that starts so is an object
        try:
            table: dict[str, object] = json.loads(text)
        except json.JSONDecodeError as exc:
            where = f"line {exc.lineno}, column {exc.colno}"
            raise InvalidInput(f"{source}: not valid JSON: {exc.msg} at {where}") from None
        for i, (token, agent) in enumerate(table.items(), 1):
            _check_pair(token, agent, f"{source}: entry {i}", tokens)
    else:
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise InvalidInput(f"{source}: line {n}: expected `token agent_id`")
            _check_pair(parts[0], parts[1].strip(), f"{source}: line {n}", tokens)
    if not tokens:
        raise InvalidInput(f"{source}: no tokens")
    return tokens


def load_tokens(path: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tokens of `path`, else of `$MNEMO_MCP_TOKENS` (the same formats); InvalidInput without any."""
    if path is not None:
        name = os.fspath(path)
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read()
                mode = os.fstat(f.fileno()).st_mode
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"cannot read the tokens file {name}: {exc}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            # Not fatal (a container may mount it so), but worth saying: the tokens are the keys.
            print(f"mnemo mcp: warning: the tokens file {name} is readable by other users", file=sys.stderr)
        return parse_tokens(text, name)
    env = os.environ if env is None else env
    value = env.get(TOKENS_ENV)
    if value is None or not value.strip():
        raise InvalidInput(f"the HTTP transport needs bearer tokens: --tokens FILE or ${TOKENS_ENV}")
    return parse_tokens(value, f"${TOKENS_ENV}")


class TokenTable:
    """Looks a presented token up without leaking, through timing, which token matched or how far.

    Tokens are kept only as SHA-256 digests; a lookup hashes the presented token and compares it with
    every entry in constant time (`hmac.compare_digest`), never stopping at a match.
    """

    def __init__(self, tokens: Mapping[str, str]) -> None:
        if not tokens:
            raise InvalidInput("no tokens")
        self._entries = [(self._digest(token), agent) for token, agent in tokens.items()]

    @staticmethod
    def _digest(token: str) -> bytes:
        return hashlib.sha256(token.encode("utf-8", errors="surrogatepass")).digest()

    @property
    def agents(self) -> list[str]:
        """The agents the tokens open, each once, in the order of the tokens."""
        return list(dict.fromkeys(agent for _, agent in self._entries))

    def agent_for(self, token: str) -> str | None:
        presented = self._digest(token)
        found: str | None = None
        for digest, agent in self._entries:
            if hmac.compare_digest(digest, presented) and found is None:
                found = agent
        return found
