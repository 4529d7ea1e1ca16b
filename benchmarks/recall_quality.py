"""Recall's quality on its labelled set (tests/data/recall_quality/: 130 queries written against 1,025
docstrings of Python's standard library, each query sharing few words with its relevant records):
success@10 and MRR of lexical, semantic and hybrid recall with the local embedder, side by side.
Run: `python -m benchmarks.recall_quality`."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers.recall_quality import corpus, evaluate, queries, shared_words  # noqa: E402

from mnemo.recall.embedding import check_embedder  # noqa: E402


def main() -> int:
    texts, asked = corpus(), queries()
    overlap = Counter(shared_words(q, texts) for q in asked)
    print(f"{len(asked)} queries over {len(texts):,} records; content words a query shares with its relevant "
          f"record: " + ", ".join(f"{k}: {overlap[k]}" for k in sorted(overlap)))
    print()
    print("| mode | success@10 | MRR |")
    print("|---|---|---|")
    for mode, scores in evaluate(check_embedder("local")).items():
        print(f"| {mode} | {scores.success_at_10:.3f} | {scores.mrr:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
