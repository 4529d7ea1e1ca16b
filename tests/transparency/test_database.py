"""Transparency over a database file: the tree read as an auditor (and a damaged log refused), one library
function per command with its exit codes, "the log extends a checkpoint kept elsewhere", proofs that
survive erasure, and examples/verify_proof.py run against what the library makes. On both backends (the
vector chain copied into PostgreSQL); damage to a log's bytes on the file backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.backends import snapshot, stored
from helpers.paths import ROOT
from helpers.transparency_vectors import (
    BUNDLE_1,
    CONSISTENCY_3_5_DISPLAY,
    DB_ID,
    ENTRIES,
    NOTE_5,
    ORIGIN,
    PUBKEY,
    SEED,
    VECTORS,
    VKEY,
)

from mnemo import MnemoClient
from mnemo.audit import load_private_key, public_key_bytes, verify_db
from mnemo.chain.codec import ZERO_HASH, make_entry
from mnemo.chain.tree import leaf_hash, verify_consistency
from mnemo.storage.file.framing import encode_file_header, encode_frame
from mnemo.transparency import commands
from mnemo.transparency.bundle import NotABundle, verify_bundle
from mnemo.transparency.consistency import NotJSON, verify_consistency_proof
from mnemo.transparency.cosign import cosign
from mnemo.transparency.errors import DamagedLog, Rejected, TransparencyError, UnreadableInput, UsageError
from mnemo.transparency.extends import log_extends
from mnemo.transparency.log import read_tree
from mnemo.transparency.note import parse_checkpoint, verify_checkpoint_note

OTHER = b"\x07" * 32
OTHER_PUB = public_key_bytes(load_private_key(OTHER))


def test_read_tree_of_the_vector_log(vdb: Path) -> None:
    tree = read_tree(vdb, keep=[1, 3])
    assert (tree.size, tree.db_id, tree.default_origin) == (5, DB_ID, ORIGIN)
    assert tree.leaves.read(0, 5) == b"".join(leaf_hash(e) for e in ENTRIES)
    assert tree.entries == {1: ENTRIES[1], 3: ENTRIES[3]}
    assert tree.head_hash.hex() == VECTORS[-1]["hash"]


# -- a damaged log is refused, and nothing is signed --------------------------------------------------


def frames(entries: list[bytes]) -> bytes:
    return encode_file_header(DB_ID) + b"".join(encode_frame([(e, None)]) for e in entries)


def chain(ops: list[tuple[str, dict[str, object]]], db_id: bytes = DB_ID) -> list[bytes]:
    out, prev = [], ZERO_HASH
    for seq, (op, body) in enumerate(ops):
        e = make_entry(seq, 1_764_500_000_000_000_000 + seq, prev, op, "owner", body)
        out.append(e.raw)
        prev = e.hash
    return out


GENESIS = ("genesis", {"db_id": DB_ID, "format": 1})
GRANT = ("grant", {"perms": ["read"], "principal": "bob", "scope": "s"})


@pytest.mark.parametrize(("data", "message"), [
    (lambda: b"NOTMNEMO" + frames(ENTRIES)[8:], "bad file header"),
    (lambda: frames([ENTRIES[0], ENTRIES[1], ENTRIES[3]]), "seq 3 at offset .* follows seq 1"),
    (lambda: frames([ENTRIES[0], ENTRIES[2]]), "seq 2 at offset .* follows seq 0"),
    (lambda: frames([ENTRIES[0], make_entry(1, 1, b"\x01" * 32, "grant", "o", GRANT[1]).raw]),
     "the prev of seq 1 .* is not the hash of the entry before it"),
    (lambda: frames(chain([GRANT, GRANT])), "seq 0 is a grant entry"),
    (lambda: frames(chain([GENESIS, GENESIS])), "seq 1 is a genesis entry"),
    (lambda: frames(chain([("genesis", {"db_id": b"\x09" * 16, "format": 1}), GRANT])), "names another database"),
    (lambda: encode_file_header(DB_ID), "no entries"),
])
def test_a_damaged_log_is_refused(tmp_path: Path, data, message: str) -> None:  # type: ignore[no-untyped-def]
    db = tmp_path / "bad.db"
    db.write_bytes(data())
    with pytest.raises(DamagedLog, match=message) as info:
        read_tree(db)
    assert info.value.exit_code == 1
    with pytest.raises(DamagedLog):
        commands.checkpoint(db, SEED)
    with pytest.raises(DamagedLog):
        commands.prove_range(db, 1)


def test_a_changed_byte_inside_the_log_is_refused(vfile: Path) -> None:
    vdb = vfile
    data = bytearray(vdb.read_bytes())
    at = data.find(b"bob")
    data[at] ^= 1  # inside the grant's entry bytes: its frame's checksum no longer holds
    vdb.write_bytes(bytes(data))
    with pytest.raises(DamagedLog, match="damaged frame at offset"):
        commands.checkpoint(vdb, SEED)


def test_a_torn_last_frame_is_left_out(vfile: Path) -> None:
    vdb = vfile
    data = vdb.read_bytes()
    vdb.write_bytes(data[:-10])  # a write in progress, or cut by a crash
    assert read_tree(vdb).size == 4
    assert commands.checkpoint(vdb, SEED).note == sign_note_of(4)


def sign_note_of(size: int, key: bytes = SEED) -> str:
    from mnemo.chain.tree import HashList
    from mnemo.transparency.note import sign_checkpoint_note

    return sign_checkpoint_note(ORIGIN, size, HashList([leaf_hash(e) for e in ENTRIES]).root(size), key)


@pytest.mark.parametrize("make", [lambda p: p / "missing.db", lambda p: p])
def test_an_unreadable_database_is_exit_2(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnreadableInput) as info:
        commands.checkpoint(make(tmp_path), SEED)
    assert info.value.exit_code == 2


# -- the commands ---------------------------------------------------------------------------------------


def test_checkpoint_command(vdb: Path) -> None:
    r = commands.checkpoint(vdb, SEED)
    assert r.note == NOTE_5
    assert r.to_json() == {"origin": ORIGIN, "tree_size": 5, "root": "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=",
                           "note": NOTE_5}
    assert commands.vkey_of(vdb, SEED) == VKEY
    custom = commands.checkpoint(vdb, SEED, origin="example.com/mine")
    assert custom.note.startswith("example.com/mine\n5\n") and verify_checkpoint_note(custom.note, PUBKEY).ok
    assert commands.vkey_of(vdb, SEED, origin="example.com/mine").startswith("example.com/mine+")


def test_checkpoint_command_refusals(vdb: Path, tmp_path: Path) -> None:
    before = snapshot(vdb)
    for origin in ("", "has space", "a+b"):
        with pytest.raises(UsageError) as info:
            commands.checkpoint(vdb, SEED, origin=origin)
        assert info.value.exit_code == 2
    (tmp_path / "bad.key").write_text("not a key")
    for key in (tmp_path / "bad.key", tmp_path / "missing.key", b"short"):
        with pytest.raises(UnreadableInput) as info2:
            commands.checkpoint(vdb, key)
        assert info2.value.exit_code == 2
    assert snapshot(vdb) == before  # an auditor's read: nothing written


def test_prove_seq_command(vdb: Path) -> None:
    r = commands.prove_seq(vdb, 1, key=SEED)
    assert r.bundle == BUNDLE_1 and r.to_text() == BUNDLE_1
    assert json.loads(r.to_text(as_json=True)) == r.json and r.json["leaf_index"] == 1
    for seq in range(3):
        small = commands.prove_seq(vdb, seq, size=3, key=SEED)
        check = verify_bundle(small.bundle, PUBKEY, ORIGIN)
        assert check.ok and check.tree_size == 3 and check.seq == seq
    # a checkpoint signed elsewhere (here: cosigned by a witness) is embedded verbatim
    cosigned = cosign(NOTE_5, witness_key=b"\x11" * 32, witness_name="w.example/1", log_key=PUBKEY, timestamp=1)
    embedded = commands.prove_seq(vdb, 1, checkpoint=cosigned)
    assert embedded.bundle == BUNDLE_1[: -len(NOTE_5)] + cosigned and verify_bundle(embedded.bundle, PUBKEY).ok
    assert commands.prove_seq(vdb, 1, checkpoint=cosigned, size=5).bundle == embedded.bundle


def code(exc: pytest.ExceptionInfo[TransparencyError]) -> int:
    return exc.value.exit_code


def test_prove_seq_refusals(vdb: Path) -> None:
    cases: list[tuple[dict[str, object], type[TransparencyError], int]] = [
        ({"seq": 1}, UsageError, 2),  # neither a key nor a checkpoint
        ({"seq": 1, "key": SEED, "checkpoint": NOTE_5}, UsageError, 2),  # both
        ({"seq": 5, "key": SEED}, UsageError, 2),  # N >= SIZE
        ({"seq": 3, "key": SEED, "size": 3}, UsageError, 2),
        ({"seq": 0, "key": SEED, "size": 0}, UsageError, 2),
        ({"seq": 0, "key": SEED, "size": 6}, UsageError, 2),
        ({"seq": -1, "key": SEED}, UsageError, 2),
        ({"seq": 1, "checkpoint": NOTE_5, "size": 4}, UsageError, 2),  # --size is not the checkpoint's
        ({"seq": 1, "checkpoint": sign_note_of(4).replace("\n4\n", "\n5\n")}, Rejected, 1),  # root of another size
        ({"seq": 1, "checkpoint": "not a note"}, Rejected, 1),
        ({"seq": 1, "checkpoint": NOTE_5, "origin": "example.com/x"}, Rejected, 1),
        ({"seq": 1, "key": b"bad key"}, UnreadableInput, 2),
    ]
    for kw, exc, exit_code in cases:
        with pytest.raises(exc) as info:
            commands.prove_seq(vdb, **kw)  # type: ignore[arg-type]
        assert code(info) == exit_code, kw



def test_a_checkpoint_larger_than_the_log_is_refused(vfile: Path) -> None:
    bigger = sign_note_of(5)
    vfile.write_bytes(vfile.read_bytes()[:-10])  # the log is now 4 entries: the size-5 checkpoint is not of it
    with pytest.raises(Rejected, match="covers 5 entries, the log holds 4"):
        commands.prove_seq(vfile, 1, checkpoint=bigger)


def test_prove_range_command(vdb: Path) -> None:
    p = commands.prove_range(vdb, 3)
    assert p.to_json() == json.loads(CONSISTENCY_3_5_DISPLAY)
    assert commands.prove_range(vdb, 3, 5) == p
    same = commands.prove_range(vdb, 4, 4)
    assert same.proof == () and same.old_root == same.new_root
    for bad in ((0, None), (6, None), (4, 3), (1, 6)):
        with pytest.raises(UsageError) as info:
            commands.prove_range(vdb, *bad)
        assert code(info) == 2  # type: ignore[arg-type]


def test_audit_verify_proof_command(tmp_path: Path) -> None:
    f = tmp_path / "b.tlog-proof"
    f.write_text(BUNDLE_1)
    assert commands.audit_verify_proof(f, PUBKEY.hex()).ok
    (tmp_path / "k.vkey").write_text(VKEY + "\n")
    assert commands.audit_verify_proof(f, tmp_path / "k.vkey", ORIGIN).summary().startswith("OK: seq 1 (put")
    assert not commands.audit_verify_proof(f, OTHER_PUB).ok  # a defect: exit 1
    f.write_bytes(b"\xff\xfe")
    for path, exc in ((f, NotABundle), (tmp_path / "missing", UnreadableInput), (tmp_path, UnreadableInput)):
        with pytest.raises(exc) as info:
            commands.audit_verify_proof(path, PUBKEY)
        assert code(info) == 2  # type: ignore[arg-type]
    f.write_text("c2sp.org/tlog-proof@v2\n")
    with pytest.raises(NotABundle):
        commands.audit_verify_proof(f, PUBKEY)
    f.write_text(BUNDLE_1)
    with pytest.raises(UnreadableInput, match="unreadable public key"):
        commands.audit_verify_proof(f, "not a key")


def test_audit_verify_consistency_command(vdb: Path, tmp_path: Path) -> None:
    (tmp_path / "old").write_text(sign_note_of(3))
    (tmp_path / "new").write_text(NOTE_5)
    (tmp_path / "p.json").write_text(commands.prove_range(vdb, 3).to_text())
    check = commands.audit_verify_consistency(tmp_path / "old", tmp_path / "new", tmp_path / "p.json", PUBKEY)
    assert check.ok and check.to_json()["tree_size"] == 5
    assert not commands.audit_verify_consistency(tmp_path / "new", tmp_path / "old", tmp_path / "p.json", PUBKEY).ok
    (tmp_path / "p.json").write_text("not json")
    with pytest.raises(NotJSON) as info:
        commands.audit_verify_consistency(tmp_path / "old", tmp_path / "new", tmp_path / "p.json", PUBKEY)
    assert code(info) == 2  # type: ignore[arg-type]
    with pytest.raises(UnreadableInput):
        commands.audit_verify_consistency(tmp_path / "gone", tmp_path / "new", tmp_path / "p.json", PUBKEY)


def test_write_file_atomic(tmp_path: Path) -> None:
    commands.write_file_atomic(tmp_path / "out", NOTE_5)
    assert (tmp_path / "out").read_text() == NOTE_5 and not (tmp_path / "out.tmp").exists()
    with pytest.raises(UnreadableInput):
        commands.write_file_atomic(tmp_path / "no" / "dir", NOTE_5)


# -- the log extends a checkpoint kept elsewhere ------------------------------------------------------


def test_the_log_extends_an_older_checkpoint(vdb: Path, tmp_path: Path) -> None:
    for size in range(1, 6):
        report = log_extends(vdb, sign_note_of(size), PUBKEY)
        assert report.ok and report.problems == () and report.log_size == 5 and report.checkpoint_size == size
        assert report.consistency is not None and report.consistency.verifies()
        assert report.summary() == f"OK: the log (5 entries) extends the checkpoint of {size} entries of {ORIGIN}"
    (tmp_path / "cp").write_text(sign_note_of(3))
    assert commands.verify_checkpoint(vdb, tmp_path / "cp", VKEY).ok


def test_a_log_cut_back_to_an_earlier_signed_checkpoint_is_found(tmp_path: Path) -> None:
    """The in-chain checkpoints alone cannot tell: a log cut back right after one still passes
    verify --pubkey. A checkpoint note kept elsewhere does."""
    db = tmp_path / "m.db"
    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as client:
        for i in range(5):
            client.remember(f"first {i}")
        client.checkpoint()
        cut_at = db.stat().st_size
        for i in range(5):
            client.remember(f"later {i}")
        client.checkpoint()
    kept = commands.checkpoint(db, SEED).note  # the auditor keeps this note
    with open(db, "r+b") as f:
        f.truncate(cut_at)
    assert verify_db(db, pubkey=PUBKEY).ok  # what the chain alone says
    report = log_extends(db, kept, PUBKEY)
    tree = read_tree(db)
    assert not report.ok and [(p.kind, p.message) for p in report.problems] == [
        ("truncated", f"the checkpoint covers {parse_checkpoint(kept)[0].size} entries, the log holds only "
                      f"{tree.size}: it was cut back (or the checkpoint is of another database)")]


def test_a_log_rewritten_below_the_checkpoint_is_found(tmp_path: Path) -> None:
    ops = [(v["op"], {k: bytes.fromhex(x) if k in ("db_id", "digest", "head", "key", "sig") else x
                      for k, x in v["body"].items()}) for v in VECTORS]
    ops[2] = ("grant", {"perms": ["read", "write"], "principal": "bob", "scope": "agent:agent-1"})  # rewritten
    raws, prev = [], ZERO_HASH
    for v, (op, body) in zip(VECTORS, ops, strict=True):
        e = make_entry(v["seq"], v["ts_ns"], prev, op, v["agent"], body)
        raws.append(e.raw)
        prev = e.hash
    forged = tmp_path / "forged.db"
    forged.write_bytes(frames(raws))
    assert log_extends(forged, sign_note_of(2), PUBKEY).ok  # below the rewrite it still extends
    report = log_extends(forged, NOTE_5, PUBKEY)
    assert [p.kind for p in report.problems] == ["rewritten"]
    assert "entries below seq 5 were changed" in report.problems[0].message


def test_log_extends_reports_every_finding(vdb: Path) -> None:
    other = sign_note_of(3, key=OTHER)
    report = log_extends(vdb, other, PUBKEY)
    assert [p.kind for p in report.problems] == ["signature"] and report.consistency is not None
    report = log_extends(vdb, sign_note_of(3), PUBKEY, origin="example.com/x")
    assert [p.kind for p in report.problems] == ["origin"]
    report = log_extends(vdb, "garbage", PUBKEY)
    assert [p.kind for p in report.problems] == ["note"]


def test_log_extends_reports_a_damaged_log(vfile: Path) -> None:
    data = bytearray(vfile.read_bytes())
    data[data.find(b"bob")] ^= 1
    vfile.write_bytes(bytes(data))
    report = log_extends(vfile, NOTE_5, PUBKEY)
    assert [p.kind for p in report.problems] == ["log"] and report.log_size is None
    assert report.to_json()["ok"] is False


# -- erasure leaves every proof intact --------------------------------------------------------------------


def test_forget_and_compact_leave_checkpoints_and_proofs_intact(db: str) -> None:
    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as client:
        keep = client.remember("stays", tags=["a"])
        secret = client.remember("the secret to forget", tags=["private"], metadata={"k": "v"})
        client.update(keep.id, content="stays, updated")
    note_before = commands.checkpoint(db, SEED).note
    bundle_before = commands.prove_seq(db, secret.seq, key=SEED).bundle
    size = parse_checkpoint(note_before)[0].size
    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as client:
        client.forget(secret.id, reason="asked")
        client.compact()
    assert not any(b"the secret to forget" in data for data in stored(db).values())
    # the old note and bundle still verify, and the log still extends the note
    assert verify_checkpoint_note(note_before, PUBKEY).ok
    assert verify_bundle(bundle_before, PUBKEY).ok
    assert log_extends(db, note_before, PUBKEY).ok
    # a fresh proof at that size is byte for byte the old one
    assert commands.prove_seq(db, secret.seq, size=size, key=SEED).bundle == bundle_before
    assert commands.checkpoint(db, SEED).note != note_before  # the tree grew by the forget (and checkpoints)
    grown = read_tree(db)
    p = commands.prove_range(db, size)
    assert verify_consistency(size, grown.size, parse_checkpoint(note_before)[0].root, grown.root(), p.proof)


# -- examples/verify_proof.py, independent of the library ------------------------------------------------


def run_example(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "examples" / "verify_proof.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": ""})


def test_the_example_verifier_accepts_the_librarys_proofs_and_refuses_tampered_ones(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as client:
        for i in range(20):
            client.remember(f"memory {i}" * (i + 1), tags=[f"t{i}"])
        client.grant("agent-2", "agent:agent-1", ["read"])
        client.checkpoint()
    size = read_tree(db).size
    for seq in (0, 1, 7, size - 1):
        path = tmp_path / f"{seq}.tlog-proof"
        path.write_text(commands.prove_seq(db, seq, key=SEED).bundle)
        r = run_example(path, "--pubkey", PUBKEY.hex())
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout == verify_bundle(path.read_text(), PUBKEY).summary() + "\n"
    text = (tmp_path / "7.tlog-proof").read_text()
    lines = text.split("\n")
    tampered = {
        "hash": "\n".join([*lines[:3], ("B" if lines[3][0] != "B" else "C") + lines[3][1:], *lines[4:]]),
        "index": text.replace("index 7\n", "index 8\n"),
        "note": text.replace(f"\n{size}\n", f"\n{size + 1}\n"),
    }
    for what, bad in tampered.items():
        (tmp_path / "bad").write_text(bad)
        r = run_example(tmp_path / "bad", "--pubkey", PUBKEY.hex())
        assert r.returncode == 1 and "FAILED" in r.stdout, what
        assert not verify_bundle(bad, PUBKEY).ok
    r = run_example(tmp_path / "7.tlog-proof", "--pubkey", OTHER_PUB.hex())
    assert r.returncode == 1
    # consistency
    (tmp_path / "old").write_text(commands.prove_seq(db, 0, size=9, key=SEED).bundle.split("\n\n", 1)[1])
    (tmp_path / "new").write_text(commands.checkpoint(db, SEED).note)
    (tmp_path / "p.json").write_text(commands.prove_range(db, 9).to_text())
    r = run_example(tmp_path / "old", tmp_path / "new", tmp_path / "p.json", "--pubkey", PUBKEY.hex())
    assert r.returncode == 0 and r.stdout.startswith(f"OK: the tree of {size} entries"), r.stdout + r.stderr
    assert verify_consistency_proof((tmp_path / "old").read_text(), (tmp_path / "new").read_text(),
                                    (tmp_path / "p.json").read_text(), PUBKEY).ok
    obj = json.loads((tmp_path / "p.json").read_text())
    obj["consistency"][0] = obj["consistency"][1]
    (tmp_path / "p.json").write_text(json.dumps(obj))
    r = run_example(tmp_path / "old", tmp_path / "new", tmp_path / "p.json", "--pubkey", PUBKEY.hex())
    assert r.returncode == 1 and "does not verify" in r.stdout
    assert run_example(tmp_path / "missing", "--pubkey", PUBKEY.hex()).returncode == 2
    assert run_example(tmp_path / "7.tlog-proof").returncode == 2
