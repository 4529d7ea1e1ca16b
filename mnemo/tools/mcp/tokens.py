"""Bearer tokens for the HTTP transport: each token names the agent whose memory it opens.

A tokens source is one of two formats, with one grammar:

- lines `TOKEN AGENT_ID`: the token, whitespace, then the agent id, which runs to the end of the line
  or to a comment. A comment starts at a `#` that begins the line (after any whitespace) or follows
  whitespace, and runs to the end of the line: `TOKEN alice  # laptop` is agent `alice`. Blank lines
  and comment lines are skipped.
- a JSON object `{"TOKEN": "AGENT_ID", ...}` (its first character other than whitespace is `{`).

In both, a token is at least `MIN_TOKEN_LENGTH` characters of RFC 6750's token alphabet
(`A-Za-z0-9-._~+/`, optionally ending in `=`), an agent id follows the rule of every agent id
(`mnemo.acl.check_agent_id`) and holds no comment (no `#` at its start or after whitespace, which the
lines format would read as one), and no token is listed twice. Error messages name the line or the
entry, never a token.
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
# Where a comment starts in the lines format: a `#` at the start, or after whitespace.
_COMMENT = re.compile(r"(?:^|\s)#")


def _check_pair(token: object, agent: object, source: str, at: str, seen: dict[str, tuple[str, str]]) -> None:
    """Check the entry at `at` (`line 3`, `entry 2`) and add it to `seen`: token -> (agent id, at)."""
    where = f"{source}: {at}"
    if not isinstance(token, str) or not _B64TOKEN.fullmatch(token):
        raise InvalidInput(f"{where}: a token must be letters, digits and -._~+/ (optionally ending in =)")
    if len(token) < MIN_TOKEN_LENGTH:
        raise InvalidInput(f"{where}: a token must be at least {MIN_TOKEN_LENGTH} characters long")
    if token in seen:
        raise InvalidInput(f"{where}: this token is listed twice (first at {seen[token][1]}): list each token once")
    try:
        checked = check_agent_id(agent, "agent id")
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    if _COMMENT.search(checked):
        raise InvalidInput(
            f"{where}: agent id {checked!r} holds a comment (a # at its start or after a space): "
            "write the agent id alone"
        )
    seen[token] = (checked, at)


def _json_entries(text: str, source: str) -> list[tuple[str, object]]:
    """The top-level object's entries, in order, duplicates kept (json.loads keeps only the last)."""
    pairs_of: dict[int, list[tuple[str, object]]] = {}

    def keep_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
        obj = dict(pairs)
        pairs_of[id(obj)] = pairs
        return obj

    try:
        table = json.loads(text, object_pairs_hook=keep_pairs)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise InvalidInput(f"{source}: not valid JSON: {exc.msg} at {where}") from None
    return pairs_of[id(table)]  # valid JSON that starts with `{` is an object


def parse_tokens(text: str, source: str) -> dict[str, str]:
    """Token -> agent id, from the text of a tokens source (see above); `source` names it in errors."""
    seen: dict[str, tuple[str, str]] = {}
    if text.lstrip().startswith("{"):
        for i, (token, agent) in enumerate(_json_entries(text, source), 1):
            _check_pair(token, agent, source, f"entry {i}", seen)
    else:
        for n, raw in enumerate(text.splitlines(), 1):
            comment = _COMMENT.search(raw)
            line = (raw if comment is None else raw[: comment.start()]).strip()
            if not line:
                continue
            parts = line.split(None, 1)
            if len(parts) != 2:
                raise InvalidInput(f"{source}: line {n}: expected `token agent_id`")
            _check_pair(parts[0], parts[1], source, f"line {n}", seen)
    if not seen:
        raise InvalidInput(f"{source}: no tokens")
    return {token: agent for token, (agent, _) in seen.items()}


def load_tokens(path: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The tokens of `path`, else of `$MNEMO_MCP_TOKENS` (the same formats); InvalidInput without any."""
    if path is not None:
        name = os.fspath(path)
        try:
            # utf-8-sig: a byte order mark at the start (some editors write one) is not part of a token.
            with open(name, encoding="utf-8-sig") as f:
                text = f.read()
                mode = os.fstat(f.fileno()).st_mode
        except OSError as exc:
            raise InvalidInput(f"cannot read the tokens file {name}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"cannot read the tokens file {name}: it is not UTF-8 text (at byte {exc.start}); save it as UTF-8"
            ) from None
        if mode & stat.S_IWOTH:
            # Whoever may write it may add a token of their own for any agent, the owner included.
            raise InvalidInput(
                f"the tokens file {name} is writable by every user (mode {stat.S_IMODE(mode):04o}): anyone could "
                f"add a token for any agent; make it writable by its owner alone (chmod go-w {name})"
            )
        if mode & (stat.S_IRGRP | stat.S_IROTH):
            # Not fatal (a container may mount it so), but worth saying: the tokens are the keys.
            print(f"mnemo mcp: warning: the tokens file {name} is readable by other users", file=sys.stderr)
        if mode & stat.S_IWGRP:
            # Not fatal (a user-private group, umask 002, makes files so), but its group could add a token.
            print(f"mnemo mcp: warning: the tokens file {name} is writable by its group: its members could add a "
                  "token for any agent", file=sys.stderr)
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
