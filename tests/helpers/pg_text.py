"""What the tests of PostgreSQL's text index share (tests/storage/postgres/test_text_*.py): its rows as the
tables hold them and as the chain says they must be, records of every kind to index, and the answers of a
set of recalls to compare between databases."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from helpers.pg import Schema
from mnemo import MnemoClient
from mnemo.recall.analysis import atoms, terms
from mnemo.storage.postgres.text_index import POSITIONS_MAX


def index_rows(pg: Schema) -> dict[str, list[tuple[Any, ...]]]:
    """The text index's rows, in order."""
    return {
        "docs": pg.sql("SELECT seq, id, scope, length FROM mnemo_docs ORDER BY seq"),
        "terms": [(seq, term, tf, length, scope, None if places is None else bytes(places)) for seq, term, tf, length,
                  scope, places in pg.sql("SELECT seq, term, tf, length, scope, positions FROM mnemo_terms "
                                          "ORDER BY seq, term")],
        "scopes": pg.sql("SELECT scope, docs, length FROM mnemo_text_scopes ORDER BY scope"),
    }


def expected_rows(c: MnemoClient) -> dict[str, list[tuple[Any, ...]]]:
    """The rows the index must hold for what the client reads (every live record, for the owner): each
    text record's latest version, its terms counted, with where each stands among the text's atoms (their
    number plus one, then each one's gap from the one before, varints; NULL past POSITIONS_MAX), each
    scope's totals."""
    docs, rows = [], []
    scopes: dict[str, tuple[int, int]] = {}
    for r in sorted(c.query(), key=lambda r: r.seq):
        if not isinstance(r.content, str):
            continue
        found = terms(r.content)
        places = atoms(r.content)
        docs.append((r.seq, r.id, r.scope, len(found)))
        for term, tf in sorted(Counter(found).items()):
            at = [i for i, atom in enumerate(places) if atom == term]
            gaps = [b - a for a, b in zip([0, *at], at, strict=False)]
            packed = None if len(at) > POSITIONS_MAX else varints(len(at) + 1, *gaps)
            rows.append((r.seq, term, tf, len(found), r.scope, packed))
        n, length = scopes.get(r.scope, (0, 0))
        scopes[r.scope] = (n + 1, length + len(found))
    return {"docs": docs, "terms": rows, "scopes": [(s, n, length) for s, (n, length) in sorted(scopes.items())]}


def varints(*values: int) -> bytes:
    """Unsigned LEB128: 7 bits a byte, the lowest first, the high bit set on every byte but the last."""
    out = bytearray()
    for value in values:
        while True:
            out.append(value & 0x7F | (0x80 if value > 0x7F else 0))
            value >>= 7
            if not value:
                break
    return bytes(out)


def varied(c: MnemoClient) -> dict[str, str]:
    """Records of every kind: text in several scopes, bytes, an update, a forget, a long word."""
    a = c.remember("alpha beta gamma", scope="team:a", tags=["x"])
    b = c.remember("beta delta snake_case " + "Long" * 100, scope="team:b")
    c.remember(b"bytes alpha", scope="team:a")
    c.update(a.id, content="alpha beta beta")
    gone = c.remember("alpha forgotten", scope="team:a")
    c.forget(gone.id)
    return {"a": a.id, "b": b.id}


def doc_seq(pg: Schema, rec_id: str) -> int:
    """The seq of the document of record `rec_id`."""
    ((seq,),) = pg.sql("SELECT seq FROM mnemo_docs WHERE id = %s", [rec_id])
    return int(seq)


QUERIES = [
    "alpha", "beta", "alpha beta", "beta -gamma", '"alpha beta"', '"beta beta"', "al*", "be* -alpha", "snake",
    "snake_case", '"snake case"', "long*", "Long" * 100, "東京", "café", "nothing", '"beta alpha" delta', "-sna* beta",
    "state-of-the-art", "de*", "ga* gamma",
]
FILTERS: list[dict[str, Any]] = [
    {}, {"tags": ["x"]}, {"any_tags": ["x", "y"]}, {"scope": "team:a"}, {"scope": "team:*"}, {"limit": 2},
]


def recall_answers(c: MnemoClient, by: str) -> list[list[tuple[Any, float]]]:
    out = []
    for query in QUERIES:
        for options in FILTERS:
            out.append([(getattr(h.record, by), h.score) for h in c.recall(query, **options)])
    return out


def same_answers(left: list[list[tuple[Any, float]]], right: list[list[tuple[Any, float]]]) -> None:
    assert [[key for key, _ in hits] for hits in left] == [[key for key, _ in hits] for hits in right]
    for hits_l, hits_r in zip(left, right, strict=True):
        for (_, score_l), (_, score_r) in zip(hits_l, hits_r, strict=True):
            assert score_l == pytest.approx(score_r, abs=1e-9)
