"""The expected contents of a db under crash testing, and the all-or-nothing check after a crash.

A db's state is `{record id: (version, content digest, tags)}` over every live record. A writer announces
each operation before it runs (an *intent*: the records it sets, drops and creates) and acknowledges it
after it returned. After a crash the state must be the acknowledged model, or the model with the one
operation in flight applied completely: never anything in between.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from mnemo import MnemoClient

Value = tuple[int, str, tuple[str, ...]]
State = dict[str, Value]


def digest(content: str | bytes) -> str:
    data = content.encode("utf-8") if isinstance(content, str) else content
    return hashlib.sha256(data).hexdigest()[:16]


def value(version: int, content: str | bytes, tags: tuple[str, ...] | list[str]) -> Value:
    return (version, digest(content), tuple(sorted(tags)))


def db_state(client: MnemoClient) -> State:
    """Every live record the client may read, content read from disk."""
    return {r.id: value(r.version, r.content, r.tags) for r in client.query()}


def _val(v: Any) -> Value:
    return (int(v[0]), str(v[1]), tuple(v[2]))


@dataclass
class Intent:
    """One operation's effect: records set to a new value, records dropped, records created."""

    seq: int
    op: str
    set: dict[str, Value] = field(default_factory=dict)
    drop: list[str] = field(default_factory=list)
    new: list[Value] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({"t": "intent", "i": self.seq, "op": self.op, "set": self.set, "drop": self.drop,
                           "new": self.new})

    @classmethod
    def from_obj(cls, obj: dict[str, Any]) -> Intent:
        return cls(
            seq=int(obj["i"]), op=str(obj["op"]),
            set={k: _val(v) for k, v in obj["set"].items()},
            drop=[str(x) for x in obj["drop"]],
            new=[_val(v) for v in obj["new"]],
        )  # fmt: skip

    def applied(self, model: State, new_ids: list[str] | None) -> State:
        """The model after this operation; `new_ids` None: leave the created records out."""
        out = dict(model)
        out.update(self.set)
        for rid in self.drop:
            out.pop(rid, None)
        if new_ids is not None:
            for rid, v in zip(new_ids, self.new, strict=True):
                out[rid] = v
        return out


def matches_after(actual: State, model: State, intent: Intent) -> bool:
    """Is `actual` the model with `intent` applied in full (new records under ids it chose)?"""
    known = intent.applied(model, None)
    if any(actual.get(rid) != v for rid, v in known.items()):
        return False
    extra = [v for rid, v in actual.items() if rid not in known]
    return Counter(extra) == Counter(intent.new)


def adopt_after(actual: State, model: State, intent: Intent) -> State:
    """The model after an in-flight operation that turned out to have landed: new ids from `actual`."""
    known = intent.applied(model, None)
    return {**known, **{rid: v for rid, v in actual.items() if rid not in known}}


def describe_difference(actual: State, expected: State) -> str:
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    changed = sorted(k for k in set(actual) & set(expected) if actual[k] != expected[k])
    parts = []
    if missing:
        parts.append(f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}")
    if extra:
        parts.append(f"unexpected {[(k, actual[k]) for k in extra[:5]]}")
    if changed:
        parts.append(f"changed {[(k, expected[k], actual[k]) for k in changed[:5]]}")
    return "; ".join(parts) or "identical"
