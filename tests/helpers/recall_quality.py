"""Recall's labelled quality set (tests/data/recall_quality/): its corpus and queries, and success@10 and
MRR of each recall mode over it. Shared by its test (tests/recall/test_quality.py) and its benchmark
(benchmarks/recall_quality.py)."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from mnemo import MnemoClient

DATA = Path(__file__).resolve().parents[1] / "data" / "recall_quality"
_STOP_WORDS = (
    "a an the of to in on for and or is are be by with from as at it its this that what which how does do into "
    "one two all any i my me so up like there when where who whose"
)
STOP = frozenset(_STOP_WORDS.split(" "))


class Query(NamedTuple):
    text: str
    relevant: tuple[str, ...]


def corpus() -> dict[str, str]:
    """id -> text, in the file's order."""
    with (DATA / "corpus.jsonl").open(encoding="utf-8") as f:
        return {row["id"]: row["text"] for row in map(json.loads, f)}


def queries() -> list[Query]:
    with (DATA / "queries.jsonl").open(encoding="utf-8") as f:
        return [Query(row["query"], tuple(row["relevant"])) for row in map(json.loads, f)]


def content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP}


def shared_words(query: Query, texts: dict[str, str]) -> int:
    """The most content words the query shares with one of its relevant records."""
    return max(len(content_words(query.text) & content_words(texts[r])) for r in query.relevant)


class Scores(NamedTuple):
    success_at_10: float
    mrr: float


def evaluate(embedder: Any, modes: tuple[str, ...] = ("lexical", "semantic", "hybrid")) -> dict[str, Scores]:
    """success@10 and MRR (reciprocal rank of the first relevant record within the first 10, else 0) of
    each mode, over a fresh database holding the corpus."""
    texts = corpus()
    asked = queries()
    out: dict[str, Scores] = {}
    with tempfile.TemporaryDirectory() as tmp, \
            MnemoClient(os.path.join(tmp, "quality.mnemo.db"), "judge", durability="none", embedder=embedder) as c:
        with c.transaction() as t:
            name_of = {t.remember(text).id: key for key, text in texts.items()}
        for mode in modes:
            found = success = 0.0
            for query in asked:
                ranked = [name_of[r.record.id] for r in c.recall(query.text, mode=mode, limit=10)]
                rank = next((i for i, key in enumerate(ranked, 1) if key in query.relevant), None)
                if rank is not None:
                    success += 1
                    found += 1 / rank
            out[mode] = Scores(success / len(asked), found / len(asked))
    return out
