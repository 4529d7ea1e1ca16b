"""Recall's core, whatever stores the index: text analysis (analysis), the query syntax and what a match
is (query), and Okapi BM25 over statistics the caller computes (bm25). docs/RECALL.md is the contract."""
