"""Fuzz the C extensions (mnemo/_speedups.c, mnemo/_readpath.c, mnemo/_writepath.c, mnemo/_pgread.c)
against their pure-Python twins with atheris.

    python tools/fuzz_native.py --build DIR          # build the extensions with ASan + UBSan into DIR
    python tools/fuzz_native.py [--target T] [--seconds S | --runs N] CORPUS_DIR   # coverage-guided
    PYTHONMALLOC=malloc LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \\
        python tools/fuzz_native.py --ext DIR/_speedups*.so [--target T] [--seconds S | --runs N] CORPUS_DIR
    (--ext DIR/_readpath*.so for --target readpath, DIR/_writepath*.so for --target writepath,
    DIR/_pgread*.so for --target pgread)

Targets:
- `scan` (the default): each input is a buffer of log frames; the harness takes the scan's seq and
  previous hash from the buffer itself (the first frame header's first seq, the first entry's prev), so
  that mutations of a valid seed reach every check. Both scans must return equal results and raise
  nothing (MemoryError aside); every other input runs with the CPU's fast CRC-32 and SHA-256 paths
  turned off (cpu_paths). And crc32 of the input must give what zlib.crc32 gives, entry_hashes of
  the input cut in two what hashlib gives, and posting_rows of its bytes dealt into a tag-set column, a
  posting and the codes holding a tag what its twin (storage/file/index_check.py) gives, and code_uses and
  remap_codes of its bytes as a scan's codes and an index's table what theirs give, and merkle_push of
  leaves made from it what the compact range's own push gives. Seeds: valid frames
  of canonical puts, made with the library's own encoders.
- `analysis`: each input is a text (its bytes' low 7 bits as ASCII, or, when its first byte has the high
  bit set, the rest as UTF-8 with what does not decode replaced); count_terms must give what the
  pure-Python analysis gives (the length and each term's count, in order), and None for a text that
  is not ASCII; count_phrase, for a phrase of two or three of the text's own atoms (or of atoms it may
  not hold), what occurrences gives over the twin's atoms; term_positions, under a limit taken from the
  input's length, what the twin text_index.analysed gives without it (the terms counted by the pure-Python
  analysis, their positions by positions_of), and None for a text that is not ASCII; unpack_places, of
  the input's bytes (after the first) read as the positions of as many postings as its twin finds there
  (or, when they do not decode, as the first byte says), and of one more, what its twin
  text_index.unpack_places_twin gives, and of the text's positions packed one after the other, their
  places; phrase_starts, over documents of the words a, b and c made from the input's bytes (some with
  their positions not kept, a posting twice now and then, their seqs close together or far apart: a
  table indexed by seq or a hash table), what text_phrases._phrase_python gives, or None
  for a posting twice; and the input's bytes read as a column of
  32-bit codes, max_u32 what max gives. Seeds:
  identifiers of every shape the analysis splits.
- `postings`: each input is a program of operations on the text index's postings (add a document of
  up to 8 terms, remove one, trim, export and load back, read through a scope mask), run on the C extension's
  `Postings` and on its twin `PyPostings`, which must agree with each other and with a model after
  every program; then the input's bytes cut into five columns and loaded as a snapshot's: the C load
  must refuse or give what the twin gives for every term and document.
- `vocabulary`: each input is a program of operations on the text index's vocabulary (add a term cut
  from the input, drop one, look terms up, expand a prefix, order and load back), run on the C
  extension's `Vocabulary` and on its twin `PyVocabulary`, which must agree with each other and with a
  model after every step.
- `indextext`: each input is a program of texts (ASCII, or UTF-8 with replacements, which are refused
  as not ASCII) added to the text index as documents with `Postings.add_text` (now and then under the
  wrong document number, which must be refused) or one to three at a time with `Postings.add_texts`
  (which stops at a text that is not ASCII), and documents removed, their emptied terms dropped from
  the vocabulary so that their ids are given again; the C extension's `Postings` and `Vocabulary` and
  the twins `PyPostings.add_text` and `add_texts` over a `PyVocabulary` must give the same lengths, the same term ids,
  postings and documents.
- `readpath` (mnemo/_readpath.c): each input is a flags byte, a version number, an entry's length and
  bytes, and a payload slot, written to a file (entry and slot adjacent, or the slot first and the entry
  after a gap; the slot's CRC recomputed or not, the chain hash the entry's SHA-256 or cut from it, a
  slot length beyond the file's end); read_served must serve nothing its twin reads.quick_packed does
  not, exactly the bytes it serves, and refuse no put in the canonical layout that the twin serves;
  read_latest must build no record its twin reads.latest_records does not build alike (the times taken
  from the input), and refuse none the twin builds from a canonical put whose fields are plain;
  given the record's versions put in an index, recs_at must make the Rec its twin Index.recs_at_twin
  makes, and gather_rows then read_gathered build from its row what their twins reads.gather_rows and
  reads.read_gathered build and what read_latest built, and nothing from a row the index does not hold
  whole (a row past the last, a scope code out of range), and find_row find what Index.row_of_twin
  finds; made_record, of times and a hash cut from the input, must build the record its twin
  record.written_record_twin builds (or raise where the twin's times are out of range); then
  find_sorted, over the input cut into fixed-width ids (as given and sorted), must give what its twin
  index_columns.find_sorted gives; and new_rows, over staged entries cut from the input (each byte a put
  of a new record, or one of the kinds a run stops at: another op or version, fields of other types, a
  short hash, the id of a row the index holds or of the entry before, ints past i64 or u32), must give
  the NewRows (or the exception) its twin new_rows.new_rows_twin gives. Seeds: canonical puts of each
  kind of content, made with the library's own encoders.
- `pgread` (mnemo/_pgread.c): the inputs of `readpath` (the slot's four CRC bytes left out), made into
  rows of a query (an entry and a payload, a row without them, and the same with another version, a
  cut chain hash or a cut payload as the flags say); served_rows must serve nothing its twin
  sql.served_rows does not, exactly the bytes it serves, and refuse no put in the canonical layout that
  the twin serves; latest_records, over the same rows given a seq, an agent and times (taken from the
  input when its ver is odd), must build no record its twin sql.latest_records does not build alike,
  and refuse none the twin builds from a canonical put whose fields are plain. Seeds: those of
  `readpath`.

- `writepath` (mnemo/_writepath.c): each input is read as a value (a type byte, then what that type
  needs: ints at every width, floats, str of valid or invalid UTF-8, bytes, lists, tuples, dicts,
  subclasses, ints beyond 64 bits, nesting of any depth); pack must give exactly msgpack's bytes
  (msgpack.packb, use_bin_type=True) or refuse, and never refuse a plain value (exact types, in range,
  valid UTF-8, within msgpack's depth); seal_put of a salt, content, tags and metadata cut from the input,
  entry of a seq, time, prev, op, agent and body (and staged of the same entry with a payload, tags and
  a text: the twin's tuples, untracked by the cyclic collector only where nothing in them is tracked;
  and stage_new of a remember's input: None where seal_checked gives None, else the put its twin stages),
  and frame of entries and payloads cut from it must give
  what their twins (codec.seal_put_payload of pure_pack, make_entry's pure_pack and SHA-256,
  framing.pure_frame_slots) give, or refuse where the twin's input is not plain, seal_checked of a
  remember's content, tags and metadata (with limits) what codec.checked_put_twin gives wherever it takes
  the input, and take all the common input the twin takes, and leaf_hashes of
  those entries what chain.tree.leaf_hash gives each. Seeds: the values of a
  put and an entry, and each kind of value.

AddressSanitizer and UndefinedBehaviorSanitizer abort on any read out of bounds or undefined behaviour.
Seeds are written to the corpus directory when it is empty. On exit it prints the number of inputs run
and the time taken.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import importlib.util
import os
import struct
import subprocess
import sys
import sysconfig
import tempfile
import time
import zlib
from array import array
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [ROOT / "mnemo" / "_speedups.c", ROOT / "mnemo" / "_readpath.c", ROOT / "mnemo" / "_writepath.c",
           ROOT / "mnemo" / "_pgread.c"]
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined", "-fno-omit-frame-pointer"]


def build(out_dir: Path) -> list[Path]:
    """Compile the extensions with AddressSanitizer and UBSan, all at once (one compiler a module); returns
    the paths of the modules."""
    out_dir.mkdir(parents=True, exist_ok=True)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    built = [out_dir / f"{source.stem}{suffix}" for source in SOURCES]
    compilers = [
        (subprocess.Popen(["gcc", "-shared", "-fPIC", "-O1", "-g", *SANITIZE, f"-I{sysconfig.get_paths()['include']}",
                           str(source), "-lcrypto", "-lz", "-o", str(target)]), source)
        for source, target in zip(SOURCES, built, strict=True)
    ]
    failed = [str(source) for proc, source in compilers if proc.wait() != 0]
    if failed:
        raise subprocess.CalledProcessError(1, "gcc", f"the sanitized build of {', '.join(failed)} failed")
    return built


def load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scan_seeds() -> list[bytes]:
    """Frames of canonical puts (single and grouped, tags, metadata, binary and non-ASCII content)."""
    sys.path.insert(0, str(ROOT))
    from mnemo.chain.codec import ZERO_HASH, encode_put_payload, make_entry, pack_record_fields, payload_digest
    from mnemo.storage.file.framing import encode_frame

    out = []
    for variant in range(4):
        prev, seq, data = ZERO_HASH, 1, b""
        for group in range(3):
            items = []
            for k in range(1 + variant * group):
                content: str | bytes = ("ünï ✓ " if variant == 1 else "memory ") * (k + 1)
                if variant == 2:
                    content = bytes(range(k + 3))
                tags = sorted({f"t{k}", "all"})[: variant + 1]
                meta: dict[str, Any] = {"n": k, "deep": {"a": [1, 2.5, None, True, b"x"]}} if variant else {}
                salt = bytes([seq]) * 16
                packed = pack_record_fields(content, tags, meta)
                size = len(content.encode() if isinstance(content, str) else content)
                body = {"digest": payload_digest(salt, packed), "id": f"r{seq}", "scope": "agent:a",
                        "size": size, "ver": 1}
                e = make_entry(seq, 1_764_500_000_000_000_000 + seq, prev, "put", "agent-ä", body)
                items.append((e.raw, encode_put_payload(salt, packed)))
                prev, seq = e.hash, seq + 1
            data += encode_frame(items)
        out.append(data)
    return out


def exact(data: bytes) -> Any:
    """A buffer of exactly these bytes in an allocation of its own (a bytes object ends with a NUL, an
    array over-allocates), so that under PYTHONMALLOC=malloc AddressSanitizer sees a read one byte
    past its end."""
    return (ctypes.c_char * len(data)).from_buffer_copy(data) if data else b""


class ScanHarness:
    module = "mnemo.storage.file.scan"

    def __init__(self, native: Any) -> None:
        from mnemo.storage.file import scan

        self.native, self.scan = native, scan
        self.runs = 0

    def seeds(self) -> list[bytes]:
        return scan_seeds()

    def one(self, data: bytes) -> None:
        scan = self.scan
        self.runs += 1
        self.native.cpu_paths(self.runs % 2 == 1)  # every other input through the portable CRC and SHA-256
        seq = max(1, int.from_bytes(data[8:16], "big")) if len(data) >= 16 else 1
        seq = min(seq, (1 << 62))
        head = scan._seq_head(seq)
        at = 24 + 8 + len(head) + 10
        last = data[at:at + 32] if len(data) >= at + 32 else b"\x00" * 32
        flags = data[-1] & 3 if data else 3
        stop = seq + (data[-2] % 8) if len(data) > 2 and data[-2] & 0x80 else -1
        max_frame = 1 << 31 if not data or data[0] != 0x4D or len(data) % 3 else max(24, len(data) // 2)
        args = (data, 32, 0, seq, last, stop, max_frame, flags, 7)
        try:
            got = scan.ScanResult(*self.native.scan(exact(data), *args[1:]))
        except MemoryError:
            return
        want = scan.pure_scan(*args)
        if got != want:
            raise AssertionError(f"the C scan and its twin differ on {data!r}")
        # the same buffer cut short, and as a bytearray
        cut = len(data) * 3 // 4
        cargs = (bytearray(data[:cut]), 32, 0, seq, last, stop, max_frame, flags, 0)
        if scan.ScanResult(*self.native.scan(exact(data[:cut]), *cargs[1:])) != scan.pure_scan(*cargs):
            raise AssertionError(f"the C scan and its twin differ on a cut of {data!r}")
        # the checksum and the hashes the scan takes, over the input cut in two, as zlib and hashlib take them
        at = data[0] % (len(data) + 1) if data else 0
        entry, payload = data[:at], data[at:]
        value = int.from_bytes(data[1:5], "big") if len(data) >= 5 else 0
        if self.native.crc32(exact(data), value) != zlib.crc32(data, value):
            raise AssertionError(f"crc32 differs from zlib's on {data!r}")
        sha = hashlib.sha256
        want_hashes = (sha(entry).digest(), sha(b"\0" + entry).digest(), sha(payload).digest())
        if self.native.entry_hashes(exact(entry), exact(payload)) != want_hashes:
            raise AssertionError(f"entry_hashes differs from hashlib's on {data!r}")
        # verify's check of a tag's posting: the input as a tag-set column, a posting and the codes holding
        # the tag (small values, so that most rows are in range and most codes match)
        from mnemo.storage.file.index_check import posting_rows

        cols = [array("I", (b % 16 for b in data[k::3])) for k in range(3)]
        tagset, rows, codes = cols[0], cols[1], array("I", sorted(set(cols[2])))
        if self.native.posting_rows(tagset, rows, codes) != posting_rows(tagset, rows, codes):
            raise AssertionError(f"posting_rows differs from its twin on {data!r}")
        self.merge(data)
        self.tree(data)

    def tree(self, data: bytes) -> None:
        """merkle_push: the input's 32-byte pieces (each repeated, with its number, up to 64 times over, so
        that whole subtrees of many sizes go in) pushed onto a compact range of a size the first byte picks
        must leave what pushing them one by one in Python leaves."""
        from mnemo.chain.tree import CompactRange

        pieces = [data[i:i + 32].ljust(32, b"\0") for i in range(0, len(data), 32)]
        leaves = [hashlib.sha256(p + bytes([r])).digest() for p in pieces for r in range(1 + (p[0] % 64))]
        slow = CompactRange()
        for k in range(data[0] % 40 if data else 0):
            slow._push(hashlib.sha256(bytes([k])).digest())
        stack = list(slow.hashes())
        size = self.native.merkle_push(stack, slow.size, exact(b"".join(leaves)))
        for leaf in leaves:
            slow._push(leaf)
        if (size, stack) != (slow.size, list(slow.hashes())):
            raise AssertionError(f"merkle_push differs from pushing one by one on {data!r}")

    def merge(self, data: bytes) -> None:
        """A replay's merge of a scan's codes into the index's: the input as codes (mostly below a table
        of 12, the table's entries None, an index of refs, or now and then none), code_uses and
        remap_codes must give what their twins give, or both refuse, with refs changed alike."""
        from mnemo.storage.file import index_columns

        codes = array("I", (b % 13 for b in data[2:])).tobytes()
        n = data[0] % (len(codes) // 4 + 2) if data else 0
        kinds = data[1] if len(data) > 1 else 0
        table: list[Any] = [None if (kinds >> (k % 8)) & 1 else -1 if k == 11 else (k * 5) % 9 for k in range(12)]
        outcome = []
        for impl in (self.native, index_columns):
            refs = list(range(100, 108))
            try:
                got: Any = (impl.code_uses(exact(codes), n, table, refs), impl.remap_codes(exact(codes), n, table))
            except ValueError:
                try:
                    got = ("refused", impl.code_uses(exact(codes), n, table, refs))
                except ValueError:
                    got = "refused both"
            outcome.append((got, refs))
        if outcome[0] != outcome[1]:
            raise AssertionError(f"code_uses or remap_codes differ from their twins on {data!r}: {outcome}")


class AnalysisHarness:
    module = "mnemo.recall.analysis"

    def __init__(self, native: Any) -> None:
        from mnemo.recall import analysis
        from mnemo.storage.postgres import text_index, text_phrases

        self.native, self.analysis, self.text_index = native, analysis, text_index
        self.text_phrases = text_phrases
        self.runs = 0

    def seeds(self) -> list[bytes]:
        return [
            b"snake_case camelCase file.py 3.11 get_fooBar HTTPServer XMLHttpRequest aBCd ABC1 A1b",
            b"__init__ a..b x.y. _x_ ___ .a_ Ab_Cd.Ef9G 9x AB.cd fooBAR_baz 1.2.3 e.g. U.S.A",
            b"Hello, world! state-of-the-art (yes) don't\nnew line\ttab\x00nul",
            b"\x80caf\xc3\xa9 na\xc3\xafve \xe6\x9d\xb1\xe4\xba\xac camelCase",
        ]

    def one(self, data: bytes) -> None:
        from array import array
        from collections import Counter

        self.runs += 1
        column = array("I")
        column.frombytes(exact(data[: len(data) // 4 * 4]))
        if self.native.max_u32(column) != max(column, default=0):
            raise AssertionError(f"max_u32 and max differ on {column!r}")
        if data and data[0] & 0x80:
            text = data[1:].decode("utf-8", "replace")
        else:
            text = bytes(b & 0x7F for b in data).decode("ascii")
        self.places(data)
        self.phrase(data)
        got = self.native.count_terms(text)
        limit = (-1, 0, 1, 2, 64)[len(data) % 5]
        placed = self.native.term_positions(text, limit)
        if not text.isascii():
            if got is not None or placed is not None:
                raise AssertionError(f"count_terms or term_positions took a text that is not ASCII: {text!r}")
            return
        found = self.analysis.terms(text)
        if got is None or (got[0], list(got[1].items())) != (len(found), list(Counter(found).items())):
            raise AssertionError(f"count_terms and its twin differ on {text!r}: {got!r}")
        counts = Counter(found)
        twin = (len(found), list(counts.items()), list(self.text_index.positions_of(text, counts, limit).items()))
        if placed is None or (placed[0], list(placed[1].items()), list(placed[2].items())) != twin:
            raise AssertionError(f"term_positions and its twin differ on {text!r} (limit {limit}): {placed!r}")
        atoms = self.analysis.atoms(text)
        packed = [self.text_index.NOT_KEPT if p is None else p for p in placed[2].values()]
        decoded = self.native.unpack_places(b"".join(packed), len(packed))
        many = [sum(1 for atom in atoms if atom == term) for term in placed[2]]
        if decoded is None or list(array("i", decoded[0])) != [-1 if p is None else n
                                                             for p, n in zip(placed[2].values(), many, strict=True)]:
            raise AssertionError(f"unpack_places did not read back the places of {text!r}: {decoded!r}")
        at = data[-1] % max(1, len(atoms)) if data else 0
        phrase = tuple(atoms[at:at + 2 + (len(data) % 2)])
        if len(phrase) < 2:
            phrase = ("a", "b")
        want = sum(1 for i in range(len(atoms)) if tuple(atoms[i:i + len(phrase)]) == phrase)
        if self.native.count_phrase(text, phrase) != want:
            raise AssertionError(f"count_phrase and its twin differ on {text!r}, {phrase!r}")

    def phrase(self, data: bytes) -> None:
        """phrase_starts against its twin on documents made from the input."""
        from array import array

        if len(data) < 4:
            return
        words = ("a", "b", "c")
        phrase = tuple(words[b % 3] for b in data[1:2 + data[0] % 3])
        docs: list[list[str]] = [[]]
        for b in data[4:]:
            if b % 5 == 4 and len(docs) < 12:
                docs.append([])
            else:
                docs[-1].append(words[b % 3])
        places = {}
        # seqs close together (looked up in a table indexed by seq) or far apart (in a hash table)
        spread = (1, 5_000, 1 << 40, -(1 << 40))[data[2] >> 6]
        for atom in dict.fromkeys(phrase):
            seqs, counts, packed, lengths = b"", array("i"), array("i"), b""
            for seq, doc in enumerate(docs, 1):
                at = [i for i, word in enumerate(doc) if word == atom]
                if at:
                    unkept = data[(seq + 3) % len(data)] & 0x40
                    seqs += (seq * spread).to_bytes(8, "big", signed=True)
                    lengths += (len(doc) + (data[2] & 1 if atom != phrase[0] else 0)).to_bytes(4, "big")
                    counts.append(-1 if unkept else len(at))
                    packed.extend([] if unkept else at)
            if data[3] == 0xFF and seqs:  # a posting twice (rows written by hand)
                seqs, lengths = seqs + seqs[:8], lengths + lengths[:4]
                counts.append(-1)
            places[atom] = (seqs, counts.tobytes(), packed.tobytes(), lengths)
        got = self.native.phrase_starts(tuple(places[atom] for atom in phrase))
        if data[3] == 0xFF and any(seqs for seqs, *_rest in places.values()):
            if got is not None:
                raise AssertionError(f"phrase_starts took a posting twice on {data!r}")
            return
        found, unknown, lengths = self.text_phrases._phrase_python(phrase, places)
        if got is None or (got[0], sorted(got[1])) != (found, sorted(unknown)) or got[2] != {
                seq: lengths[seq] for seq in [*found, *unknown]}:
            raise AssertionError(f"phrase_starts and its twin differ on {data!r}: {got!r}")

    def places(self, data: bytes) -> None:
        """unpack_places against its twin on the input's bytes after the first."""
        from array import array

        blob = data[1:]
        postings = data[0] % 8 if data else 0
        for n in range(64):  # (the number of postings the bytes hold, when they decode)
            if self.text_index.unpack_places_twin(blob, n) is not None:
                postings = n
                break
        for n in (postings + 1, postings):
            twin = self.text_index.unpack_places_twin(blob, n)
            got = self.native.unpack_places(blob, n)
            if got != twin:
                raise AssertionError(f"unpack_places and its twin differ on {blob!r} ({n} postings): {got!r}")
        if twin is not None:
            counts = array("i", twin[0])
            if any(c < -1 for c in counts) or len(array("i", twin[1])) != sum(max(0, c) for c in counts):
                raise AssertionError(f"unpack_places_twin gave counts that are not its places' on {blob!r}")


class PostingsHarness:
    module = "mnemo.storage.file.postings"
    TERMS = 24

    def __init__(self, native: Any) -> None:
        from mnemo.storage.file import postings

        self.native, self.postings = native, postings
        self.runs = 0

    def seeds(self) -> list[bytes]:
        return [
            bytes([0, 8, *range(1, 17), 0, 3, 5, 1, 7, 2, 9, 9, 2, 0, 3, 1, 2, 0]),
            bytes([1, 4, 3, 200, 5, 255, 7, 1, 9, 2] * 12 + [2, 7, 3, 0, 2, 1]),
            bytes([0, 2, 1, 1, 2, 2] * 80 + [2, 5] * 20 + [3, 0]),
            bytes(range(256)),
        ]

    def _columns(self, store: Any, ndocs: int, live: list[int]) -> tuple[bytes, ...]:
        from array import array

        dense = array("q", [-1]) * ndocs
        for new, doc in enumerate(live):
            dense[doc] = new
        result: tuple[bytes, ...] = store.export(range(self.TERMS), dense, live, array("q", range(self.TERMS)))
        return result

    def _load(self, kind: Any, cols: tuple[bytes, ...], narrow: bool) -> Any:
        from array import array

        arrays = [array("I") for _ in cols]
        for column, blob in zip(arrays, cols, strict=True):
            column.frombytes(blob)
        if narrow and max(arrays[2], default=0) < 256:
            arrays[2] = array("B", arrays[2])
        return kind.load(*arrays)

    def one(self, data: bytes) -> None:
        from array import array

        self.runs += 1
        stores = [self.native.Postings(), self.postings.PyPostings()]
        model: dict[int, dict[int, int]] = {}
        ndocs, i = 0, 0
        while i + 2 <= len(data):
            op, arg = data[i], data[i + 1]
            i += 2
            if op % 4 < 2:  # a document of up to 8 distinct terms
                chunk = data[i:i + 2 * (arg % 9)]
                i += len(chunk)
                pairs = dict(zip((b % self.TERMS for b in chunk[0::2]),
                                 (1 + (b if op & 0x80 else b * 16_777_259 % 0xFFFF_FFFE) for b in chunk[1::2]),
                                 strict=False))
                for store in stores:
                    store.add(ndocs, list(pairs), list(pairs.values()))
                model[ndocs] = pairs
                ndocs += 1
            elif op % 4 == 2 and ndocs:
                doc = arg % ndocs
                held = model.pop(doc, {})
                emptied = sorted(t for t in held if not any(t in other for other in model.values()))
                for store in stores:
                    if sorted(store.remove(doc)) != emptied:
                        raise AssertionError(f"remove({doc}) differs on {data!r}")
                    if arg & 0x80:
                        store.trim()
            elif op % 4 == 3:  # a snapshot: export, both must give the same bytes; load back, renumbered
                live = sorted(model)
                cols = self._columns(stores[0], ndocs, live)
                if self._columns(stores[1], ndocs, live) != cols:
                    raise AssertionError(f"the exports differ on {data!r}")
                model = {new: model[doc] for new, doc in enumerate(live)}
                ndocs = len(live)
                stores = [self._load(self.native.Postings, cols, bool(arg & 1)),
                          self._load(self.postings.PyPostings, cols, bool(arg & 1))]
        scope_of = array("I", [d % 3 for d in range(ndocs)])
        mask = (scope_of, data[:3])
        for tid in range(self.TERMS + 1):
            want = {d: held[tid] for d, held in model.items() if tid in held}
            kept = {d: tf for d, tf in want.items() if d % 3 < len(mask[1]) and mask[1][d % 3]}
            for store in stores:
                if store.get(tid, None) != want or store.count(tid) != len(want) or store.get(tid, mask) != kept:
                    raise AssertionError(f"term {tid} differs from the model on {data!r}")
        for doc in range(ndocs + 1):
            if stores[0].tids(doc) != stores[1].tids(doc) or stores[0].tids(doc) != sorted(model.get(doc, {})):
                raise AssertionError(f"document {doc} differs on {data!r}")
        # the bytes as a snapshot's five columns: the C load refuses them or agrees with the twin
        words = array("I")
        words.frombytes(exact(data[: len(data) // 4 * 4]))
        cut = [len(words) * k // 5 for k in range(6)]
        cols5 = [words[cut[k]:cut[k + 1]] for k in range(5)]
        cols5[0] = array("I", (w % 4 for w in cols5[0]))  # (short runs, so that some fill their columns)
        cols5[3] = array("I", (w % 3 for w in cols5[3]))
        try:
            native = self.native.Postings.load(*cols5)
        except (ValueError, MemoryError):
            return
        twin = self.postings.PyPostings.load(*cols5)
        for tid in range(len(cols5[0])):
            if native.get(tid, None) != twin.get(tid, None):
                raise AssertionError(f"a loaded term {tid} differs on {data!r}")
        for doc in range(len(cols5[3])):
            if native.tids(doc) != sorted(twin.tids(doc)):
                raise AssertionError(f"a loaded document {doc} differs on {data!r}")


class VocabularyHarness:
    module = "mnemo.storage.file.vocabulary"

    def __init__(self, native: Any) -> None:
        from mnemo.storage.file import vocabulary

        self.native, self.vocabulary = native, vocabulary
        self.runs = 0

    def seeds(self) -> list[bytes]:
        return [
            bytes([0, 3, 97, 98, 99, 0, 1, 98, 1, 0, 2, 0, 3, 1, 97, 4, 0]),
            bytes([0, 4, 0xC3, 0xA9, 97, 98, 0, 2, 0xE6, 0x9D, 1, 1, 3, 2, 0xC3, 4, 1]),
            bytes([0, 2, 120, 121] * 30 + [1, 5, 2, 0, 3, 1, 120, 4, 0] * 10),
            bytes(range(256)),
        ]

    def one(self, data: bytes) -> None:
        self.runs += 1
        kinds = [self.native.Vocabulary, self.vocabulary.PyVocabulary]
        vocabs = [kind() for kind in kinds]
        model: dict[str, int] = {}
        i = 0
        while i + 2 <= len(data):
            op, arg = data[i] % 5, data[i + 1]
            i += 2
            if op in (0, 3):  # a term (or a prefix) of up to 7 bytes of the input, decoded as UTF-8
                chunk = data[i:i + arg % 8]
                i += len(chunk)
                word = chunk.decode("utf-8", "replace")
                if op == 0 and word not in model:
                    got = {vocab.add(word) for vocab in vocabs}
                    if len(got) != 1:
                        raise AssertionError(f"add({word!r}) gave different ids on {data!r}")
                    model[word] = got.pop()
                elif op == 3:
                    want = sorted(t for t in model if t.startswith(word))
                    if any(vocab.expand(word) != want for vocab in vocabs):
                        raise AssertionError(f"expand({word!r}) differs on {data!r}")
            elif op == 1 and model:
                word = sorted(model)[arg % len(model)]
                tid = model.pop(word)
                for vocab in vocabs:
                    vocab.drop(tid)
            elif op == 2:
                terms = sorted(model)
                model = {t: n for n, t in enumerate(terms)}
                vocabs = [kind.load(terms) for kind in kinds]
            elif op == 4:
                probe = [*model, "absent\x00"]
                want_ids = [model.get(t) for t in probe]
                if any(vocab.ids(probe) != want_ids for vocab in vocabs):
                    raise AssertionError(f"ids differ on {data!r}")
        for vocab in vocabs:
            if [vocab.term(t) for t in vocab.ordered()] != sorted(model):
                raise AssertionError(f"the order differs on {data!r}")


class IndexTextHarness:
    """Postings.add_text (a text's terms counted, looked up or added in the vocabulary, and posted, in one
    C call) and add_texts (several in one call) against their twins, PyPostings.add_text and add_texts over a
    PyVocabulary: texts added, documents removed
    and their emptied terms dropped (so that ids are reused), then every term id, posting and document
    compared."""

    module = "mnemo.storage.file.postings"

    def __init__(self, native: Any) -> None:
        from mnemo.storage.file import postings, vocabulary

        self.native, self.postings, self.vocabulary = native, postings, vocabulary
        self.runs = 0

    def seeds(self) -> list[bytes]:
        return [
            bytes([0, 60]) + b"snake_case camelCase file.py 3.11 get_fooBar HTTPServer aBCd A1b x" + bytes([2, 0]),
            bytes([0, 40]) + b"the cat the hat __init__ a..b x.y. _x_ ___ e.g. U.S.A" + bytes([0, 9]) + b"cat dog" * 2,
            bytes([0x80, 20]) + "café naïve 東京 camelCase".encode() + bytes([2, 1, 0, 5]) + b"a b c",
            bytes([0, 12, 97, 32, 98, 32, 99] * 9 + [2, 3, 1, 4, 2, 0, 0, 7, 120, 32, 121] * 4),
        ]

    def one(self, data: bytes) -> None:
        self.runs += 1
        sides = [(self.native.Postings(), self.native.Vocabulary()),
                 (self.postings.PyPostings(), self.vocabulary.PyVocabulary())]
        ndocs, live, i = 0, set(), 0
        while i + 2 <= len(data):
            op, arg = data[i], data[i + 1]
            i += 2
            if op % 4 < 2:  # a text of up to 63 bytes: ASCII, or (op & 0x80) UTF-8 with replacements
                chunk = data[i:i + arg % 64]
                i += len(chunk)
                text = chunk.decode("utf-8", "replace") if op & 0x80 else bytes(b & 0x7F for b in chunk).decode()
                doc = ndocs + 1 if op & 0x40 else ndocs  # (now and then the wrong document: refused)
                got = []
                for store, vocab in sides:
                    space = vocab.id_space()
                    try:
                        got.append(store.add_text(doc, vocab, text))
                    except ValueError:
                        got.append("refused")
                    if got[-1] in (None, "refused") and vocab.id_space() != space:
                        raise AssertionError(f"add_text changed the vocabulary without adding {text!r} on {data!r}")
                if got[0] != got[1]:
                    raise AssertionError(f"add_text({text!r}) gave {got!r} on {data!r}")
                if got[0] is not None and got[0] != "refused":
                    live.add(ndocs)
                    ndocs += 1
            elif op % 4 == 2 and live:
                doc = sorted(live)[arg % len(live)]
                live.discard(doc)
                emptied = []
                for store, vocab in sides:
                    gone = sorted(store.remove(doc))
                    for tid in gone:
                        vocab.drop(tid)
                    emptied.append(gone)
                if emptied[0] != emptied[1]:
                    raise AssertionError(f"remove({doc}) emptied {emptied!r} on {data!r}")
            elif op % 4 == 3:  # one to three texts in one add_texts call, which stops at one not ASCII
                texts = []
                for _ in range(1 + arg % 3):
                    size = data[i] % 32 if i < len(data) else 0
                    chunk = data[i + 1:i + 1 + size]
                    i += 1 + len(chunk)
                    ascii_text = bytes(b & 0x7F for b in chunk).decode()
                    texts.append(chunk.decode("utf-8", "replace") if arg & 0x80 else ascii_text)
                lengths = [store.add_texts(ndocs, vocab, texts) for store, vocab in sides]
                if lengths[0] != lengths[1]:
                    raise AssertionError(f"add_texts({texts!r}) gave {lengths!r} on {data!r}")
                for _ in lengths[0]:
                    live.add(ndocs)
                    ndocs += 1
        (native, nvocab), (twin, tvocab) = sides
        space = max(nvocab.id_space(), tvocab.id_space())
        for tid in range(space + 1):
            if nvocab.term(tid) != tvocab.term(tid) or native.get(tid, None) != twin.get(tid, None):
                raise AssertionError(f"term id {tid} differs on {data!r}")
        for doc in range(ndocs + 1):
            if native.tids(doc) != twin.tids(doc):
                raise AssertionError(f"document {doc} differs on {data!r}")


class ReadpathHarness:
    """mnemo/_readpath.c: read_served against reads.quick_packed, read_latest against reads.latest_records,
    made_record against record.written_record_twin, the index's look-ups (recs_at, gather_rows and
    read_gathered, find_row) against their twins, find_sorted against index_columns', new_rows against
    new_rows.new_rows_twin."""

    module = "mnemo.storage.file.reads"
    extension = "mnemo._readpath"
    IDS = ("r1", "r2", "rä")
    SCOPES = ("agent:a", "team:x")

    def __init__(self, native: Any) -> None:
        from mnemo.chain import codec
        from mnemo.record import MemoryRecord, written_record_twin
        from mnemo.storage import types
        from mnemo.storage.file import index_columns, reads

        self.native, self.codec, self.reads, self.types, self.columns = native, codec, reads, types, index_columns
        self.record_type, self.written_record_twin = MemoryRecord, written_record_twin
        self.file = tempfile.TemporaryFile()  # noqa: SIM115 (the harness's scratch file, for its life)
        self.runs = 0

    def seeds(self) -> list[bytes]:
        """Inputs: flags, ver, the entry's length (2 bytes), the entry, the slot (CRC + salt + packed)."""
        codec = self.codec
        out = []
        for variant in range(4):
            rec_id, scope = self.IDS[variant % 3], self.SCOPES[variant % 2]
            content: str | bytes = bytes(range(5)) if variant == 2 else "memory ✓ " * (variant + 1)
            meta: dict[str, Any] = {"k": [1, None]} if variant else {}
            if variant == 3:
                meta.update({"f": [2.5, -0.0, True, False], "m": {"x": "ü" * 40, "n": -(2**40), "b": -100},
                             "u": 2**64 - 1, "s": "long " * 60, "deep": [[[{"a": []}]]]})
            packed = codec.pack_record_fields(content, ["a", "b"][: variant % 3], meta)
            salt = bytes([variant]) * 16
            body = {"digest": codec.payload_digest(salt, packed), "id": rec_id, "scope": scope, "size": 5,
                    "ver": 1 + variant}
            e = codec.make_entry(7 + variant * 200, 1_764_500_000_000_000_000, b"\x11" * 32, "put", "agent-ä", body)
            payload = salt + packed
            slot = zlib.crc32(payload).to_bytes(4, "big") + payload
            flags = (variant % 3) | ((variant % 2) << 2) | (0x08 if variant == 3 else 0) | (0x20 if variant == 1 else 0)
            out.append(bytes([flags, 1 + variant]) + len(e.raw).to_bytes(2, "big") + e.raw + slot)
        return out

    def _canonical_put(self, raw: bytes, rec_id: str, ver: int, scope: str) -> bool:
        """Whether raw is a put of this record, version and scope in the layout read_served reads."""
        codec = self.codec
        try:
            arr = codec.unpackb(raw)
        except Exception:  # msgpack raises several unrelated types on garbage
            return False
        if type(arr) is not list or len(arr) != 7 or type(arr[6]) is not dict:
            return False
        body = arr[6]
        if sorted(body, key=str) != ["digest", "id", "scope", "size", "ver"]:
            return False
        ints = (arr[0], arr[1], arr[2], body["size"], body["ver"])
        if any(type(x) is not int or x < 0 for x in ints) or not 1 << 32 <= arr[2] < 1 << 64:
            return False
        if type(arr[3]) is not bytes or len(arr[3]) != 32 or type(body["digest"]) is not bytes:
            return False
        if arr[0] != 1 or arr[4] != "put" or type(arr[5]) is not str or len(body["digest"]) != 32:
            return False
        if (body["id"], body["ver"], body["scope"]) != (rec_id, ver, scope):
            return False
        return bool(codec.packb(arr) == raw)

    def _plain(self, value: Any, depth: int = 0) -> bool:
        """Whether a decoded value holds only what read_latest decodes: nil, booleans, integers, floats,
        str, bin, arrays and maps with str keys, nested 32 deep at most."""
        if depth > 32:
            return False
        if type(value) is list:
            return all(self._plain(v, depth + 1) for v in value)
        if type(value) is dict:
            return all(type(k) is str and self._plain(v, depth + 1) for k, v in value.items())
        return value is None or type(value) in (bool, int, float, str, bytes)

    def _plain_fields(self, packed: bytes) -> bool:
        """Whether packed record fields are in the form read_latest reads: [content, tags, metadata] of
        plain values, packed as the library packs them (so in the smallest encodings, floats in 64 bits)."""
        codec = self.codec
        try:
            value = codec.unpackb(packed)
        except Exception:  # msgpack raises several unrelated types on garbage
            return False
        return (type(value) is list and len(value) == 3 and type(value[0]) in (str, bytes)
                and type(value[1]) is list and type(value[2]) is dict and self._plain(value)
                and codec.packb(value) == packed)

    def _records(self, data: bytes, fd: int, rec: Any, version: Any, slot: bytes) -> None:
        """read_latest against reads.latest_records: a record only where the twin builds the same one
        (its fields' types and values, by repr), and one wherever the twin builds one from a canonical
        put whose fields are plain. The times come from the input (the salt's bytes) when ver is odd."""
        if version.ver % 2 and len(slot) >= 20:
            ts, first_ts = (int.from_bytes(slot[k : k + 8], "big", signed=True) for k in (4, 12))
            version = version._replace(ts_ns=ts)
            rec = rec._replace(versions=(version._replace(ver=0, ts_ns=first_ts), version))
        else:
            rec = rec._replace(versions=(version,))
        recs = [rec, rec._replace(versions=(version._replace(slot_off=-1),))]
        got = self.native.read_latest(fd, recs, self.record_type)
        try:
            want = self.reads.latest_records(recs, fd)
        except (ValueError, OverflowError, OSError):  # a time datetime cannot hold: the general path raises
            want = [None] * len(recs)
        for g, w in zip(got, want, strict=True):
            if g is not None and (w is None or repr(g) != repr(w) or type(g.content) is not type(w.content)):
                raise AssertionError(f"read_latest built what its twin does not, on {data!r}: {g!r} / {w!r}")
        self._rows(data, fd, rec, got[0])
        served = self.reads.quick_packed([(rec, version)], fd)[0]
        if got[0] is None and want[0] is not None and served is not None and self._plain_fields(bytes(served)) \
                and self._canonical_put(bytes(data[4 : 4 + int.from_bytes(data[2:4], "big")]), rec.id, version.ver,
                                        rec.scope):
            raise AssertionError(f"read_latest refused plain fields of a canonical put its twin builds, on {data!r}")

    def _rows(self, data: bytes, fd: int, rec: Any, latest: Any) -> None:
        """The index's look-ups against their twins, the record's versions put in an index: recs_at
        against recs_at_twin, gather_rows and read_gathered against reads.gather_rows and read_gathered
        (its row, a row past the last, and its row with its scope code out of range): a record only where
        the twin builds the same one, by repr, and exactly the one read_latest built from the Rec (a
        refusal goes to get's general path, as read_latest's does); find_row against row_of_twin."""
        from mnemo.storage.file.index import Index

        index = Index()
        for version in rec.versions:
            index.put(rec.id, rec.scope, (), version)
        row = index.row_of_twin(rec.id)
        assert row is not None
        hits = [(rec.id, row), (rec.id, row + 1)]
        types = (self.types.Rec, self.types.Version)
        if self.native.recs_at(*index.tables(), hits[:1], *types) != index.recs_at_twin(hits[:1]):
            raise AssertionError(f"recs_at made what its twin does not, on {data!r}")
        got = self.native.read_gathered(fd, self.native.gather_rows(*index.tables(), hits), self.record_type)
        try:
            want = self.reads.read_gathered(self.reads.gather_rows(index, hits), fd)
        except (ValueError, OverflowError, OSError):  # a time datetime cannot hold: the general path raises
            want = [None] * len(hits)
        # a record only where the twin builds the same one, and exactly where read_latest builds one (whose
        # refusals of what the twin builds _records holds to its rule: never plain fields of a canonical put)
        for g, w in zip(got, want, strict=True):
            if g is not None and (w is None or repr(g) != repr(w) or type(g.content) is not type(w.content)):
                raise AssertionError(f"read_gathered built what its twin does not, on {data!r}: {g!r} / {w!r}")
        if repr(got[0]) != repr(latest):
            raise AssertionError(f"read_gathered built what read_latest does not, on {data!r}")
        index.cols["scope"][row] = 7
        gathered = self.native.gather_rows(*index.tables(), hits[:1])
        if self.native.read_gathered(fd, gathered, self.record_type) != [None]:
            raise AssertionError(f"read_gathered served a row whose scope code is out of range, on {data!r}")
        if self.native.recs_at(*index.tables(), hits[:1], *types) != [None]:
            raise AssertionError(f"recs_at made a row whose scope code is out of range, on {data!r}")
        for key in (rec.id, data[:4].decode("latin-1"), data[-3:].hex()):
            if self.native.find_row(index.rows, index.base.blob, index.base.width, index.base_dead, key) != \
                    index.row_of_twin(key):
                raise AssertionError(f"find_row and its twin differ on {key!r}")

    def _made_record(self, data: bytes) -> None:
        """made_record of times, a version and a hash cut from the input: the record its twin makes."""
        ts, created = (int.from_bytes(data[i : i + 8].ljust(8, b"\0"), "big", signed=True) for i in (0, 8))
        fields = ("r1", 1 + data[0] % 3, "c", ("t",), {}, "agent:a", "a", created, ts, 5, data[-32:])
        try:
            want: Any = vars(self.written_record_twin(*fields))
        except (OverflowError, ValueError, OSError) as exc:
            want = type(exc)
        try:
            got: Any = vars(self.native.made_record(self.record_type, *fields))
        except (OverflowError, ValueError) as exc:
            got = type(exc)
        if got != want and not isinstance(got, type):
            raise AssertionError(f"made_record and its twin differ on {data!r}")

    def _new_rows(self, data: bytes) -> None:
        """new_rows against new_rows_twin: staged entries cut from the input, each byte one entry, a put
        of a new record or one of the kinds new_rows must stop at (another op, another version or a
        bool one, an id that is not a str, a short hash, a tag that is not a str or tags in a list, a text
        in bytes, the id of the entry before or of a row the index holds, live in its sorted ids or
        forgotten, ints past i64 or u32), in a frame at an offset near the end of i64 or not; the same
        NewRows, or the same exception."""
        from mnemo.chain.codec import Entry
        from mnemo.storage.batch import Staged
        from mnemo.storage.file.index import Index
        from mnemo.storage.file.new_rows import NewRows, new_rows_twin

        index = Index()
        index.base = self.columns.SortedIds(b"a1a2a3", 2)
        index.base_dead = {1}
        index.rows["r2"] = 3
        big = 2**63 - 1
        staged, slots = [], []
        for k, b in enumerate(data[4:40]):
            kind, wide = b & 15, (b >> 6) + 1 if b & 15 == 15 else 0  # 15: ints at the edges
            # 0-3 a new id; 4-8 one the index holds (in its rows, its sorted ids), one it forgot, one after its
            # sorted ids, the entry before's; 9-15 as below
            rec_id = ("r2", "a1", "a2", "a9", f"n{k - 1}")[kind - 4] if 4 <= kind <= 8 else f"n{k}"
            body: dict[str, Any] = {"digest": b"d" * 32, "id": rec_id, "scope": self.SCOPES[b & 1], "size": k,
                                    "ver": 1}
            op, tags, text, entry_hash, raw = "put", ("t", "u")[: b % 3], "text" if b & 16 else None, b"h" * 32, \
                bytes(data[k : k + (b & 31)])
            if kind == 9:
                op = ("forget", "grant")[b & 1]
            elif kind == 10:
                body["ver"] = (2, True, 1.0)[b % 3]
            elif kind == 11:
                body["id"] = rec_id.encode()
            elif kind == 12:
                entry_hash = raw[:32]
            elif kind == 13:
                tags = ("t", b"u") if b & 1 else ["t"]
            elif kind == 14 and b & 32:
                text = b"text"
            elif kind == 14:
                del body[("size", "scope", "id", "ver")[b >> 6]]
            seq, ts, slot = k, 10**18 + k, (100 * k, 20 + k)
            if wide == 1:
                seq, ts = big + (b & 1), -big - 1 - (b & 1)
            elif wide == 2:
                slot = (big - (b & 3), 2**32 - (b & 1))
            elif wide >= 3:
                body["size"] = -big - 1 - (b & 1) if b & 2 else big
            staged.append(Staged(Entry(seq, ts, b"p" * 32, op, "agent", body, raw, entry_hash), b"x", tags, text))
            slots.append(slot)
        if data[1] & 1:
            slots = slots[: len(slots) // 2]
        start = data[2] % 5 if data[2] & 0x80 else 0
        offset = (2**63 - 1 - data[3] * 1000) if data[3] & 7 == 7 else data[3] * 4096
        args = (staged, slots, start, offset, offset + 32 + (data[1] >> 4))
        try:
            want: Any = new_rows_twin(*args, index.row_of_twin)
        except (ValueError, OverflowError) as exc:
            want = type(exc)
        try:
            got: Any = self.native.new_rows(NewRows, *args, index.rows, index.base.blob, index.base.width,
                                            index.base_dead)
        except (ValueError, OverflowError) as exc:
            got = type(exc)
        if got != want:
            raise AssertionError(f"new_rows and its twin differ on {data!r}: {got!r} / {want!r}")

    def one(self, data: bytes) -> None:
        self.runs += 1
        data = data.ljust(4, b"\0")
        flags, ver, n = data[0], data[1], int.from_bytes(data[2:4], "big")
        raw, slot = data[4 : 4 + n], data[4 + n :]
        if flags & 0x08 and len(slot) >= 4:  # a CRC that holds, to reach the checks after it
            slot = zlib.crc32(slot[4:]).to_bytes(4, "big") + slot[4:]
        rec_id, scope = self.IDS[flags % 4 % 3], self.SCOPES[(flags >> 2) & 1]
        chain_hash = hashlib.sha256(raw).digest() if not flags & 0x10 else raw[:32].ljust(32, b"\0")
        f = self.file
        f.seek(0)
        f.truncate()
        gap = (flags >> 5) & 3  # 0: entry and slot adjacent; else the slot first, a gap, then the entry
        if gap == 0:
            f.write(b"H" * 9 + raw + slot)
            e_off, s_off = 9, 9 + len(raw)
        else:
            f.write(b"H" * 9 + slot + b"G" * gap + raw)
            s_off, e_off = 9, 9 + len(slot) + gap
        f.flush()
        length = len(slot) + (data[-1] & 3 if flags & 0x80 else 0)  # a slot longer than the file holds
        version = self.types.Version(ver, 1, 0, "a", 0, chain_hash, s_off, length, e_off, len(raw))
        rec = self.types.Rec(rec_id, scope, (), (version,))
        items = [(rec, version), (rec, version._replace(slot_off=-1)), (rec, version)]
        fd = f.fileno()
        got = self.native.read_served(fd, items)
        want = self.reads.quick_packed(items, fd)
        for g, w in zip(got, want, strict=True):
            if g is not None and (w is None or bytes(w) != g):
                raise AssertionError(f"read_served served what its twin does not, on {data!r}")
            if g is None and w is not None and self._canonical_put(raw, rec_id, ver, scope):
                raise AssertionError(f"read_served refused a canonical put its twin serves, on {data!r}")
        self._records(data, fd, rec, version, slot)
        self._made_record(data)
        self._new_rows(data)
        # the index's sorted ids: a blob cut from the input, searched for a key cut from it
        width = 1 + data[0] % 8
        blob = data[: len(data) // width * width]
        key = data[len(data) // 2 : len(data) // 2 + width]
        ordered = b"".join(sorted(blob[i : i + width] for i in range(0, len(blob), width)))
        for ids in (blob, ordered):
            if ids and self.native.find_sorted(exact(ids), width, key) != self.columns.find_sorted(ids, width, key):
                raise AssertionError(f"find_sorted and its twin differ on {ids!r}, {key!r}")


class PgreadHarness(ReadpathHarness):
    """mnemo/_pgread.c: served_rows against its twin in mnemo/storage/postgres/sql.py, over the same
    inputs as `readpath` (the slot's CRC left out: a row holds the payload only)."""

    module = "mnemo.storage.postgres.sql"
    extension = "mnemo._pgread"
    COLUMNS = (0, 1, 2, 3, 4, 5)
    RECORD_COLUMNS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9)  # served_rows' columns, then seq, ts, agent, first_ts

    def __init__(self, native: Any) -> None:
        super().__init__(native)
        from mnemo.storage.postgres import sql

        self.sql = sql

    def one(self, data: bytes) -> None:
        self.runs += 1
        data = data.ljust(4, b"\0")
        flags, ver, n = data[0], data[1], int.from_bytes(data[2:4], "big")
        raw, payload = data[4 : 4 + n], data[4 + n + 4 :]
        rec_id, scope = self.IDS[flags % 4 % 3], self.SCOPES[(flags >> 2) & 1]
        chain_hash = hashlib.sha256(raw).digest() if not flags & 0x10 else raw[:32].ljust(32, b"\0")
        rows: list[tuple[Any, ...]] = [
            (rec_id, scope, ver, chain_hash, raw, payload),
            (rec_id, scope, ver, chain_hash, None, None),  # an older version's row: no entry, no payload
            (rec_id, scope, ver + 1 if flags & 0x40 else ver, chain_hash[:31] if flags & 0x80 else chain_hash,
             raw, payload[: len(payload) // 2] if flags & 0x20 else payload),
        ]
        got = self.native.served_rows(rows, self.COLUMNS)
        want = self.sql.served_rows(rows, self.COLUMNS)
        for row, g, w in zip(rows, got, want, strict=True):
            if g is not None and (w is None or w != g):
                raise AssertionError(f"served_rows served what its twin does not, on {data!r}")
            if g is None and w is not None and self._canonical_put(row[4], rec_id, row[2], scope):
                raise AssertionError(f"served_rows refused a canonical put its twin serves, on {data!r}")
        self._latest(data, rows, want)

    def _latest(self, data: bytes, rows: list[tuple[Any, ...]], served: list[bytes | None]) -> None:
        """latest_records against sql.latest_records, on the same rows given a seq, an agent and times
        (from the input's salt bytes when its ver is odd, a first version's time among them): a record
        only where the twin builds the same one (by repr, and its content's type), and one wherever the
        twin builds one from a canonical put whose fields are plain."""
        ts, first = 1_764_500_000_000_000_000, None
        salt = data[4 + int.from_bytes(data[2:4], "big") + 4 :][:16]
        if data[1] % 2 and len(salt) == 16:
            ts, first = (int.from_bytes(salt[k : k + 8], "big", signed=True) for k in (0, 8))
        records = [row + (7, ts, "agent-ä", first) for row in rows]
        got = self.native.latest_records(records, self.RECORD_COLUMNS, self.record_type)
        try:
            want = self.sql.latest_records(records, self.RECORD_COLUMNS, self.record_type)
        except (ValueError, OverflowError, OSError):  # a time datetime cannot hold: the general path raises
            want = [None] * len(records)
        for row, packed, g, w in zip(rows, served, got, want, strict=True):
            if g is not None and (w is None or repr(g) != repr(w) or type(g.content) is not type(w.content)):
                raise AssertionError(f"latest_records built what its twin does not, on {data!r}: {g!r} / {w!r}")
            if g is None and w is not None and packed is not None and self._plain_fields(packed) \
                    and self._canonical_put(row[4], row[0], row[2], row[1]):
                raise AssertionError(f"latest_records refused plain fields of a canonical put its twin builds, on "
                                     f"{data!r}")



class _Str(str):
    pass


class _Int(int):
    pass


class Values:
    """Python values read from fuzz input: every type and width msgpack distinguishes, and what the C
    packer leaves to its twin (subclasses, ints beyond 64 bits, invalid UTF-8, deep nesting)."""

    INTS = (0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
            -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63))

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos] if self.pos < len(self.data) else 0
        self.pos += 1
        return b

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def length(self) -> int:
        b = self.byte()
        return b if b < 0xF0 else (b - 0xF0) * 4096 + 16  # now and then a long one: str16, bin16, array16

    def value(self, depth: int = 0) -> Any:
        kind = self.byte() % 16
        if kind == 0:
            return None
        if kind == 1:
            return self.byte() % 2 == 0
        if kind == 2:
            return self.INTS[self.byte() % len(self.INTS)] + (self.byte() % 3 - 1)
        if kind == 3:
            return int.from_bytes(self.take(8), "big", signed=self.byte() % 2 == 0)
        if kind == 4:
            return struct.unpack(">d", self.take(8).ljust(8, b"\0"))[0]
        if kind == 5:
            return self.take(self.length()).decode("utf-8", "replace")
        if kind == 6:
            return self.take(self.length()).decode("utf-8", "surrogateescape")  # lone surrogates: refused
        if kind == 7:
            return self.take(self.length())
        if kind in (8, 9):
            n = self.length()
            items = [self.value(depth + 1) for _ in range(min(n, 40))] + [None] * max(0, n - 40)
            return items if kind == 8 else tuple(items)
        if kind == 10:
            return {self.take(self.byte() % 8).decode("utf-8", "replace"): self.value(depth + 1)
                    for _ in range(self.byte() % 20)}
        if kind == 11:
            nest: Any = None
            for _ in range(500 + self.byte() % 24):  # around msgpack's limit of 511 levels
                nest = [nest]
            return nest
        if kind == 12:
            return (1 << 64) + self.byte() if self.byte() % 2 else -(1 << 63) - 1 - self.byte()
        if kind == 13:
            return _Str("s") if self.byte() % 2 else _Int(self.byte())
        if kind == 14:
            return {self.byte(): None} if self.byte() % 2 else {None: 1}
        return bytearray(self.take(self.byte() % 8))

    @staticmethod
    def plain(value: Any) -> bool:
        """Whether the C packer must pack value itself (and never leave it to its twin)."""
        stack = [(value, 0)]
        while stack:
            v, depth = stack.pop()
            t = type(v)
            if depth > 511:
                return False
            if v is None or t in (bool, float, bytes):
                continue
            if t is int:
                if not -(2**63) <= v < 2**64:
                    return False
            elif t is str:
                try:
                    v.encode("utf-8")
                except UnicodeEncodeError:
                    return False
            elif t in (list, tuple):
                stack.extend((x, depth + 1) for x in v)
            elif t is dict:
                stack.extend((x, depth + 1) for kv in v.items() for x in kv)
            else:
                return False
        return True


class WritepathHarness:
    """mnemo/_writepath.c: pack against msgpack, seal_put, entry, staged and frame against their twins."""

    module = "mnemo.chain.codec"
    extension = "mnemo._writepath"

    def __init__(self, native: Any) -> None:
        import msgpack

        from mnemo.chain import codec, tree
        from mnemo.storage.file import framing
        from mnemo.validation import Limits

        self.native, self.codec, self.framing, self.tree, self.msgpack = native, codec, framing, tree, msgpack
        import gc

        from mnemo.storage import batch

        self.batch, self.gc = batch, gc
        self.Limits = Limits
        self.runs = 0

    def seeds(self) -> list[bytes]:
        return [
            bytes([10, 3]) + b"\x02id" + bytes([5, 4]) + b"abcd" + b"\x01k" + bytes([2, 5, 1]),
            bytes([5, 12]) + "memory ✓ ".encode(), bytes([7, 3, 1, 2, 3]), bytes([8, 3, 0, 1, 0, 4]) + b"\x40" * 8,
            bytes([9, 2, 2, 9, 0, 3]) + b"\xff" * 9, bytes([6, 2]) + b"\xed\xa0", bytes([11, 12]), bytes([12, 1, 1]),
            bytes([13, 1]), bytes([14, 0, 0]), bytes([15, 3]) + b"abc", bytes([5, 0xF0]) + b"x" * 16,
            # a remember's common input for seal_checked: content, a flat metadata map, limits and three tags
            bytes([0]) + b"s" * 16 + bytes([5, 5]) + b"hello" + bytes([0, 10, 2, 1]) + b"k" + bytes([2, 5, 1, 1]) + b"j"
            + bytes([5, 1]) + b"v" + bytes([200, 10, 5, 200, 3, 2]) + b"t1" + bytes([2]) + b"k2" + bytes([0xE7, 1]),
        ]

    def _same_or_refused(self, got: Any, want: Any, plain: bool, what: str, data: bytes) -> None:
        if isinstance(got, BaseException):
            if plain:
                raise AssertionError(f"{what} refused a plain value on {data!r}: {got!r}")
        elif got != want:
            raise AssertionError(f"{what} and its twin differ on {data!r}")

    def one(self, data: bytes) -> None:
        self.runs += 1
        native, codec, plain = self.native, self.codec, Values.plain
        reader = Values(data)
        value = reader.value()
        got: Any
        try:
            got = native.pack(value)
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
            got = exc
        try:
            want: Any = self.msgpack.packb(value, use_bin_type=True)
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
            want = exc
            if not isinstance(got, BaseException):
                raise AssertionError(f"pack packed what msgpack refuses, on {data!r}") from None
        self._same_or_refused(got, want, plain(value), "pack", data)
        if not isinstance(got, BaseException) and codec._pack(value) != got:
            raise AssertionError(f"codec._pack differs from the extension on {data!r}")
        # a put's payload: the salt and three fields from the input
        salt = reader.take(16).ljust(16, b"s")
        content, tags, meta = reader.value(), reader.value(), reader.value()
        fields = [content, tags, meta]
        try:
            sealed: Any = native.seal_put(salt, content, tags, meta)
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
            sealed = exc
        if not isinstance(sealed, BaseException):
            sealed_want = codec.seal_put_payload(salt, codec.pure_pack(fields))
            self._same_or_refused(sealed, sealed_want, plain(fields), "seal_put", data)
        elif plain(fields):
            raise AssertionError(f"seal_put refused plain fields on {data!r}: {sealed!r}")
        self._checked(reader, salt, content, meta, data)
        # an entry: its fields from the input
        seq, ts = reader.value(), reader.value()
        prev, op, agent, body = reader.take(32), reader.value(), reader.value(), reader.value()
        try:
            made: Any = native.entry(seq, ts, prev, op, agent, body)
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
            made = exc
        items = [1, seq, ts, prev, op, agent, body]
        if not isinstance(made, BaseException):
            raw = codec.pure_pack(items)
            self._same_or_refused(made, (raw, hashlib.sha256(raw).digest()), plain(items), "entry", data)
        elif plain(items):
            raise AssertionError(f"entry refused plain fields on {data!r}: {made!r}")
        self._staged(seq, ts, prev, op, agent, body, made, data)
        # a frame of entries and payloads cut from the input
        entries: list[tuple[bytes, bytes | None]] = []
        for _ in range(1 + reader.byte() % 5):
            raw_e = reader.take(reader.byte())
            flag = reader.byte()
            entries.append((raw_e, None if flag % 3 == 0 else reader.take(flag % 64)))
        first = int.from_bytes(reader.take(8).ljust(8, b"\0"), "big")
        if native.frame(entries, first) != self.framing.pure_frame_slots(entries, first):
            raise AssertionError(f"frame and its twin differ on {data!r}")
        raws = [e[0] for e in entries]
        if native.leaf_hashes(raws) != b"".join(self.tree.leaf_hash(e) for e in raws):
            raise AssertionError(f"leaf_hashes and the tree's leaf hashes differ on {data!r}")


    def _staged(self, seq: Any, ts: Any, prev: bytes, op: Any, agent: Any, body: Any, made: Any, data: bytes) -> None:
        """staged (mnemo/_writepath.c) of the same entry, with a payload, tags and a text of the kinds a
        batch stages: the same tuples as its twin (storage/batch.py's stage_twin, the entry's bytes packed by
        msgpack), and untracked by the cyclic collector only where nothing in them is tracked."""
        entry_cls, staged_cls = self.batch.Entry, self.batch.Staged
        payload = None if seq.__class__ is int and seq % 2 else prev
        tags = tuple(x for x in (op, agent) if type(x) is str)
        text = agent if type(agent) is str else None
        try:
            got: Any = self.native.staged(entry_cls, staged_cls, seq, ts, prev, op, agent, body, payload, tags, text)
        except (TypeError, ValueError, OverflowError, UnicodeEncodeError) as exc:
            got = exc
        if isinstance(made, BaseException) != isinstance(got, BaseException):
            raise AssertionError(f"staged and entry differ in what they refuse on {data!r}: {got!r}")
        if isinstance(got, BaseException):
            return
        want = staged_cls(entry_cls(seq, ts, prev, op, agent, body, *made), payload, tags, text)
        if got != want or type(got) is not staged_cls or type(got[0]) is not entry_cls:
            raise AssertionError(f"staged and its twin differ on {data!r}")
        if not self.gc.is_tracked(got[0]) and (type(body) is not dict or self.gc.is_tracked(body)):
            raise AssertionError(f"staged untracked an entry whose body the collector tracks on {data!r}")
        if not self.gc.is_tracked(got) and self.gc.is_tracked(got[0]):
            raise AssertionError(f"staged untracked a staged tuple holding a tracked entry on {data!r}")

    TAG_KINDS = ("memorytool", "path:/memories/a.md", "path:", "", "a\x00", "\udc80", "\u00fc", "Z")

    def _checked(self, reader: Values, salt: bytes, content: Any, meta: Any, data: bytes) -> None:
        """seal_checked of a remember's input (tags cut from the input, now and then one the memory tool
        or the checks care about): what the extension takes, the twin must give alike; what is common
        (every rule of seal_checked met), the extension must take."""
        limits = self.Limits(max_content_bytes=reader.byte() * 4, max_tag_chars=1 + reader.byte() % 12,
                        max_tags=reader.byte() % 10, max_metadata_bytes=reader.byte() * 2)
        tags: Any = []
        for _ in range(reader.byte() % 8):
            b = reader.byte()
            tags.append(self.TAG_KINDS[b % 8] if b >= 0xE0 else reader.take(b % 10).decode("utf-8", "replace"))
        if reader.byte() % 4 == 0:
            tags = tuple(tags)
        if meta is not None and not isinstance(meta, dict):
            meta = None
        fast = self.native.seal_checked(salt, content, tags, meta, limits.max_content_bytes, limits.max_tag_chars,
                                        limits.max_tags, limits.max_metadata_bytes)
        self._stage_new(salt, content, tags, meta, limits, fast, data)
        try:
            twin: Any = self.codec.checked_put_twin(salt, content, tags, meta, limits)
        except Exception as exc:  # what the twin refuses (InvalidInput), the extension must leave to it
            if fast is not None:
                raise AssertionError(f"seal_checked took what its twin refuses ({exc!r}) on {data!r}") from None
            return
        if fast is None:
            if self._common(content, tags, meta):
                raise AssertionError(f"seal_checked left common input to its twin on {data!r}")
            return
        _content, size, tag_tuple, path, canonical_meta, (digest, payload) = twin
        if path is not None or fast[0] != size or fast[1] != tag_tuple or fast[3:] != (digest, payload) or \
                list(fast[2].items()) != list(canonical_meta.items()):
            raise AssertionError(f"seal_checked and its twin differ on {data!r}")

    def _stage_new(self, salt: bytes, content: Any, tags: Any, meta: Any, limits: Any, fast: Any, data: bytes) -> None:
        """stage_new of the same input: None exactly where seal_checked gives None, else the put of what
        seal_checked gives, as its twin (storage/batch.py's stage_new_twin) stages it."""
        batch = self.batch
        args = (7, 9, b"p" * 32, "agent", "id", "scope", salt, content, tags, meta)
        made = self.native.stage_new(batch.Entry, batch.Staged, *args, limits.max_content_bytes,
                                     limits.max_tag_chars, limits.max_tags, limits.max_metadata_bytes)
        if (made is None) != (fast is None):
            raise AssertionError(f"stage_new and seal_checked differ in what they take on {data!r}")
        if made is None:
            return
        staged, checked_meta = made
        twin = batch.stage_new_twin(*args, limits)
        if twin is None or staged != twin[0] or list(checked_meta.items()) != list(twin[1].items()) \
                or staged.payload != fast[4] or staged.entry.body["digest"] != fast[3]:
            raise AssertionError(f"stage_new and its twin differ on {data!r}")

    @staticmethod
    def _common(content: Any, tags: Any, meta: Any) -> bool:
        """Input seal_checked must take when the twin takes it: exact types, flat metadata."""
        def text(v: Any) -> bool:
            return type(v) is str and not any("\ud800" <= c <= "\udfff" for c in v)

        if not (text(content) or type(content) is bytes) or type(tags) not in (list, tuple):
            return False
        if any(not text(t) or t == "memorytool" or t.startswith("path:") for t in tags):
            return False
        plain = (type(None), bool, int, float)
        return meta is None or (type(meta) is dict and all(
            text(k) and (text(v) or type(v) in plain) for k, v in meta.items()))


Harness = (ScanHarness | AnalysisHarness | PostingsHarness | VocabularyHarness | IndexTextHarness | ReadpathHarness
           | WritepathHarness | PgreadHarness)
HARNESSES: dict[str, type[Harness]] = {
    "scan": ScanHarness, "analysis": AnalysisHarness, "postings": PostingsHarness, "vocabulary": VocabularyHarness,
    "indextext": IndexTextHarness,
    "readpath": ReadpathHarness, "writepath": WritepathHarness, "pgread": PgreadHarness}


def mutate_loop(harness: Harness, corpus: Path | None, seconds: int, runs: int) -> int:
    """The sanitized build's run. A library preloaded for AddressSanitizer takes over libFuzzer's
    coverage hooks, so instead of coverage this runs every corpus input, then random mutations of
    them: bit flips, byte runs, cuts, insertions and splices of two inputs."""
    import random

    inputs = [p.read_bytes() for p in sorted(corpus.iterdir())] if corpus is not None else []
    inputs = inputs or harness.seeds()
    rng = random.Random(0x5CA9)
    t0 = time.monotonic()
    for data in inputs:
        harness.one(data)
    while (not runs or harness.runs < runs) and (runs or time.monotonic() - t0 < seconds):
        data = bytearray(rng.choice(inputs))
        for _ in range(rng.randrange(1, 5)):
            kind = rng.randrange(5)
            at = rng.randrange(len(data) + 1)
            if kind == 0 and data:
                data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
            elif kind == 1 and data:
                end = min(len(data), at + rng.randrange(1, 9))
                data[at:end] = bytes([rng.choice((0, 0xFF, 0x7F, 0x80, rng.randrange(256)))]) * (end - at)
            elif kind == 2:
                del data[at:at + rng.randrange(1, 64)]
            elif kind == 3:
                data[at:at] = rng.randbytes(rng.randrange(1, 16))
            else:
                other = rng.choice(inputs)
                cut = rng.randrange(len(other) + 1)
                data[at:] = other[cut:]
        harness.one(bytes(data))
    print(f"Done {harness.runs} runs in {int(time.monotonic() - t0)} second(s)", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", type=Path, help="build the sanitized extension into this directory and exit")
    ap.add_argument("--ext", type=Path, help="the extension to fuzz (default: mnemo._speedups as installed, or "
                    "mnemo._readpath for --target readpath, mnemo._writepath for --target writepath, "
                    "mnemo._pgread for --target pgread)")
    ap.add_argument("--target", choices=sorted(HARNESSES), default="scan", help="what to fuzz (default: scan)")
    ap.add_argument("--seconds", type=int, default=0, help="stop after this many seconds")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many inputs")
    ap.add_argument("corpus", nargs="?", type=Path)
    args = ap.parse_args(argv)
    if args.build is not None:
        for path in build(args.build):
            print(path)
        return 0
    sys.path.insert(0, str(ROOT))
    if args.ext is not None:
        return mutate_loop(HARNESSES[args.target](load(args.ext)), args.corpus, args.seconds, args.runs)
    import atheris

    kind = HARNESSES[args.target]
    with atheris.instrument_imports(include=[kind.module]):
        # coverage of the twin guides the mutations (the C loops mirror its branches)
        importlib.import_module(kind.module)
    harness = kind(importlib.import_module(getattr(kind, "extension", "mnemo._speedups")))
    lib_args = [sys.argv[0]]
    if args.corpus is not None:
        args.corpus.mkdir(parents=True, exist_ok=True)
        if not any(args.corpus.iterdir()):
            for i, seed in enumerate(harness.seeds()):
                (args.corpus / f"seed-{i}").write_bytes(seed)
        lib_args.append(str(args.corpus))
    if args.seconds:
        lib_args.append(f"-max_total_time={args.seconds}")
    if args.runs:
        lib_args.append(f"-runs={args.runs}")
    lib_args += ["-max_len=4096", "-rss_limit_mb=4096"]
    atheris.Setup(lib_args, harness.one)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("MNEMO_PURE_PYTHON", "")
    sys.exit(main())
