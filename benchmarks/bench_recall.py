"""Recall: full-text search over the file backend's text index, beside SQLite FTS5 (and tantivy, for
reference), and what keeping that index costs the writes, the open and the memory.

    python -m benchmarks.bench_recall [--quick] [--records N] [--reps N] [--dir DIR] [--keep-data]
                                      [--profile] [--json FILE]

Two corpora, at 100,000 records (and 1,000,000 outside --quick; `--records N` for one size of your own):

- `synthetic`: the benchmarks' usual records (`common.make_record`: "memory {i}: " and 400 bytes of one
  filler text), so every record holds every filler word;
- `stdlib`: the docstrings (`ast`) and comments (`tokenize`) of this Python's standard library, files in
  sorted order, split into records of a paragraph or so. It has fewer records than the sizes measured,
  so it is repeated, each repetition k >= 1 with " (copy k)" appended to every record; the report says
  how many times.

What is measured (each row's case says which):

- queries/s of `recall(query, limit=10)` (1-3 words drawn from the corpus's own words, a seeded mix of
  common, middle and rare ones) beside SQLite FTS5 (an fts5 table, the words OR'ed, `ORDER BY rank`,
  which is `bm25()`, LIMIT 10, rows and their JSON decoded) and tantivy (the same words, OR, top 10,
  stored documents fetched), all in this process, repetitions interleaved;
- known-item success@10 on the stdlib corpus once (no repetition): a seeded sample of records, each
  searched for by 2-3 of its rarest words, and whether it is in the top 10, for all three;
- the text index's memory (VmRSS growth of a fresh process over the catch-up that builds it) beside the
  pages FTS5's index (not its content) takes on disk;
- opening with a snapshot that holds the caught-up text index beside the same database's snapshot written
  before any recall (every row pending), in fresh processes;
- the catch-up itself (indexing every record of the log), in a fresh process;
- `remember` (durability none and fsync), a transaction of 1,000 and `forget`, each on a database whose
  index is kept up to date beside one where recall never runs (see README.md, "Recall", for why this
  is the fair comparison).
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import gc
import hashlib
import importlib
import io
import json
import os
import pstats
import random
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import tokenize
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemo import MnemoClient

from .bench_core import WARMUP, _remember_all, _run_probe, scratch, specs
from .common import (
    AGENT,
    Config,
    RecordSpec,
    Result,
    Target,
    alternate,
    make_record,
    rate_samples,
    settled_rss_bytes,
    source_digest,
    table,
    write_json,
)


def _optional(module: str) -> Any:
    """An optional baseline's module, or None when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


# tantivy comes with the `bench` extra; without it, its reference rows are left out
tantivy: Any = _optional("tantivy")

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ("synthetic", "stdlib")
BUILD_TX = 10_000  # records per transaction while building a database (durability none)
LIMIT = 10
SYNTHETIC_TAG_GROUPS = 1_000
ABSENT = "qqzzxxq"  # a word no record of either corpus holds: its recall ranks nothing
COMMON_RANKS = 200  # the most frequent words of a corpus are its common ones
RARE_DF = 5  # a word at most this many records of the corpus (once) hold is rare
KNOWN_ITEM_POOL = 6  # a known item's query is drawn from its this many rarest words (held by 2+ records)
SEED = 20_261_204
PROFILE_SECONDS = 1.0  # of recall calls to profile
PROFILE_FORGETS = 20


# -- corpora -----------------------------------------------------------------------------------------


def _stdlib_files(root: str) -> list[str]:
    """The standard library's .py files under `root`, relative, sorted; installed packages left out."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if x not in ("site-packages", "dist-packages", "__pycache__")]
        found += [os.path.relpath(os.path.join(d, f), root) for f in files if f.endswith(".py")]
    return sorted(found)


def _file_texts(source: str) -> list[str]:
    """A module's docstrings (module, classes, functions) and comment blocks (consecutive comment
    lines, '#' and surrounding blanks removed), in the order of their first line."""
    items: list[tuple[int, int, str]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                items.append((getattr(node, "lineno", 0), 0, doc))
    block: list[str] = []
    start = last = -2
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        if block and line != last + 1:
            items.append((start, 1, "\n".join(block)))
            block = []
        if not block:
            start = line
        block.append(tok.string.lstrip("#").strip())
        last = line
    if block:
        items.append((start, 1, "\n".join(block)))
    items.sort(key=lambda item: (item[0], item[1]))
    return [text for _, _, text in items]


def _paragraphs(text: str) -> list[str]:
    """`text` split at blank lines into records of a paragraph or so: a paragraph shorter than 80
    characters is joined with the next one of the same text."""
    out: list[str] = []
    current = ""
    for para in re.split(r"\n\s*\n", text):
        para = para.strip()
        if not para:
            continue
        current = f"{current}\n\n{para}" if current else para
        if len(current) >= 80:
            out.append(current)
            current = ""
    if current:
        out.append(current)
    return out


_STDLIB: list[str] = []


def stdlib_corpus(cfg: Config | None = None) -> list[str]:
    """The stdlib corpus once, in a deterministic order (cached in this process, and in the work
    directory for --keep-data)."""
    if _STDLIB:
        return _STDLIB
    root = sysconfig.get_paths()["stdlib"]
    files = _stdlib_files(root)
    key = hashlib.sha256(json.dumps([sys.version, root, files]).encode()).hexdigest()[:12]
    cache = os.path.join(cfg.workdir, f"stdlib-corpus-{key}.json") if cfg is not None else None
    if cache is not None and os.path.exists(cache):
        with open(cache) as f:
            _STDLIB.extend(json.load(f))
        return _STDLIB
    t0 = time.perf_counter()
    skipped = 0
    for rel in files:
        try:
            with open(os.path.join(root, rel), "rb") as fh:
                data = fh.read()
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
            texts = _file_texts(data.decode(encoding))
        except (SyntaxError, UnicodeDecodeError, ValueError, LookupError, tokenize.TokenError):
            skipped += 1  # test data written in Python 2, or in a broken encoding on purpose
            continue
        for text in texts:
            _STDLIB.extend(_paragraphs(text))
    if cfg is not None:
        cfg.log(f"stdlib corpus: {len(_STDLIB):,} records from {len(files) - skipped:,} files of {root} "
                f"({skipped} unparsable files skipped), {sum(map(len, _STDLIB)) / 1e6:.1f} MB of text, "
                f"{time.perf_counter() - t0:.0f} s")
    if cache is not None:
        with open(cache, "w") as f:
            json.dump(_STDLIB, f)
    return _STDLIB


@dataclass(frozen=True)
class Corpus:
    """The first `n` records of a corpus: their texts, and how they are stored in Mnemo."""

    name: str
    n: int
    base: int  # records of the corpus once (stdlib), or n (synthetic)

    @property
    def repeats(self) -> float:
        return self.n / self.base

    @property
    def label(self) -> str:
        if self.name == "synthetic":
            return f"synthetic, {self.n:,} records"
        if self.n == self.base:
            return f"stdlib once, {self.n:,} records"
        return f"stdlib x{self.repeats:.1f}, {self.n:,} records"

    def text(self, i: int) -> str:
        if self.name == "synthetic":
            return make_record(i, SYNTHETIC_TAG_GROUPS).content
        base = stdlib_corpus()
        k, j = divmod(i, len(base))
        return base[j] if k == 0 else f"{base[j]} (copy {k})"

    def record(self, i: int) -> RecordSpec:
        if self.name == "synthetic":
            return make_record(i, SYNTHETIC_TAG_GROUPS)
        return RecordSpec(self.text(i), (f"k{i % 7}",), {"i": i, "source": "stdlib"})

    def texts(self) -> list[str]:
        return [self.text(i) for i in range(self.n)]

    def base_texts(self) -> list[str]:
        """The corpus once (what word frequencies are counted over)."""
        return [self.text(i) for i in range(min(self.n, self.base))]


def corpus(cfg: Config, name: str, n: int | None) -> Corpus:
    """Corpus `name` at n records (None: the stdlib corpus once)."""
    if name == "synthetic":
        assert n is not None
        return Corpus(name, n, n)
    base = len(stdlib_corpus(cfg))
    return Corpus(name, base if n is None else n, base)


# -- queries -----------------------------------------------------------------------------------------

_WORD = re.compile(r"[a-z0-9]+")


def words_of(text: str) -> list[str]:
    """A text's plain words: ASCII letters and digits, case folded, 2 characters or more. Each is one
    term for Mnemo, FTS5's unicode61 tokenizer and tantivy's default one alike (an identifier's parts
    are words here, and terms of Mnemo's index too)."""
    return [w for w in _WORD.findall(text.casefold()) if len(w) >= 2]


def doc_freqs(texts: Iterable[str]) -> Counter[str]:
    df: Counter[str] = Counter()
    for text in texts:
        df.update(set(words_of(text)))
    return df


KINDS = {
    "common": "holding a common word",
    "middle": "holding a middle word, no common one",
    "rare": "of rare words only",
}


@dataclass(frozen=True)
class QuerySet:
    """Queries as lists of words, and each one's kind: the most frequent band of its words (KINDS)."""

    queries: list[list[str]]
    kinds: list[str]


def make_queries(df: Counter[str], count: int, seed: int = SEED) -> QuerySet:
    """`count` queries of 1-3 distinct words, each word from a band picked at random: the common words
    (among the COMMON_RANKS most frequent, those held by at least 1/100 as many records as the most
    frequent one), the rare ones (held by at most RARE_DF records), and the middle."""
    ranked = sorted(df, key=lambda w: (-df[w], w))
    most = df[ranked[0]] if ranked else 0
    common = [w for w in ranked[:COMMON_RANKS] if df[w] > RARE_DF and df[w] >= most / 100]
    rest = ranked[len(common):]
    rare = sorted(w for w in rest if df[w] <= RARE_DF)
    middle = sorted(w for w in rest if df[w] > RARE_DF)
    bands = [band for band in (common, middle, rare) if band]
    rng = random.Random(seed)
    queries: list[list[str]] = []
    kinds: list[str] = []
    common_set, middle_set = set(common), set(middle)
    while len(queries) < count:
        words: list[str] = []
        for _ in range(rng.randint(1, 3)):
            word = rng.choice(rng.choice(bands))
            if word not in words:
                words.append(word)
        queries.append(words)
        kinds.append("common" if common_set.intersection(words) else "middle" if middle_set.intersection(words)
                     else "rare")
    return QuerySet(queries, kinds)


def known_items(texts: Sequence[str], df: Counter[str], count: int, seed: int = SEED) -> list[tuple[int, list[str]]]:
    """`count` records picked at random (records whose text occurs once in the corpus, with at least
    2 words of 3 letters or more that 2 or more records hold), each with 2 or 3 words drawn at random
    from its KNOWN_ITEM_POOL rarest such words. Words only the record holds are left out: one of them
    alone would find it whatever the ranking."""
    seen = Counter(texts)
    rng = random.Random(seed)
    order = list(range(len(texts)))
    rng.shuffle(order)
    out: list[tuple[int, list[str]]] = []
    for i in order:
        if seen[texts[i]] != 1:
            continue
        pool = sorted({w for w in words_of(texts[i]) if len(w) >= 3 and df[w] >= 2}, key=lambda w: (df[w], w))
        pool = pool[:KNOWN_ITEM_POOL]
        if len(pool) < 2:
            continue
        out.append((i, rng.sample(pool, min(len(pool), rng.choice((2, 3))))))
        if len(out) == count:
            break
    return out


# -- baselines ---------------------------------------------------------------------------------------

FTS_TABLES = ("docs_data", "docs_idx", "docs_docsize", "docs_config")  # FTS5's index, without docs_content


class Fts5:
    """An FTS5 table of the records (content indexed; the record's JSON in an unindexed column), default
    unicode61 tokenizer and detail=full, optimized after the bulk load."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    @classmethod
    def build(cls, path: str, c: Corpus) -> Fts5:
        if os.path.exists(path):
            os.unlink(path)
        db = cls(path)
        db.conn.execute("CREATE VIRTUAL TABLE docs USING fts5(content, meta UNINDEXED)")
        db.conn.execute("BEGIN")
        for start in range(0, c.n, 100_000):
            rows = []
            for i in range(start, min(c.n, start + 100_000)):
                rec = c.record(i)
                rows.append((i, rec.content, json.dumps({"tags": list(rec.tags), "metadata": rec.metadata})))
            db.conn.executemany("INSERT INTO docs (rowid, content, meta) VALUES (?, ?, ?)", rows)
        db.conn.execute("COMMIT")
        db.conn.execute("INSERT INTO docs (docs) VALUES ('optimize')")
        db.conn.execute("VACUUM")
        return db

    def search(self, words: Sequence[str]) -> list[int]:
        match = " OR ".join(f'"{w}"' for w in words)
        rows = self.conn.execute(
            "SELECT rowid, content, meta FROM docs WHERE docs MATCH ? ORDER BY rank LIMIT ?", (match, LIMIT)
        ).fetchall()
        return [json.loads(meta)["metadata"]["i"] for _, _, meta in rows]

    def index_bytes(self) -> int:
        """Bytes of the pages of FTS5's index tables: the file without the content table."""
        marks = ",".join("?" * len(FTS_TABLES))
        (size,) = self.conn.execute(f"SELECT sum(pgsize) FROM dbstat WHERE name IN ({marks})", FTS_TABLES).fetchone()
        return int(size)

    def close(self) -> None:
        self.conn.close()


class Tantivy:
    """A tantivy index of the records (default tokenizer, BM25), content and record number stored."""

    def __init__(self, path: str) -> None:
        assert tantivy is not None
        builder = tantivy.SchemaBuilder()
        builder.add_text_field("body", stored=True)
        builder.add_integer_field("i", stored=True)
        self.index = tantivy.Index(builder.build(), path=path)
        self.index.reload()
        self.searcher = self.index.searcher()

    @classmethod
    def build(cls, path: str, c: Corpus) -> Tantivy:
        assert tantivy is not None
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        db = cls(path)
        writer = db.index.writer(heap_size=256_000_000, num_threads=1)
        for i in range(c.n):
            writer.add_document(tantivy.Document(body=c.text(i), i=i))
        writer.commit()
        writer.wait_merging_threads()
        db.index.reload()
        db.searcher = db.index.searcher()
        return db

    def search(self, words: Sequence[str]) -> list[int]:
        searcher = self.searcher
        hits = searcher.search(self.index.parse_query(" ".join(words), ["body"]), LIMIT).hits
        return [int(searcher.doc(address).get_first("i")) for _, address in hits]


# -- the datasets ------------------------------------------------------------------------------------


def catch_up(client: MnemoClient) -> None:
    """Index every row written since the text index was last read: what recall does first, without
    the query (the store's index lock held, as recall holds it)."""
    store: Any = client._store
    with store._index_lock:
        store.catch_up_text()


def pending_rows(client: MnemoClient) -> int:
    store: Any = client._store
    return len(store.index.text.pending)


@dataclass
class Dataset:
    corpus: Corpus
    dir: str
    catch_up: list[dict[str, Any]] = field(default_factory=list)  # fresh-process catch-up probes
    fts_build_seconds: float = 0.0
    tantivy_build_seconds: float = 0.0

    @property
    def mnemo_path(self) -> str:
        return os.path.join(self.dir, "mnemo", "recall.mnemo.db")

    @property
    def snap_path(self) -> str:
        return self.mnemo_path + ".snap"

    @property
    def snap_pending(self) -> str:
        """The snapshot written when the database was built: every row pending."""
        return os.path.join(self.dir, "snap-pending")

    @property
    def snap_indexed(self) -> str:
        """The snapshot written after a catch-up: the text index in it."""
        return os.path.join(self.dir, "snap-indexed")

    @property
    def fts_path(self) -> str:
        return os.path.join(self.dir, "fts5.sqlite")

    @property
    def tantivy_path(self) -> str:
        return os.path.join(self.dir, "tantivy")

    def use_snapshot(self, which: str) -> None:
        shutil.copyfile(self.snap_pending if which == "pending" else self.snap_indexed, self.snap_path)


_DATASETS: dict[tuple[str, int], Dataset] = {}
MARKER_LAYOUT = 2  # of what a kept dataset's marker.json records


def _marker(c: Corpus) -> dict[str, Any]:
    digest = hashlib.sha256()
    for i in range(0, c.n, max(1, c.n // 1000)):
        digest.update(c.text(i).encode())
    return {"layout": MARKER_LAYOUT, "corpus": c.name, "n": c.n, "texts": digest.hexdigest()[:16],
            "mnemo_source": source_digest(), "tantivy": tantivy is not None}


def dataset(cfg: Config, c: Corpus) -> Dataset:
    """Mnemo (with both snapshots), FTS5 and tantivy holding corpus `c`: built once per run, or reused
    from a kept work directory when its marker matches."""
    key = (c.name, c.n)
    if key in _DATASETS:
        return _DATASETS[key]
    ds = Dataset(c, os.path.join(cfg.workdir, f"recall-{c.name}-{c.n}"))
    marker_path = os.path.join(ds.dir, "marker.json")
    try:
        with open(marker_path) as f:
            saved = json.load(f)
        reusable = saved["marker"] == _marker(c)
    except (OSError, ValueError, KeyError):
        reusable = False
    if reusable:
        cfg.log(f"recall dataset {c.label}: reusing {ds.dir}")
        ds.catch_up = saved["catch_up"]
        ds.fts_build_seconds, ds.tantivy_build_seconds = saved["fts_build_seconds"], saved["tantivy_build_seconds"]
    else:
        shutil.rmtree(ds.dir, ignore_errors=True)
        os.makedirs(os.path.dirname(ds.mnemo_path))
        _build_mnemo(cfg, ds)
        t0 = time.perf_counter()
        Fts5.build(ds.fts_path, c).close()
        ds.fts_build_seconds = time.perf_counter() - t0
        cfg.log(f"recall dataset {c.label}: FTS5 built in {ds.fts_build_seconds:.1f} s")
        if tantivy is not None:
            t0 = time.perf_counter()
            Tantivy.build(ds.tantivy_path, c)
            ds.tantivy_build_seconds = time.perf_counter() - t0
            cfg.log(f"recall dataset {c.label}: tantivy built in {ds.tantivy_build_seconds:.1f} s")
        with open(marker_path, "w") as f:
            json.dump({"marker": _marker(c), "catch_up": ds.catch_up, "fts_build_seconds": ds.fts_build_seconds,
                       "tantivy_build_seconds": ds.tantivy_build_seconds}, f)
    ds.use_snapshot("indexed")
    _DATASETS[key] = ds
    return ds


def _build_mnemo(cfg: Config, ds: Dataset) -> None:
    c = ds.corpus
    t0 = time.perf_counter()
    client = MnemoClient(ds.mnemo_path, AGENT, durability="none")
    try:
        # The last record is written on its own: an open with a snapshot checks the log's last frame,
        # and one of BUILD_TX entries would add the decoding of them all to every open measured.
        for start in range(0, c.n - 1, BUILD_TX):
            with client.transaction():
                _remember_all(client, [c.record(i) for i in range(start, min(c.n - 1, start + BUILD_TX))])
        _remember_all(client, [c.record(c.n - 1)])
    finally:
        client.close()
    shutil.copyfile(ds.snap_path, ds.snap_pending)
    cfg.log(f"recall dataset {c.label}: Mnemo built in {time.perf_counter() - t0:.1f} s (transactions of "
            f"{BUILD_TX:,}, durability=none); catching up its text index in a fresh process")
    reps = 2 if c.n <= 100_000 else 1
    for r in range(reps):
        ds.use_snapshot("pending")
        ds.catch_up.append(run_catch_up_probe(ds.mnemo_path, checkpoint=r == reps - 1))
    shutil.copyfile(ds.snap_path, ds.snap_indexed)
    cfg.log(f"recall dataset {c.label}: catch-up of {c.n:,} records in "
            f"{statistics.median(p['seconds'] for p in ds.catch_up):.1f} s")


# -- fresh-process probes ----------------------------------------------------------------------------


def probe_catch_up(path: str, checkpoint: bool, profile: str | None) -> dict[str, Any]:
    """In this fresh process: open the database (its snapshot with every row pending), then index them
    all (what the first recall does), timing it and the VmRSS it adds; then, if asked, write the
    snapshot (checkpoint) so it holds the text index."""
    client = MnemoClient(path, AGENT, durability="none")
    pending = pending_rows(client)
    before = settled_rss_bytes()
    profiler = cProfile.Profile() if profile else None
    t0, c0 = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    catch_up(client)
    if profiler is not None:
        profiler.disable()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    after = settled_rss_bytes()
    if profiler is not None and profile:
        profiler.dump_stats(profile)
    store: Any = client._store
    sizes = text_index_sizes(store.index.text)
    if client.recall(ABSENT):
        raise RuntimeError(f"{ABSENT!r} was found: pick another absent word")
    if checkpoint:
        client.checkpoint()
    client.close()
    return {"seconds": seconds, "cpu_seconds": cpu, "pending": pending, "rss_before": before, "rss_after": after,
            "sizes": sizes}


def _ints(values: Iterable[int]) -> int:
    """Bytes of the int objects among `values` (those from -5 to 256 are shared, and cost nothing)."""
    return sum(sys.getsizeof(v) for v in values if not -5 <= v <= 256)


def text_index_sizes(text: Any) -> dict[str, int]:
    """Bytes held by each structure of a file text index (sys.getsizeof of the containers and of the
    objects only they hold: term strings, arrays, bytes, ints)."""
    size = sys.getsizeof
    return {
        f"the vocabulary ({type(text.vocab).__name__}.nbytes)": text.vocab.nbytes(),
        f"postings and each document's term ids ({type(text.store).__name__}.nbytes)": text.store.nbytes(),
        "doc_row, doc_scope, doc_len, doc_seq, row_docs: arrays": size(text.doc_row) + size(text.doc_scope)
        + size(text.doc_len) + size(text.doc_seq) + size(text.row_docs),
        "pending, held, scope_totals": size(text.pending) + _ints(text.pending) + size(text.held)
        + size(text.scope_totals),
    }


def run_catch_up_probe(path: str, checkpoint: bool = False, profile: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "benchmarks.bench_recall", "--probe-catch-up", path]
    argv += ["--checkpoint"] if checkpoint else []
    argv += ["--profile-out", profile] if profile else []
    proc = subprocess.run(argv, capture_output=True, text=True, cwd=str(ROOT), env=env, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"catch-up probe failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


# -- queries/s and relevance -------------------------------------------------------------------------


def _open_reader(ds: Dataset) -> MnemoClient:
    ds.use_snapshot("indexed")
    client = MnemoClient(ds.mnemo_path, AGENT, durability="none", readonly=True)
    if pending_rows(client):
        raise RuntimeError(f"{ds.mnemo_path}: the snapshot's text index is not caught up")
    return client


def mnemo_search(client: MnemoClient, words: Sequence[str]) -> list[int]:
    return [hit.record.metadata["i"] for hit in client.recall(" ".join(words), limit=LIMIT)]


Timing = tuple[float, float]  # (wall seconds, CPU seconds of this process)


def alternate_runs(reps: int, fns: Sequence[Callable[[], list[Timing]]]) -> list[list[list[Timing]]]:
    """common.alternate for measurements that return a sample per query: each fn run `reps` times,
    interleaved, the order rotated every repetition; the runs of each fn."""
    out: list[list[list[Timing]]] = [[] for _ in fns]
    for r in range(reps):
        k = r % len(fns)
        for i in list(range(k, len(fns))) + list(range(k)):
            out[i].append(fns[i]())
    return out


def _per_query_seconds(search: Callable[[Sequence[str]], list[int]], queries: list[list[str]]) -> list[Timing]:
    out = []
    for words in queries:
        t0, c0 = time.perf_counter(), time.process_time()
        search(words)
        out.append((time.perf_counter() - t0, time.process_time() - c0))
    return out


def _runner(search: Callable[[Sequence[str]], list[int]], queries: list[list[str]]) -> Callable[[], list[Timing]]:
    def run() -> list[Timing]:
        return _per_query_seconds(search, queries)

    return run


def query_count(cfg: Config, n: int) -> int:
    if n >= 1_000_000:
        return 20 if cfg.quick else 40
    return 60 if cfg.quick else 100


def bench_queries(cfg: Config, ds: Dataset) -> list[Result]:
    c = ds.corpus
    qs = make_queries(doc_freqs(c.base_texts()), query_count(cfg, c.n))
    client = _open_reader(ds)
    fts = Fts5(ds.fts_path)
    tv = Tantivy(ds.tantivy_path) if tantivy is not None else None
    systems: list[Callable[[Sequence[str]], list[int]]] = [
        lambda w: mnemo_search(client, w), fts.search] + ([tv.search] if tv is not None else [])
    try:
        for search in systems:  # warm: page cache, statement cache, first-use costs
            for words in qs.queries[:5]:
                search(words)
        cfg.log(f"recall queries, {c.label}: {len(qs.queries)} queries x {cfg.big_reps} reps")
        per = alternate_runs(cfg.big_reps, [_runner(search, qs.queries) for search in systems])
    finally:
        client.close()
        fts.close()

    def rates(system: int, keep: Callable[[int], bool], cpu: bool = False) -> list[float]:
        out = []
        for rep in per[system]:
            picked = [t[1] if cpu else t[0] for k, t in enumerate(rep) if keep(k)]
            out.append(len(picked) / sum(picked))
        return out

    def every(k: int) -> bool:
        return True

    fts_name = "SQLite FTS5, words OR'ed, bm25, top 10"
    extra = {"queries": [" ".join(q) for q in qs.queries], "kinds": qs.kinds, "repeats": c.repeats,
             "seconds": per}
    out = [
        Result("recall", f"recall, {c.label}, {len(qs.queries)} queries of 1-3 words, top 10", "queries/s",
               rates(0, every), fts_name, rates(1, every), Target("ratio>=", 1.0), "stretch target 2x",
               extra=extra),
        Result("recall", f"recall, {c.label}, the same queries, CPU time of this process", "queries/s",
               rates(0, every, cpu=True), fts_name, rates(1, every, cpu=True), Target("ratio>=", 1.0),
               "steadier than wall time on a shared machine: leaves out waits for a core"),
    ]
    for kind, what in KINDS.items():
        count = qs.kinds.count(kind)
        if count:
            out.append(Result("recall", f"recall, {c.label}, the {count} queries {what}", "queries/s",
                              rates(0, _of_kind(qs, kind)), fts_name, rates(1, _of_kind(qs, kind))))
    if tv is not None:
        out.append(Result("recall", f"recall, {c.label}, {len(qs.queries)} queries (reference)", "queries/s",
                          rates(0, every), "tantivy, words OR'ed, BM25, top 10", rates(2, every)))
    return out


def _of_kind(qs: QuerySet, kind: str) -> Callable[[int], bool]:
    def keep(k: int) -> bool:
        return qs.kinds[k] == kind

    return keep


def known_item_count(cfg: Config) -> int:
    # 500 items left differences of a few items to chance (ties at the 10th score decide several): a
    # full run takes 5,000, and its row says which items only one system found.
    return 200 if cfg.quick else 5000


def bench_relevance(cfg: Config) -> list[Result]:
    c = corpus(cfg, "stdlib", None)
    ds = dataset(cfg, c)
    texts = c.texts()
    items = known_items(texts, doc_freqs(texts), known_item_count(cfg))
    client = _open_reader(ds)
    fts = Fts5(ds.fts_path)
    tv = Tantivy(ds.tantivy_path) if tantivy is not None else None
    found = {"mnemo": 0, "fts5": 0, "tantivy": 0}
    missed: dict[str, list[int]] = {"mnemo": [], "fts5": [], "tantivy": []}
    rr = {"mnemo": 0.0, "fts5": 0.0, "tantivy": 0.0}
    cfg.log(f"recall relevance, {c.label}: {len(items)} known items")
    try:
        for i, words in items:
            got = {"mnemo": mnemo_search(client, words), "fts5": fts.search(words)}
            if tv is not None:
                got["tantivy"] = tv.search(words)
            for name, hits in got.items():
                if i in hits:
                    found[name] += 1
                    rr[name] += 1 / (hits.index(i) + 1)
                else:
                    missed[name].append(i)
    finally:
        client.close()
        fts.close()
    k = len(items)

    def pct(name: str) -> list[float]:
        return [100 * found[name] / k]

    extra = {"items": [[i, " ".join(w)] for i, w in items], "mrr": {name: v / k for name, v in rr.items()},
             "missed": missed}
    only_mnemo = len(set(missed["fts5"]) - set(missed["mnemo"]))
    only_fts5 = len(set(missed["mnemo"]) - set(missed["fts5"]))
    out = [Result("recall", f"known-item success@10, {c.label}, {k} items, 2-3 of each one's rarest words",
                  "% found", pct("mnemo"), "SQLite FTS5, same queries", pct("fts5"), Target("ratio>=", 1.0),
                  f"MRR@10: Mnemo {rr['mnemo'] / k:.3f}, FTS5 {rr['fts5'] / k:.3f}; found by Mnemo only {only_mnemo}, "
                  f"by FTS5 only {only_fts5}", extra=extra)]
    if tv is not None:
        out.append(Result("recall", f"known-item success@10, {c.label} (reference)", "% found", pct("mnemo"),
                          "tantivy, same queries", pct("tantivy"),
                          note=f"MRR@10: tantivy {rr['tantivy'] / k:.3f}"))
    return out


# -- memory, open, catch-up --------------------------------------------------------------------------


def bench_index_size(cfg: Config, ds: Dataset) -> list[Result]:
    c = ds.corpus
    fts = Fts5(ds.fts_path)
    try:
        fts_bytes = fts.index_bytes()
    finally:
        fts.close()
    growth = [p["rss_after"] - p["rss_before"] for p in ds.catch_up]
    return [Result(
        "recall", f"text index memory, {c.label}: VmRSS growth of the catch-up (fresh process)", "MB",
        [g / 1e6 for g in growth], "FTS5 index on disk (pages of all but docs_content)", [fts_bytes / 1e6],
        Target("ratio<=", 2.0), f"{statistics.median(growth) / c.n:.0f} B/record against "
        f"{fts_bytes / c.n:.0f} B/record", extra={"fts_index_bytes": fts_bytes},
    ), Result(
        "recall", f"text index on disk, {c.label}: what it adds to the snapshot", "MB",
        [(os.path.getsize(ds.snap_indexed) - os.path.getsize(ds.snap_pending)) / 1e6],
        "FTS5 index on disk (pages of all but docs_content)", [fts_bytes / 1e6],
        note="the snapshot with the text index minus the one with every row pending",
    )]


def bench_open(cfg: Config, ds: Dataset) -> list[Result]:
    c = ds.corpus
    cfg.log(f"recall open, {c.label}: {cfg.big_reps} fresh-process opens with each snapshot")
    probes: dict[str, list[dict[str, Any]]] = {"indexed": [], "pending": []}

    def probe(which: str) -> float:
        ds.use_snapshot(which)
        p = _run_probe(ds.mnemo_path)
        if not p["snapshot_used"] or p["records"] != c.n:
            raise RuntimeError(f"open of {ds.mnemo_path} ({which}): {p}")
        probes[which].append(p)
        return float(p["seconds"])

    try:
        indexed, pending = alternate(cfg.big_reps, lambda: probe("indexed"), lambda: probe("pending"))
    finally:
        ds.use_snapshot("indexed")
    rss = {k: [p["rss_after"] - p["rss_before"] for p in v] for k, v in probes.items()}
    sizes = {"indexed": os.path.getsize(ds.snap_indexed), "pending": os.path.getsize(ds.snap_pending)}
    big = c.n >= 1_000_000
    ready = [float(p["text_ready_seconds"]) for p in probes["indexed"]]
    return [
        Result("recall", f"open {c.label}, snapshot holding the caught-up text index", "s", indexed,
               "the same db, snapshot written before any recall (all rows pending)", pending,
               Target("ratio<=", 1.5) if big else None, "target is set at 1,000,000 records; the text index "
               "loads after the open returns, in a thread of its own (next row)", extra={"snapshot_bytes": sizes}),
        Result("recall", f"open {c.label}, until the text index is loaded (a recall needs it)", "s", ready,
               "the same db, snapshot written before any recall (all rows pending)", pending,
               note="what the first recall after an open waits for, at most"),
        Result("recall", f"open {c.label}: VmRSS growth, snapshot with the text index", "MB",
               [x / 1e6 for x in rss["indexed"]], "the same, all rows pending", [x / 1e6 for x in rss["pending"]],
               note="ratio: the whole index's memory with the text index against without"),
    ]


def bench_catch_up(cfg: Config, ds: Dataset) -> list[Result]:
    c = ds.corpus
    return [Result(
        "recall", f"catch-up: indexing {c.label} from the log (fresh process)", "records/s",
        [p["pending"] / p["seconds"] for p in ds.catch_up], "FTS5 bulk insert + optimize of the same records",
        [c.n / ds.fts_build_seconds], note="reference: the first recall after opening a database whose "
        "snapshot has every row pending pays this",
        extra={"cpu_seconds": [p["cpu_seconds"] for p in ds.catch_up]},
    )]


# -- writes ------------------------------------------------------------------------------------------


WRITE_MODES = ("never", "catch-up", "recall")
"""How a write side treats the text index: recall never runs; the index caught up after every write
(the catch-up recall runs first); a recall of an absent word after every write (the catch-up plus a
recall call's fixed cost)."""
BLOCK = {"none": 100, "fsync": 10}
"""Remembers per block, by durability: the sides take turns a block at a time (a few milliseconds),
so that whatever the machine's load or the disk's sync time does falls on every side alike."""


@dataclass
class WriteTimes:
    """One side's time over a repetition: wall and process CPU seconds."""

    wall: float = 0.0
    cpu: float = 0.0

    def add(self, wall: float, cpu: float) -> None:
        self.wall += wall
        self.cpu += cpu


def _write_client(d: str, name: str, durability: str, mode: str, warm: list[RecordSpec]) -> MnemoClient:
    """A fresh database after the suite's warm-up writes (and, where recall runs, a first catch-up)."""
    client = MnemoClient(os.path.join(d, f"{name}.mnemo.db"), AGENT, durability=durability)
    _remember_all(client, warm)
    if mode != "never":
        catch_up(client)
    return client


def remember_times(cfg: Config, durability: str, recs: list[RecordSpec], rep: int) -> list[WriteTimes]:
    """Wall and CPU seconds of len(recs) remembers on a fresh database for each of WRITE_MODES, the
    three databases written in turns of BLOCK[durability] records (the order rotated every block)."""
    block = BLOCK[durability]
    times = [WriteTimes() for _ in WRITE_MODES]
    with scratch(cfg) as d:
        warm = specs(WARMUP, start=len(recs))
        clients = [_write_client(d, f"w{k}", durability, mode, warm) for k, mode in enumerate(WRITE_MODES)]
        try:
            for b, first in enumerate(range(0, len(recs), block)):
                chunk = recs[first:first + block]
                for k in range(len(WRITE_MODES)):
                    side = (k + b + rep) % len(WRITE_MODES)
                    client, mode = clients[side], WRITE_MODES[side]
                    t0, c0 = time.perf_counter(), time.process_time()
                    for r in chunk:
                        client.remember(r.content, tags=r.tags, metadata=r.metadata)
                        if mode == "catch-up":
                            catch_up(client)
                        elif mode == "recall":
                            client.recall(ABSENT)
                    times[side].add(time.perf_counter() - t0, time.process_time() - c0)
            for client, mode in zip(clients, WRITE_MODES, strict=True):
                if (pending_rows(client) == 0) != (mode != "never"):
                    raise RuntimeError(f"remember ({mode}): the text index is not as the mode says")
        finally:
            for client in clients:
                client.close()
    return times


def tx_times(cfg: Config, durability: str, recs: list[RecordSpec], rep: int) -> list[WriteTimes]:
    """Wall and CPU seconds of one transaction of len(recs) remembers on a fresh database where recall
    never runs, and of the same transaction and the catch-up of what it wrote on a fresh database whose
    index was caught up before, back to back (which goes first alternates by repetition)."""
    times = [WriteTimes(), WriteTimes()]
    with scratch(cfg) as d:
        warm = specs(WARMUP, start=len(recs))
        clients = [_write_client(d, f"t{k}", durability, mode, warm) for k, mode in enumerate(("never", "catch-up"))]
        try:
            for k in range(2):
                side = (k + rep) % 2
                client = clients[side]
                t0, c0 = time.perf_counter(), time.process_time()
                with client.transaction():
                    _remember_all(client, recs)
                if side:
                    catch_up(client)
                times[side].add(time.perf_counter() - t0, time.process_time() - c0)
        finally:
            for client in clients:
                client.close()
    return times


def tx_reps(cfg: Config) -> int:
    """Repetitions of the transaction rows: a repetition is one transaction (tens of milliseconds) a
    side, so they are many."""
    return 4 * cfg.reps


def bench_remember(cfg: Config) -> list[Result]:
    out = []
    for durability, n in (("none", cfg.remember_n), ("fsync", cfg.fsync_n)):
        recs = specs(n)
        cfg.log(f"recall writes: remember x {n}, durability={durability}, {cfg.reps} reps, "
                f"sides in turns of {BLOCK[durability]}")
        reps = [remember_times(cfg, durability, recs, rep) for rep in range(cfg.reps)]
        never, kept, recalled = ([rep[k] for rep in reps] for k in range(len(WRITE_MODES)))
        wall = [w.wall for w in never]
        cpu = [w.cpu for w in never]
        case = f"remember, durability={durability}, text index caught up after every write"
        out += [
            Result("recall", case, "records/s", rate_samples(n, [w.wall for w in kept]), "the same, recall never runs",
                   rate_samples(n, wall), Target("ratio>=", 0.8),
                   "timed: the remembers and the catch-ups (what recall runs first), not a query"),
            Result("recall", f"{case}, CPU time", "records/s", rate_samples(n, [w.cpu for w in kept]),
                   "the same, recall never runs", rate_samples(n, cpu)),
            Result("recall", f"remember, durability={durability}, a recall of an absent word after every write "
                   "(reference)", "records/s", rate_samples(n, [w.wall for w in recalled]),
                   "the same, recall never runs", rate_samples(n, wall),
                   note="the catch-up plus a whole recall call (parse, rank nothing)"),
        ]
    recs = specs(cfg.tx_size)
    reps = tx_reps(cfg)
    cfg.log(f"recall writes: transaction of {cfg.tx_size:,}, {reps} reps")
    for durability in ("fsync", "none"):
        pairs = [tx_times(cfg, durability, recs, rep) for rep in range(reps)]
        case = f"transaction of {cfg.tx_size:,} remember, durability={durability}, then the catch-up"
        for suffix, of in (("", lambda w: w.wall), (", CPU time", lambda w: w.cpu)):
            out.append(Result(
                "recall", case + suffix, "records/s", rate_samples(cfg.tx_size, [of(p[1]) for p in pairs]),
                "the same transaction, recall never runs", rate_samples(cfg.tx_size, [of(p[0]) for p in pairs]),
                Target("ratio>=", 0.7) if not suffix else None,
            ))
    return out


def forget_count(cfg: Config, n: int) -> int:
    if n >= 1_000_000:
        return 10 if cfg.quick else 20
    return 40 if cfg.quick else 100


def _copy(ds: Dataset, which: str, directory: str) -> str:
    """A copy of the dataset's Mnemo database in `directory`, with its snapshot `which` ("indexed",
    "pending"); its path. The copies are synced: otherwise the first forget's fdatasync writes the whole
    copied log out (about 0.1 s at 1,000,000 records), a cost of the copy, not of the forget."""
    os.makedirs(directory)
    path = os.path.join(directory, "recall.mnemo.db")
    for suffix in ("", ".leaves"):
        shutil.copyfile(ds.mnemo_path + suffix, path + suffix)
    shutil.copyfile(ds.snap_indexed if which == "indexed" else ds.snap_pending, path + ".snap")
    for suffix in ("", ".leaves", ".snap"):
        fd = os.open(path + suffix, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


def bench_forget(cfg: Config, ds: Dataset) -> list[Result]:
    """forget(id), one record a call (durability fsync, the default: a forget's erasure is synced in
    every mode), on two copies of one database: its text index caught up (the snapshot holding it), and
    every row pending (a database where recall never ran)."""
    c = ds.corpus
    k = forget_count(cfg, c.n)
    with scratch(cfg) as d:
        clients: dict[str, MnemoClient] = {}
        try:
            for which in ("indexed", "pending"):
                clients[which] = MnemoClient(_copy(ds, which, os.path.join(d, which)), AGENT)
            if pending_rows(clients["indexed"]) or pending_rows(clients["pending"]) != c.n:
                raise RuntimeError("forget: the copies' text indexes are not as intended")
            ids = [info.id for info in clients["pending"].list_records()]
            victims = random.Random(SEED).sample(ids, k * cfg.reps)
            batch_of = {which: iter(range(cfg.reps)) for which in clients}  # the same records on both
            cpu: dict[str, list[float]] = {which: [] for which in clients}

            def forget_seconds(which: str) -> float:
                b = next(batch_of[which])
                client = clients[which]
                t0, c0 = time.perf_counter(), time.process_time()
                for rec_id in victims[b * k:(b + 1) * k]:
                    client.forget(rec_id)
                cpu[which].append((time.process_time() - c0) / k)
                return (time.perf_counter() - t0) / k

            cfg.log(f"recall forget, {c.label}: {k} forgets x {cfg.reps} reps")
            indexed, pending = alternate(cfg.reps, lambda: forget_seconds("indexed"), lambda: forget_seconds("pending"))
        finally:
            for client in clients.values():
                client.close()
    case = f"forget(id), {c.label}, durability=fsync, text index caught up"
    base = "the same db, recall never ran (all rows pending)"
    return [
        Result("recall", case, "ms/forget", [x * 1000 for x in indexed], base, [x * 1000 for x in pending],
               Target("ratio<=", 1.2), "a cost: the ratio is the time with the index over the time without"),
        Result("recall", f"{case}, CPU time", "ms/forget", [x * 1000 for x in cpu["indexed"]], base,
               [x * 1000 for x in cpu["pending"]], Target("ratio<=", 1.2),
               "process CPU time: leaves out the waits for the disk (several syncs per forget) and for a core"),
    ]


# -- the workload ------------------------------------------------------------------------------------


def sizes(cfg: Config) -> tuple[int, ...]:
    return cfg.sizes


def bench_recall(cfg: Config) -> list[Result]:
    results: list[Result] = []
    results += bench_relevance(cfg)
    for n in sizes(cfg):
        for name in CORPORA:
            ds = dataset(cfg, corpus(cfg, name, n))
            results += bench_queries(cfg, ds)
            results += bench_index_size(cfg, ds)
            results += bench_catch_up(cfg, ds)
            results += bench_open(cfg, ds)
    results += bench_remember(cfg)
    for n in sizes(cfg):
        for name in CORPORA:
            results += bench_forget(cfg, dataset(cfg, corpus(cfg, name, n)))
    if tantivy is None:
        cfg.log("recall: tantivy is not installed (the `bench` extra): its reference rows are left out")
    return results


WORKLOADS: dict[str, Callable[[Config], list[Result]]] = {"recall": bench_recall}


# -- profiles ----------------------------------------------------------------------------------------


def profile_summary(stats: pstats.Stats, top: int = 15) -> str:
    """The functions with the most own time, as % of the profile's total."""
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    rows = sorted(raw.items(), key=lambda kv: -kv[1][2])[:top]
    lines = [f"  {'own %':>6} {'cum %':>6} {'calls':>10}  function"]
    for (file, line, name), (_cc, calls, own, cum, _callers) in rows:
        where = f"{os.path.relpath(file, ROOT) if file.startswith(str(ROOT)) else os.path.basename(file)}:{line}"
        lines.append(f"  {100 * own / total:6.1f} {100 * cum / total:6.1f} {calls:10,}  {name} ({where})")
    return "\n".join(lines)


def run_profiles(cfg: Config, ds: Dataset) -> str:
    """cProfile of one catch-up (fresh process, the whole database pending), the text index's memory by
    structure, an open with the text index in the snapshot, forgets with the index caught up, and one
    recall query of each kind on the caught-up index."""
    out = []
    prof = os.path.join(cfg.workdir, "catch-up.prof")
    ds.use_snapshot("pending")
    try:
        run_catch_up_probe(ds.mnemo_path, profile=prof)
    finally:
        ds.use_snapshot("indexed")
    out.append(f"catch-up of {ds.corpus.label} (cProfile, own time):\n{profile_summary(pstats.Stats(prof))}")
    sizes = ds.catch_up[-1].get("sizes") or {}
    total = sum(sizes.values()) or 1
    growth = statistics.median(p["rss_after"] - p["rss_before"] for p in ds.catch_up)
    lines = [f"  {v / 1e6:9.1f} MB {100 * v / total:5.1f}%  {k}"
             for k, v in sorted(sizes.items(), key=lambda kv: -kv[1])]
    out.append(f"text index of {ds.corpus.label}: {total / 1e6:.1f} MB by sys.getsizeof "
               f"({total / ds.corpus.n:.0f} B/record; VmRSS grew {growth / 1e6:.1f} MB):\n" + "\n".join(lines))
    ds.use_snapshot("indexed")
    profiler = cProfile.Profile()
    gc.collect()
    profiler.enable()
    opened = MnemoClient(ds.mnemo_path, AGENT, durability="none", readonly=True)
    opened._store.index.text  # type: ignore[attr-defined]  # noqa: B018 (loaded in a thread: wait for it)
    opened.close()
    profiler.disable()
    out.append(f"open of {ds.corpus.label} with the text index in its snapshot (cProfile, own time):\n"
               f"{profile_summary(pstats.Stats(profiler))}")
    with scratch(cfg) as d:
        client = MnemoClient(_copy(ds, "indexed", os.path.join(d, "indexed")), AGENT)
        try:
            ids = [info.id for info in client.list_records()]
            victims = random.Random(SEED).sample(ids, PROFILE_FORGETS)
            profiler = cProfile.Profile()
            profiler.enable()
            for rec_id in victims:
                client.forget(rec_id)
            profiler.disable()
        finally:
            client.close()
    out.append(f"{PROFILE_FORGETS} forget(id) on {ds.corpus.label}, text index caught up (cProfile, own time):\n"
               f"{profile_summary(pstats.Stats(profiler))}")
    qs = make_queries(doc_freqs(ds.corpus.base_texts()), 60)
    picks = [(f"a query {what}", next(q for q, k in zip(qs.queries, qs.kinds, strict=True) if k == kind))
             for kind, what in KINDS.items() if kind in qs.kinds]
    client = _open_reader(ds)
    try:
        for label, words in picks:
            three = []
            for _ in range(3):
                t0 = time.perf_counter()
                mnemo_search(client, words)
                three.append(time.perf_counter() - t0)
            one = statistics.median(three)
            calls = max(5, min(500, int(PROFILE_SECONDS / one)))  # enough calls that a GC pause is diluted
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(calls):
                mnemo_search(client, words)
            profiler.disable()
            summary = profile_summary(pstats.Stats(profiler))
            out.append(f"recall {' '.join(words)!r} ({label}), {ds.corpus.label}, {one * 1000:.2f} ms a call "
                       f"unprofiled; {calls} calls profiled:\n{summary}")
    finally:
        client.close()
    return "\n\n".join(out)


# -- stand-alone -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench_recall", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100k records only, fewer queries and repetitions")
    parser.add_argument("--records", type=int, metavar="N", help="measure databases of N records only")
    parser.add_argument("--reps", type=int, help="repetitions per measurement")
    parser.add_argument("--dir", default=str(ROOT / "benchmarks" / "results"), help="scratch space (a real disk)")
    parser.add_argument("--keep-data", action="store_true", help="keep the databases in DIR/work and reuse them")
    parser.add_argument("--profile", action="store_true",
                        help="also print cProfile summaries of a catch-up and of two recall queries")
    parser.add_argument("--json", metavar="FILE", help="write every sample as JSON")
    parser.add_argument("--writes", action="store_true",
                        help="only what keeping the index costs remember and a transaction (no database built)")
    parser.add_argument("--probe-catch-up", metavar="DB", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--profile-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.probe_catch_up:
        print(json.dumps(probe_catch_up(args.probe_catch_up, args.checkpoint, args.profile_out)), flush=True)
        return 0

    base = os.path.abspath(args.dir)
    os.makedirs(base, exist_ok=True)
    workdir = os.path.join(base, "work") if args.keep_data else tempfile.mkdtemp(prefix="recall-", dir=base)
    os.makedirs(workdir, exist_ok=True)
    cfg = Config.make(args.quick, workdir, args.reps)
    if args.records:
        cfg.sizes = (args.records,)
    t0 = time.perf_counter()
    try:
        results = bench_remember(cfg) if args.writes else bench_recall(cfg)
        profiles = run_profiles(cfg, dataset(cfg, corpus(cfg, "synthetic", cfg.sizes[0]))) if args.profile else ""
        if args.profile:
            profiles += "\n\n" + run_profiles(cfg, dataset(cfg, corpus(cfg, "stdlib", cfg.sizes[0])))
    finally:
        if not args.keep_data:
            shutil.rmtree(workdir, ignore_errors=True)
    sized = "the write rows only" if args.writes else f"sizes {', '.join(f'{n:,}' for n in cfg.sizes)}"
    print(f"\nrecall, {'quick' if cfg.quick else 'full'} run, {sized}, "
          f"{cfg.reps} reps ({cfg.big_reps} on large dbs), medians; {time.perf_counter() - t0:.0f} s\n")
    print(table(results))
    stdlib_once = len(_STDLIB)
    if stdlib_once:
        print(f"\nstdlib corpus: {stdlib_once:,} records once; larger databases repeat it with \" (copy k)\" "
              "appended to the k-th repetition's records.")
    if tantivy is None:
        print("\ntantivy is not installed (pip install -e '.[bench]'): its reference rows are left out.")
    if profiles:
        print(f"\n{profiles}")
    if args.json:
        write_json(args.json, cfg, results, {}, {"recall_profiles": profiles} if profiles else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
