"""How hybrid recall fuses its two rankings, measured: a known-item task over real text, the docstrings of
this Python's standard library functions, where each query is a function's name split into its words
(`get_terminal_size` is "get terminal size") and the one relevant record is that function's docstring.
A name and its docstring share some words and not others, as a memory and the words an agent later
looks for it with do.

Reports MRR and success@10 of lexical recall (BM25), semantic recall (the local embedder's cosine),
reciprocal rank fusion (k = 60) and the convex combination of normalised scores at several weights of
the semantic side (mnemo.recall.fusion). Run: `python -m benchmarks.fusion_known_item [--queries N]`.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import re
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from mnemo import MnemoClient
from mnemo.recall.embedding import check_embedder, embed

SEED = 36
RRF_K = 60


def known_items(limit_files: int = 400) -> list[tuple[str, str]]:
    """(query, docstring) of public functions with a name of 2+ words and a docstring of 40+ characters,
    one per name."""
    root = sysconfig.get_paths()["stdlib"]
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs
                   if f.endswith(".py") and "test" not in d and "site-packages" not in d)[:limit_files * 4]
    seen: dict[str, str] = {}
    for path in files:
        try:
            with open(path, encoding="utf-8") as source:
                tree = ast.parse(source.read())
        except (SyntaxError, UnicodeDecodeError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                doc = ast.get_docstring(node)
                words = [w for w in node.name.split("_") if w]
                if doc and len(doc) >= 40 and len(words) >= 2 and node.name not in seen:
                    seen[node.name] = doc
    return [(" ".join(name.split("_")).strip(), doc) for name, doc in sorted(seen.items())]


def ranks(scores: dict[int, float], n: int) -> np.ndarray:
    """Each document's rank (1 = best) under `scores` (absent: 0), ties broken by index."""
    full = np.zeros(n)
    for i, s in scores.items():
        full[i] = s
    order = np.lexsort((np.arange(n), -full))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(1, n + 1)
    return out


def paraphrases() -> tuple[list[str], list[tuple[str, set[int]]]]:
    """The labelled quality set (tests/data/recall_quality/): its records, and each query with the
    positions of its relevant records."""
    folder = Path(__file__).resolve().parents[1] / "tests" / "data" / "recall_quality"
    with (folder / "corpus.jsonl").open(encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    at = {row["id"]: i for i, row in enumerate(rows)}
    with (folder / "queries.jsonl").open(encoding="utf-8") as f:
        asked = [json.loads(line) for line in f]
    return [row["text"] for row in rows], [(q["query"], {at[r] for r in q["relevant"]}) for q in asked]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--task", choices=["known-item", "paraphrase"], default="known-item",
                        help="known-item: stdlib function names as queries; paraphrase: the labelled quality set")
    args = parser.parse_args(argv)
    if args.task == "known-item":
        items = known_items()
        docs = [doc for _, doc in items]
        rng = random.Random(SEED)
        picked = rng.sample(range(len(items)), min(args.queries, len(items)))
        asked = [(re.sub(r"[^\w ]", " ", items[q][0]), {q}) for q in picked]
    else:
        docs, asked = paraphrases()
    embedder = check_embedder("local")
    vectors = embed(embedder, docs)
    with tempfile.TemporaryDirectory() as tmp, MnemoClient(os.path.join(tmp, "k.db"), "bench", durability="none") as c:
        with c.transaction() as t:
            ids = [t.remember(doc).id for doc in docs]
        where = {rec_id: i for i, rec_id in enumerate(ids)}
        results: dict[str, list[int]] = {}
        for query, relevant in asked:
            found = c.recall(query, mode="lexical", limit=1000) if query.strip() else []
            lexical = {where[r.record.id]: r.score for r in found}
            cos = vectors @ embed(embedder, [query])[0]
            lex_rank = ranks(lexical, len(docs))
            sem_rank = ranks(dict(enumerate(cos.tolist())), len(docs))
            matched = np.isin(np.arange(len(docs)), list(lexical))
            rrf = 1 / (RRF_K + sem_rank) + np.where(matched, 1 / (RRF_K + lex_rank), 0)
            low, high = cos.min(), cos.max()
            best = max(lexical.values(), default=0.0)
            lex = np.zeros(len(docs))
            for i, s in lexical.items():
                lex[i] = s / best
            rankings: dict[str, Any] = {
                "lexical": np.where(matched, lex_rank, len(docs)), "semantic": sem_rank,
                "rrf": ranks(dict(enumerate(rrf.tolist())), len(docs)),
            }
            for alpha in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8):
                fused = alpha * (cos - low) / (high - low) + (1 - alpha) * lex
                rankings[f"convex {alpha}"] = ranks(dict(enumerate(fused.tolist())), len(docs))
            for name, rank_of in rankings.items():
                results.setdefault(name, []).append(int(min(rank_of[r] for r in relevant)))
    python = sys.version.split()[0]
    print(f"{args.task} task: {len(asked)} queries over {len(docs)} records (Python {python})")
    print("| ranking | MRR | success@10 |")
    print("|---|---|---|")
    for name, found_at in results.items():
        arr = np.asarray(found_at)
        print(f"| {name} | {np.mean(np.where(arr <= 10, 1 / arr, 0)):.3f} | {np.mean(arr <= 10):.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
