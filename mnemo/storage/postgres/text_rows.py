"""The rows a commit writes to the text index (text_index.py), in its own transaction: those of the
documents an entry brings (TextRows: mnemo_index_text's arrays) and those of new records' puts
(put_text_columns: mnemo_put's)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ...chain.codec import SALT_SIZE
from .text_index import Doc, doc_of


class TextRows:
    """The rows a commit writes to the text index, as the arrays mnemo_index_text takes: the documents
    that come in (seq, id, scope, length) and their terms (term, the document's position from 1, tf,
    positions)."""

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.ids: list[str] = []
        self.scopes: list[str] = []
        self.lengths: list[int] = []
        self.terms: list[str] = []
        self.docs: list[int] = []
        self.tfs: list[int] = []
        self.positions: list[bytes | None] = []
        self.size = 0  # the bytes of its terms, about

    def add(self, seq: int, rec_id: str, scope: str, doc: Doc) -> None:
        self.seqs.append(seq)
        self.ids.append(rec_id)
        self.scopes.append(scope)
        self.lengths.append(doc.length)
        k = len(self.ids)
        for term, tf in doc.counts.items():
            places = doc.positions[term]
            self.terms.append(term)
            self.docs.append(k)
            self.tfs.append(tf)
            self.positions.append(places)
            self.size += len(term) + 8 + (len(places) if places is not None else 0)

    def columns(self, gone: list[str], gone_seqs: list[int]) -> list[Any]:
        """mnemo_index_text's arguments, with the records whose documents leave and their versions."""
        return [gone, gone_seqs, self.seqs, self.ids, self.scopes, self.lengths, self.terms, self.docs, self.tfs,
                self.positions]


def put_text_columns(payloads: Iterable[bytes]) -> list[Any]:
    """mnemo_put's text index arrays for new records' puts, given their payloads in order: d_put, d_len
    (the put, from 1, and the length of each document) and w_term, w_doc, w_tf, w_pos (each of their
    terms, with its document's position in d_put, and its positions)."""
    d_put: list[int] = []
    d_len: list[int] = []
    w_term: list[str] = []
    w_doc: list[int] = []
    w_tf: list[int] = []
    w_pos: list[bytes | None] = []
    for k, payload in enumerate(payloads, 1):
        doc = doc_of(payload[SALT_SIZE:])
        if doc is None:
            continue
        d_put.append(k)
        d_len.append(doc.length)
        for term, tf in doc.counts.items():
            w_term.append(term)
            w_doc.append(len(d_put))
            w_tf.append(tf)
            w_pos.append(doc.positions[term])
    return [d_put, d_len, w_term, w_doc, w_tf, w_pos]


__all__ = ["TextRows", "put_text_columns"]
