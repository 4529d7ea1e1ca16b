"""Recall's labelled quality set (tests/data/recall_quality/, README.md there): well formed (at least 100
queries, each naming records of the corpus and sharing at most two content words with them), and on it
hybrid recall with the local embedder beats lexical recall on success@10 and MRR."""

from __future__ import annotations

import importlib.util

import pytest
from helpers.recall_quality import DATA, corpus, evaluate, queries, shared_words


def test_the_set_is_well_formed() -> None:
    texts, asked = corpus(), queries()
    assert len(texts) >= 1000 and len(asked) >= 100
    assert len({q.text for q in asked}) == len(asked)
    for query in asked:
        assert query.relevant and set(query.relevant) <= texts.keys(), query
        assert shared_words(query, texts) <= 2, query  # found by meaning, not by its words
    assert (DATA / "README.md").read_text(encoding="utf-8").startswith("# Recall's labelled quality set")


@pytest.mark.skipif(importlib.util.find_spec("wordllama") is None, reason="the `semantic` extra is not installed")
def test_hybrid_recall_beats_lexical_recall_on_it() -> None:
    from mnemo.recall.embedding import check_embedder

    scores = evaluate(check_embedder("local"))
    lexical, hybrid = scores["lexical"], scores["hybrid"]
    assert hybrid.mrr > lexical.mrr and hybrid.success_at_10 > lexical.success_at_10, scores
