"""A put's bytes made in C (mnemo/_writepath.c) against their pure-Python twins: pack against msgpack
at every width msgpack distinguishes, and the values it leaves to the twin; seal_put, entry and frame
against codec.seal_put_payload, make_entry's packing and framing.pure_frame_slots, for any record the API
accepts (unicode, big metadata, every JSON type); and the codec's and the framing's own functions, which
run the extension where it is loaded and the twin where it is not (this file runs both ways: .ci/run)."""

from __future__ import annotations

import enum
import gc
import hashlib
import math
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import Any

import msgpack
import pytest
from helpers.native_fuzz import fuzz
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemo._native import writepath
from mnemo.chain import codec
from mnemo.chain.codec import (
    checked_put,
    checked_put_twin,
    make_entry,
    pack_canonical_fields,
    pure_pack,
    seal_fields,
    seal_put_payload,
)
from mnemo.chain.tree import leaf_hash
from mnemo.errors import InvalidInput
from mnemo.storage.file import framing
from mnemo.storage.file.framing import encode_frame_slots, pure_frame_slots
from mnemo.validation import Limits

native = pytest.mark.skipif(writepath is None, reason="the C extension is not loaded (MNEMO_PURE_PYTHON or no build)")


def packb(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


BOUNDARY_INTS = [0, 1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1,
                 -1, -32, -33, -128, -129, -32768, -32769, -(2**31), -(2**31) - 1, -(2**63)]
LENGTHS = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=10), inner, max_size=20),
    max_leaves=60,
)
contents = st.text() | st.binary()
tag_tuples = st.lists(st.text(min_size=1, max_size=40), max_size=10, unique=True).map(lambda t: tuple(sorted(t)))
metadatas = st.dictionaries(st.text(max_size=20), json_values, max_size=10).map(codec.canonical)


@native
@pytest.mark.parametrize("value", [
    None, True, False, 0.0, -0.0, 1.5, math.inf, -math.inf, math.nan, 1e308, b"", "", "ünï ✓ 𝄞", b"\x00\xff",
    *BOUNDARY_INTS,
    *("x" * n for n in LENGTHS), *(b"y" * n for n in LENGTHS), *([None] * n for n in LENGTHS),
    *((1,) * n for n in (0, 15, 16)), *({f"k{i:05}": i for i in range(n)} for n in (0, 15, 16, 65536)),
    {"z": 1, "a": [1, {"b": None}]},  # a dict packs in its own order: callers pass canonical values
])
def test_pack_gives_msgpack_bytes_at_every_width(value: Any) -> None:
    assert writepath.pack(value) == packb(value) == codec._pack(value)


class Color(enum.IntEnum):
    RED = 1


class Name(str):
    pass


@native
@pytest.mark.parametrize("value", [
    Color.RED, Name("n"), OrderedDict(a=1), [Color.RED], {"k": Name("v")}, bytearray(b"ab"), memoryview(b"cd"),
])
def test_what_pack_leaves_to_its_twin_is_packed_as_msgpack_packs_it(value: Any) -> None:
    with pytest.raises(TypeError, match="left to the pure-Python packer"):
        writepath.pack(value)
    assert codec._pack(value) == packb(value)


@native
@pytest.mark.parametrize(("value", "error"), [
    (2**64, OverflowError), (-(2**63) - 1, OverflowError), ("\ud800", UnicodeEncodeError), ({1: 2.5j}, TypeError),
])
def test_what_neither_packs_is_refused_by_both(value: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        writepath.pack(value)
    with pytest.raises((error, TypeError, ValueError, OverflowError)):
        packb(value)
    with pytest.raises((error, TypeError, ValueError, OverflowError)):
        codec._pack(value)


@native
def test_pack_leaves_nesting_beyond_511_levels_to_its_twin() -> None:
    fits: Any = None
    for _ in range(511):
        fits = [fits]
    assert writepath.pack(fits) == packb(fits)
    with pytest.raises(ValueError, match="nested deeper than 511 levels"):
        writepath.pack([fits])
    assert codec._pack([fits]) == packb([fits])


@native
@settings(max_examples=300, deadline=None)
@given(json_values)
def test_pack_gives_msgpack_bytes_for_any_json_value(value: Any) -> None:
    assert writepath.pack(value) == packb(value)


@native
@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=16, max_size=16), contents, tag_tuples, metadatas)
def test_seal_put_gives_the_twin_s_payload_and_digest(salt: bytes, content: Any, tags: Any, meta: Any) -> None:
    payload = salt + packb([content, list(tags), meta])
    assert writepath.seal_put(salt, content, tags, meta) == (hashlib.sha256(payload).digest(), payload)
    assert writepath.seal_put(salt, content, tags, meta) == seal_put_payload(salt, pure_pack([content, tags, meta]))


@native
def test_seal_put_of_big_metadata_and_content() -> None:
    salt = bytes(range(16))
    meta = codec.canonical({f"key {i} ✓": {"list": list(range(i % 50)), "f": i / 7, "s": "v" * i} for i in range(400)})
    content = "ä" * (1 << 20)
    payload = salt + pack_canonical_fields(content, ("a", "b"), meta)
    assert len(payload) > 1 << 20
    assert writepath.seal_put(salt, content, ("a", "b"), meta) == (hashlib.sha256(payload).digest(), payload)


@native
def test_seal_put_refuses_a_salt_of_the_wrong_length_and_leaves_odd_fields_to_its_twin() -> None:
    with pytest.raises(ValueError, match="the salt must be 16 bytes"):
        writepath.seal_put(b"s" * 15, "c", (), {})
    with pytest.raises(TypeError):
        writepath.seal_put(b"s" * 16, Name("c"), (), {})
    salt = b"s" * 16
    assert seal_fields(salt, Name("c"), (), {}) == seal_put_payload(salt, packb(["c", [], {}]))


@native
@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**63), st.integers(0, 2**64 - 1), st.binary(min_size=32, max_size=32),
       st.sampled_from(["put", "forget", "grant", "checkpoint"]), st.text(), metadatas)
def test_entry_gives_the_twin_s_bytes_and_hash(seq: int, ts: int, prev: bytes, op: str, agent: str, body: Any) -> None:
    raw = packb([1, seq, ts, prev, op, agent, body])
    assert writepath.entry(seq, ts, prev, op, agent, body) == (raw, hashlib.sha256(raw).digest())


@native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=300), st.none() | st.binary(max_size=300)), min_size=1, max_size=8),
       st.integers(0, 2**64 - 1))
def test_frame_gives_the_twin_s_frame_and_slots(entries: list[tuple[bytes, bytes | None]], first: int) -> None:
    assert writepath.frame(entries, first) == pure_frame_slots(entries, first)


@native
def test_frame_refuses_what_the_twin_frames_otherwise() -> None:
    with pytest.raises(ValueError, match="at least one entry"):
        writepath.frame([], 1)
    with pytest.raises(TypeError):
        writepath.frame([(b"e", bytearray(b"p"))], 1)
    with pytest.raises(OverflowError):
        writepath.frame([(b"e", None)], -1)
    assert encode_frame_slots([(b"e", bytearray(b"p"))], 1) == pure_frame_slots([(b"e", bytearray(b"p"))], 1)


@native
@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=400), max_size=20))
def test_leaf_hashes_are_the_tree_s_leaf_hashes(entries: list[bytes]) -> None:
    assert writepath.leaf_hashes(entries) == b"".join(leaf_hash(e) for e in entries)
    with pytest.raises(TypeError):
        writepath.leaf_hashes([*entries, bytearray(b"e")])


# -- a remember's input checked and sealed in one call (seal_checked), and what it leaves to its twin ----

LIMITS = Limits()
plain_text = st.text()  # (no lone surrogates: hypothesis leaves them out unless asked)
common_tags = st.lists(st.text(min_size=1, max_size=30).filter(
    lambda t: "\x00" not in t and t != "memorytool" and not t.startswith("path:")), max_size=12)
flat_values = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
               | st.floats(allow_nan=False, allow_infinity=False) | plain_text)
flat_metadata = st.none() | st.dictionaries(plain_text, flat_values, max_size=12)


def sealed_fast(salt: bytes, content: Any, tags: Any, meta: Any, limits: Limits = LIMITS) -> Any:
    return writepath.seal_checked(salt, content, tags, meta, limits.max_content_bytes, limits.max_tag_chars,
                                  limits.max_tags, limits.max_metadata_bytes)


def twin_as_fast(salt: bytes, content: Any, tags: Any, meta: Any, limits: Limits = LIMITS) -> Any:
    """checked_put_twin's result in seal_checked's form, with the metadata's items in their order."""
    content, size, tag_tuple, path, canonical_meta, (digest, payload) = checked_put_twin(salt, content, tags, meta,
                                                                                          limits)
    assert path is None
    return size, tag_tuple, list(canonical_meta.items()), digest, payload


@native
@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=16, max_size=16), plain_text | st.binary(), common_tags, flat_metadata)
def test_seal_checked_takes_the_common_input_and_gives_what_the_twin_gives(
    salt: bytes, content: Any, tags: list[str], meta: Any
) -> None:
    for given_tags in (tags, tuple(tags), tags + tags[:3]):  # a list, a tuple, with repeats
        fast = sealed_fast(salt, content, given_tags, meta)
        assert fast is not None
        size, tag_tuple, canonical_meta, digest, payload = fast
        assert (size, tag_tuple, list(canonical_meta.items()), digest, payload) == twin_as_fast(
            salt, content, given_tags, meta)
        assert type(tag_tuple) is tuple and type(canonical_meta) is dict
        assert not gc.is_tracked(tag_tuple)  # str only: nothing for the cyclic collector to go through


@native
def test_seal_checked_sorts_tags_and_keys_by_code_point() -> None:
    salt = b"\x02" * 16
    tags = ["\U0001d11e", "ü", "b", "a", "ab", "ü", "\uffff", "Z"]
    meta = {"\U0001d11e": 1, "é": None, "e": True, "E": 2.5, "ee": "✓"}
    size, tag_tuple, canonical_meta, digest, payload = sealed_fast(salt, "ünï", tags, meta)
    assert size == 5  # UTF-8 bytes
    assert tag_tuple == ("Z", "a", "ab", "b", "ü", "\uffff", "\U0001d11e")
    assert list(canonical_meta) == ["E", "e", "ee", "é", "\U0001d11e"]
    assert payload == salt + packb(["ünï", list(tag_tuple), canonical_meta])
    assert digest == hashlib.sha256(payload).digest()


class Text(str):
    pass


class Number(int):
    pass


UNCOMMON = [
    # (content, tags, metadata): each passes or fails the twin's checks, and the extension leaves it to the twin
    ("c", ["memorytool", "path:/memories/a.md"], None),  # a memory-tool file
    ("c", ["path:/memories/a.md"], None),
    ("c", ["path:nowhere"], None),
    ("c", ["memorytool"], None),
    ("c", ["a", "b\x00"], None),
    ("c", ["a", ""], None),
    ("c", ["x" * 2049], None),
    ("c", ["\ud800"], None),
    ("c", [Text("a")], None),
    ("c", [1], None),
    ("c", {"a", "b"}, None),
    ("c", "ab", None),
    ("c", {"a": 1}.keys(), None),  # any iterable of str
    ("c", [f"t{i}" for i in range(257)], None),
    (Text("c"), [], None),
    (bytearray(b"c"), [], None),
    ("\udc80", [], None),
    (1, [], None),
    ("x" * ((1 << 20) + 1), [], None),
    (b"x" * ((1 << 20) + 1), [], None),
    ("c", [], {"a": {"nested": 1}}),
    ("c", [], {"a": [1, 2]}),
    ("c", [], {"a": (1, 2)}),
    ("c", [], {"a": 2**64}),
    ("c", [], {"a": -(2**63) - 1}),
    ("c", [], {"a": math.nan}),
    ("c", [], {"a": math.inf}),
    ("c", [], {"a": Number(1)}),
    ("c", [], {"a": Text("v")}),
    ("c", [], {"a": "\ud800"}),
    ("c", [], {"\ud800": 1}),
    ("c", [], {1: "v"}),
    ("c", [], {Text("a"): 1}),
    ("c", [], {"a": b"bytes"}),
    ("c", [], OrderedDict(a=1)),
    ("c", [], [("a", 1)]),
    ("c", [], {"big": "v" * (64 << 10)}),
]


@native
@pytest.mark.parametrize(("content", "tags", "meta"), UNCOMMON)
def test_seal_checked_leaves_every_other_input_to_its_twin(content: Any, tags: Any, meta: Any) -> None:
    salt = b"\x03" * 16
    assert sealed_fast(salt, content, tags, meta) is None
    try:
        want: Any = checked_put_twin(salt, content, tags, meta, LIMITS)
    except InvalidInput as exc:
        want = str(exc)
    try:
        got: Any = checked_put(salt, content, tags, meta, LIMITS)
    except InvalidInput as exc:
        got = str(exc)
    assert got == want


@native
def test_seal_checked_holds_the_limits_it_is_given() -> None:
    salt = b"\x04" * 16
    tight = Limits(max_content_bytes=4, max_tag_chars=3, max_tags=2, max_metadata_bytes=12)
    assert sealed_fast(salt, "a✓", ["abc", "b", "abc"], {"k": "v" * 8}, tight) is not None  # each at its limit
    for content, tags, meta in [("abcde", [], None), ("ab✓✓", [], None), ("a", ["abcd"], None),
                                ("a", ["a", "b", "c"], None), ("a", [], {"k": "v" * 9})]:
        assert sealed_fast(salt, content, tags, meta, tight) is None
        with pytest.raises(InvalidInput):
            checked_put(salt, content, tags, meta, tight)


@native
def test_seal_checked_refuses_a_salt_of_the_wrong_length() -> None:
    with pytest.raises(ValueError, match="the salt must be 16 bytes"):
        writepath.seal_checked(b"s" * 15, "c", [], None, 1, 1, 1, 1)
    with pytest.raises(TypeError):
        writepath.seal_checked(b"s" * 16, "c", [], None)


# -- the codec's and the framing's functions, whichever path runs them --------------------------------


def test_seal_fields_is_the_salt_the_packed_fields_and_their_digest() -> None:
    salt = b"\x01" * 16
    digest, payload = seal_fields(salt, "ünï ✓", ("a", "b"), {"k": [1, None, 2.5], "z": {"y": True}})
    packed = (b"\x93\xa9\xc3\xbcn\xc3\xaf \xe2\x9c\x93\x92\xa1a\xa1b\x82\xa1k\x93\x01\xc0"
              b"\xcb@\x04\x00\x00\x00\x00\x00\x00\xa1z\x81\xa1y\xc3")
    assert payload == salt + packed
    assert digest == hashlib.sha256(salt + packed).digest()


def test_make_entry_packs_and_hashes_the_entry_canonically() -> None:
    e = make_entry(5, 2**40, b"p" * 32, "forget", "agent-ä", {"ids": ["b", "a"], "a": None})
    assert e.raw == packb([1, 5, 2**40, b"p" * 32, "forget", "agent-ä", {"a": None, "ids": ["b", "a"]}])
    assert e.hash == hashlib.sha256(e.raw).digest()
    trusted = make_entry(5, 2**40, b"p" * 32, "forget", "agent-ä", {"a": None, "ids": ["b", "a"]}, trusted=True)
    assert trusted == e


def test_encode_frame_slots_frames_entries_and_slots() -> None:
    frame, slots = encode_frame_slots([(b"E1", b"P1"), (b"E22", None), (b"E3", b"")], 7)
    head = b"MNFR" + (3).to_bytes(4, "big") + (7).to_bytes(8, "big") + (31).to_bytes(4, "big") + (10).to_bytes(4, "big")
    section = b"\x00\x00\x00\x02\x00\x00\x00\x06E1" + b"\x00\x00\x00\x03\x00\x00\x00\x00E22" + \
        b"\x00\x00\x00\x02\x00\x00\x00\x04E3"
    payloads = zlib.crc32(b"P1").to_bytes(4, "big") + b"P1" + b"\x00\x00\x00\x00"
    trailer = zlib.crc32(head + section).to_bytes(4, "big") + b"MNFE"
    assert frame == head + section + payloads + trailer
    assert slots == [(55, 6), (61, 0), (61, 4)]
    assert framing.encode_frame([(b"E1", b"P1"), (b"E22", None), (b"E3", b"")], 7) == frame


@pytest.mark.slow  # with the sanitized build it needs; .ci/run runs it (-m slow)
@native
def test_the_c_write_path_survives_a_brief_fuzzing_run(tmp_path: Path) -> None:
    guided, sanitized = fuzz(tmp_path, 300, 300, "writepath", unit="runs")
    assert guided.runs >= 300 and sanitized.runs >= 300
    assert guided.corpus > 4  # it found inputs beyond the seeds
