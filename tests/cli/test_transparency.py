"""The transparency commands of `mnemo` (docs/TRANSPARENCY.md §6): exit codes and exact output."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from helpers.backends import onto
from helpers.cli import run
from helpers.transparency_vectors import (
    BUNDLE_1,
    CONSISTENCY_3_5_DISPLAY,
    ENTRIES,
    NOTE_5,
    ORIGIN,
    PUBKEY,
    SEED,
    VKEY,
    write_vector_db,
)

from mnemo import MnemoClient
from mnemo.audit import load_private_key, public_key_bytes
from mnemo.chain.tree import HashList, leaf_hash
from mnemo.cli.transparency import NO_CHECKPOINT_OF_KEY
from mnemo.cli.verify import NO_SIGNED_CHECKPOINT_HINT
from mnemo.transparency.cosign import verify_cosigned_checkpoint
from mnemo.transparency.log import read_tree
from mnemo.transparency.note import sign_checkpoint_note

OK_1 = (f"OK: seq 1 (put by agent-1, hash 879499c8fb8947a09b50e7ac102646702b8ee4a67e875ad3067c6b2ae4d5a414) "
        f"is in the tree of 5 entries of {ORIGIN}\n")
CONSISTENCY_3_5 = re.sub(r"\n +", " ", CONSISTENCY_3_5_DISPLAY) + "\n"


@pytest.fixture
def files(db: str, tmp_path: Path) -> dict[str, Any]:
    """The vector chain on each backend (copied into PostgreSQL), and the keys and notes of the tests."""
    db = onto(db, write_vector_db(tmp_path / "vectors.db"))
    key = tmp_path / "log.key"
    key.write_bytes(SEED.hex().encode() + b"\n")  # what signing_key takes: the seed's hex
    pub = tmp_path / "log.pub"
    pub.write_text(PUBKEY.hex() + "\n")
    leaves = HashList([leaf_hash(e) for e in ENTRIES])
    old = tmp_path / "old.note"
    old.write_text(sign_checkpoint_note(ORIGIN, 3, leaves.root(3), SEED))
    return {"db": db, "key": key, "pub": pub, "old": old, "dir": tmp_path}


# -- checkpoint -----------------------------------------------------------------------------------------


def test_checkpoint(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "checkpoint", files["db"], "--key", files["key"]) == (0, NOTE_5, "")
    out = files["dir"] / "cp.note"
    assert run(capsys, "checkpoint", files["db"], "--key", files["key"], "-o", out) == (
        0, "", f"the checkpoint of 5 entries written to {out}\n")
    assert out.read_text() == NOTE_5 and not Path(str(out) + ".tmp").exists()
    code, text, _ = run(capsys, "checkpoint", files["db"], "--key", files["key"], "--json")
    assert code == 0 and json.loads(text) == {
        "origin": ORIGIN, "tree_size": 5, "root": "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=", "note": NOTE_5}
    assert run(capsys, "checkpoint", files["db"], "--key", files["key"], "--vkey") == (0, VKEY + "\n", "")
    code, text, _ = run(capsys, "checkpoint", files["db"], "--key", files["key"], "--origin", "example.com/log")
    assert code == 0 and text.startswith("example.com/log\n5\nFi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=\n\n")


@pytest.mark.parametrize("backend", ["file"])  # the note file is the same from either backend
def test_checkpoint_never_writes_through_a_link_at_the_temp_name(
    files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`-o FILE` writes FILE.tmp and renames it: a link planted at FILE.tmp is removed, not followed."""
    victim = files["dir"] / "victim"
    victim.write_bytes(b"precious, not Mnemo's")
    out = files["dir"] / "kept.note"
    Path(str(out) + ".tmp").symlink_to(victim)
    assert run(capsys, "checkpoint", files["db"], "--key", files["key"], "-o", out) == (
        0, "", f"the checkpoint of 5 entries written to {out}\n")
    assert victim.read_bytes() == b"precious, not Mnemo's"
    assert out.read_text() == NOTE_5 and not out.is_symlink() and not os.path.lexists(str(out) + ".tmp")


def test_checkpoint_refusals(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, key = files["db"], files["key"]
    code, out, err = run(capsys, "checkpoint", db, "--key", key, "--origin", "has space")
    assert (code, out) == (2, "") and "origin 'has space' must be non-empty" in err
    code, out, err = run(capsys, "checkpoint", db)
    assert (code, out) == (2, "") and "Missing option '--key'" in err
    (files["dir"] / "bad.key").write_text("not a key\n")
    code, out, err = run(capsys, "checkpoint", db, "--key", files["dir"] / "bad.key")
    assert (code, out) == (2, "") and err.startswith("mnemo: error: unreadable key: ")
    code, out, err = run(capsys, "checkpoint", files["dir"] / "missing.db", "--key", key)
    assert (code, out) == (2, "") and "No such file or directory" in err
    (files["dir"] / "text").write_text("hello")
    assert run(capsys, "checkpoint", files["dir"] / "text", "--key", key)[0] == 2  # not a Mnemo database


def test_checkpoint_of_a_damaged_log_signs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = write_vector_db(tmp_path / "vectors.db")
    key = tmp_path / "log.key"
    key.write_bytes(SEED.hex().encode() + b"\n")
    data = bytearray(db.read_bytes())
    data[data.find(b"bob")] ^= 1
    db.write_bytes(bytes(data))
    code, out, err = run(capsys, "checkpoint", db, "--key", key)
    assert (code, out) == (1, "") and "damaged frame at offset" in err  # nothing signed
    code, out, err = run(capsys, "checkpoint", db, "--key", key, "--json")
    assert code == 1 and out == "" and json.loads(err)["error"]["type"] == "DamagedLog"


# -- prove ----------------------------------------------------------------------------------------------


def test_prove_seq(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db, key = files["db"], files["key"]
    assert run(capsys, "prove", db, "--seq", "1", "--key", key) == (0, BUNDLE_1, "")
    out = files["dir"] / "b.tlog-proof"
    assert run(capsys, "prove", db, "--seq", "1", "--key", key, "-o", out)[0] == 0 and out.read_text() == BUNDLE_1
    code, text, _ = run(capsys, "prove", db, "--seq", "1", "--key", key, "--json")
    obj = json.loads(text)
    assert code == 0 and (obj["origin"], obj["tree_size"], obj["leaf_index"]) == (ORIGIN, 5, 1)
    assert obj["checkpoint"] == NOTE_5
    code, text, _ = run(capsys, "prove", db, "--seq", "2", "--size", "3", "--key", key)
    assert code == 0 and "\nindex 2\n" in text and text.endswith(files["old"].read_text())
    # a note signed earlier is embedded verbatim
    assert run(capsys, "prove", db, "--seq", "2", "--checkpoint", files["old"]) == (0, text, "")


@pytest.mark.parametrize(("args", "exit_code", "message"), [
    (["--seq", "1"], 2, "give exactly one of a signing key and a checkpoint"),
    (["--seq", "1", "--key", "KEY", "--checkpoint", "OLD"], 2, "give exactly one"),
    (["--seq", "5", "--key", "KEY"], 2, "seq 5 is not in the tree of 5 entries"),
    (["--seq", "0", "--size", "0", "--key", "KEY"], 2, "size 0 is not between 1 and the tree size 5"),
    (["--seq", "0", "--size", "6", "--key", "KEY"], 2, "size 6 is not between 1 and the tree size 5"),
    (["--seq", "1", "--checkpoint", "OLD", "--size", "4"], 2, "--size 4 is not the checkpoint's size 3"),
    (["--seq", "1", "--to", "3", "--key", "KEY"], 2, "--to goes with --from"),
    (["--from", "3", "--key", "KEY"], 2, "--key go with --seq"),
    (["--seq", "1", "--from", "3"], 2, "give one of --seq"),
    ([], 2, "give one of --seq"),
    (["--from", "0"], 2, "sizes 0..5 are not 1 <= old <= new"),
    (["--from", "4", "--to", "3"], 2, "sizes 4..3"),
    (["--from", "1", "--to", "6"], 2, "sizes 1..6"),
    (["--seq", "x", "--key", "KEY"], 2, "'x' is not a valid integer"),
    (["--seq", "1", "--checkpoint", "FORGED"], 1, "the checkpoint's root is"),
])
def test_prove_refusals(files: dict[str, Path], capsys: pytest.CaptureFixture[str], args: list[str], exit_code: int,
                        message: str) -> None:
    forged = files["dir"] / "forged.note"
    forged.write_text(files["old"].read_text().replace("\n3\n", "\n4\n"))  # a size-3 root claimed for size 4
    names = {"KEY": files["key"], "OLD": files["old"], "FORGED": forged}
    code, out, err = run(capsys, "prove", files["db"], *[names.get(a, a) for a in args])
    assert (code, out) == (exit_code, "") and message in err, err


def test_prove_range(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    db = files["db"]
    assert run(capsys, "prove", db, "--from", "3") == (0, CONSISTENCY_3_5, "")
    assert run(capsys, "prove", db, "--from", "3", "--to", "5", "--json") == (0, CONSISTENCY_3_5, "")
    code, text, _ = run(capsys, "prove", db, "--from", "4", "--to", "4")
    assert code == 0 and json.loads(text)["consistency"] == []
    out = files["dir"] / "p.json"
    assert run(capsys, "prove", db, "--from", "3", "-o", out) == (
        0, "", f"the consistency proof from 3 to 5 written to {out}\n")
    assert out.read_text() == CONSISTENCY_3_5


# -- audit verify-proof / verify-consistency ------------------------------------------------------------


def test_verify_proof(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    b = files["dir"] / "b.tlog-proof"
    b.write_text(BUNDLE_1)
    for key in (files["pub"], PUBKEY.hex(), VKEY):
        assert run(capsys, "audit", "verify-proof", b, "--pubkey", key) == (0, OK_1, "")
    assert run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"], "--origin", ORIGIN)[0] == 0
    code, text, _ = run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"], "--json")
    assert code == 0 and json.loads(text) == {
        "ok": True, "origin": ORIGIN, "tree_size": 5, "leaf_index": 1, "seq": 1, "op": "put", "agent": "agent-1",
        "hash": "879499c8fb8947a09b50e7ac102646702b8ee4a67e875ad3067c6b2ae4d5a414", "problems": []}


def test_verify_proof_refuses_tampered_bundles(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    b = files["dir"] / "b.tlog-proof"
    flipped = BUNDLE_1.replace("8CRQaZ5CEQQ", "8CRQaZ5CEQR")
    b.write_text(flipped)
    assert run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"]) == (1, (
        f"FAILED: {b}: 1 problem\n"
        "  problem [path]: the inclusion path (3 hashes) does not lead from the entry at index 1 to the root of "
        "the tree of 5 entries\n"), "")
    b.write_text(BUNDLE_1.replace("extra lwEBzxh8", "extra lwEBzxh9"))  # the entry changed
    code, out, _ = run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"])
    assert code == 1 and out.startswith(f"FAILED: {b}: ")
    b.write_text(BUNDLE_1)
    other = public_key_bytes(load_private_key(b"\x07" * 32)).hex()
    code, out, _ = run(capsys, "audit", "verify-proof", b, "--pubkey", other)
    assert code == 1 and "problem [signature]: checkpoint: no signature line of the given key" in out
    code, out, _ = run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"], "--origin", "example.com/x")
    assert code == 1 and "problem [origin]" in out
    b.write_text(flipped)
    code, out, _ = run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"], "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and [p["kind"] for p in doc["problems"]] == ["path"]


def test_verify_proof_exit_2(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    b = files["dir"] / "b.tlog-proof"
    for data, message in ((b"junk\n", "the first line is not c2sp.org/tlog-proof@v1"),
                          (b"\xff\xfe", "the bundle is not UTF-8")):
        b.write_bytes(data)
        code, out, err = run(capsys, "audit", "verify-proof", b, "--pubkey", files["pub"])
        assert (code, out) == (2, "") and message in err
    b.write_text(BUNDLE_1)
    for argv, message in (([files["dir"] / "missing", "--pubkey", files["pub"]], "No such file"),
                          ([files["dir"], "--pubkey", files["pub"]], "not a regular file"),
                          ([b, "--pubkey", "nonsense"], "unreadable public key"),
                          ([b, "--pubkey", files["dir"]], "not a regular file"),
                          ([b], "Missing option '--pubkey'")):
        code, out, err = run(capsys, "audit", "verify-proof", *argv)
        assert (code, out) == (2, "") and message in err, (argv, err)


def test_verify_consistency(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    new, proof = files["dir"] / "new.note", files["dir"] / "p.json"
    new.write_text(NOTE_5)
    proof.write_text(CONSISTENCY_3_5)
    argv = ["audit", "verify-consistency", files["old"], new, proof, "--pubkey", files["pub"]]
    assert run(capsys, *argv) == (0, f"OK: the tree of 5 entries of {ORIGIN} extends the tree of 3 entries\n", "")
    code, text, _ = run(capsys, *argv, "--json")
    assert code == 0 and json.loads(text) == {"ok": True, "origin": ORIGIN, "tree_size": 5, "old_size": 3,
                                              "new_size": 5, "problems": []}
    proof.write_text(CONSISTENCY_3_5.replace("uxpS/n2X", "uxpS/n2Y"))
    assert run(capsys, *argv) == (1, (f"FAILED: {proof}: 1 problem\n"
                                      "  problem [consistency]: the proof from size 3 to 5 does not verify\n"), "")
    proof.write_text("not json")
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "") and "not UTF-8 JSON" in err
    code, out, err = run(capsys, "audit", "verify-consistency", files["old"], files["dir"] / "gone", proof,
                         "--pubkey", files["pub"])
    assert (code, out) == (2, "") and "No such file" in err


# -- cosign -----------------------------------------------------------------------------------------------


def test_cosign(files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    d = files["dir"]
    wkey = d / "w.key"
    wkey.write_bytes((b"\x11" * 32).hex().encode())
    wpub = public_key_bytes(load_private_key(b"\x11" * 32))
    first = d / "first.note"
    argv = ["cosign", files["old"], "--key", wkey, "--name", "w.example/1", "--log-pubkey", files["pub"]]
    assert run(capsys, *argv, "-o", first)[0] == 0
    assert verify_cosigned_checkpoint(first.read_text(), PUBKEY, [("w.example/1", wpub)]).ok
    new, proof = d / "new.note", d / "p.json"
    new.write_text(NOTE_5)
    proof.write_text(CONSISTENCY_3_5)
    code, out, err = run(capsys, "cosign", new, "--key", wkey, "--name", "w.example/1", "--log-pubkey",
                         files["pub"], "--old", first, "--proof", proof)
    assert code == 0 and err == "" and out.startswith(NOTE_5) and out.count("\n\u2014 w.example/1 ") == 1
    assert verify_cosigned_checkpoint(out, PUBKEY, [("w.example/1", wpub)]).ok
    code, text, _ = run(capsys, "cosign", new, "--key", wkey, "--name", "w.example/1", "--log-pubkey",
                        files["pub"], "--old", first, "--proof", proof, "--json")
    assert code == 0 and set(json.loads(text)) == {"origin", "tree_size", "root", "note"}
    # refusals: the log went back (exit 1); a proof without the old checkpoint (exit 2)
    code, out, err = run(capsys, "cosign", files["old"], "--key", wkey, "--name", "w.example/1", "--log-pubkey",
                         files["pub"], "--old", new)
    assert (code, out) == (1, "") and "the old checkpoint's size 5 is above the new one's 3" in err
    code, out, err = run(capsys, "cosign", new, "--key", wkey, "--name", "w.example/1", "--log-pubkey",
                         files["pub"], "--proof", proof)
    assert (code, out) == (2, "") and "needs the old checkpoint" in err
    code, out, err = run(capsys, "cosign", new, "--key", wkey, "--name", "bad name", "--log-pubkey", files["pub"])
    assert (code, out) == (2, "") and "witness name 'bad name'" in err


# -- verify --checkpoint ----------------------------------------------------------------------------------


def test_verify_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "m.db"
    key = tmp_path / "k"
    key.write_bytes(SEED)
    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as client:
        for i in range(3):
            client.remember(f"first {i}")
        client.checkpoint()
        cut_at = db.stat().st_size
        for i in range(3):
            client.remember(f"later {i}")
        client.checkpoint()
    note = tmp_path / "kept.note"
    assert run(capsys, "checkpoint", db, "--key", key, "-o", note)[0] == 0
    size = int(note.read_text().split("\n")[1])
    origin = read_tree(db).default_origin
    code, out, err = run(capsys, "verify", db, "--pubkey", PUBKEY.hex(), "--checkpoint", note)
    assert code == 0 and err == "" and out.endswith(
        f"checkpoint {note}: OK: the log ({size} entries) extends the checkpoint of {size} entries of {origin}\n")
    with open(db, "r+b") as f:
        f.truncate(cut_at)  # cut back to the first signed checkpoint: the chain alone still verifies
    assert run(capsys, "verify", db, "--pubkey", PUBKEY.hex())[0] == 0
    code, out, err = run(capsys, "verify", db, "--pubkey", PUBKEY.hex(), "--checkpoint", note)
    assert code == 1 and err == ""
    assert f"FAILED: checkpoint {note}: 1 problem\n  problem [truncated]: the checkpoint covers {size} entries" in out
    vkey = tmp_path / "k.vkey"  # a vkey as --pubkey
    assert run(capsys, "checkpoint", db, "--key", key, "--vkey", "-o", vkey)[0] == 0
    code, out, _ = run(capsys, "verify", db, "--pubkey", vkey, "--checkpoint", note, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ok"] is False and doc["checkpoint"]["problems"][0]["kind"] == "truncated"
    code, out, err = run(capsys, "verify", db, "--checkpoint", note)
    assert (code, out) == (2, "") and "--checkpoint needs --pubkey" in err
    code, out, err = run(capsys, "verify", db, "--origin", "x")
    assert (code, out) == (2, "") and "--origin goes with --checkpoint" in err


def test_a_kept_note_is_checked_on_a_database_written_without_a_signing_key(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's "Proofs for auditors" on the database its Python example wrote (no signing key): the
    note the key signed is checked, and the log's lack of checkpoints of that key is said, not a failure."""
    with MnemoClient(db, "agent-1", durability="none") as client:
        rec = client.remember("The user prefers metric units")
        client.forget(rec.id)
    key, pub, note = tmp_path / "mnemo-key", tmp_path / "mnemo-key.pub", tmp_path / "kept.note"
    assert run(capsys, "keygen", "-o", key)[0] == 0
    assert run(capsys, "checkpoint", db, "--key", key, "-o", note)[0] == 0
    size = int(note.read_text().split("\n")[1])
    origin = read_tree(db).default_origin
    before = read_tree(db).root()
    code, out, err = run(capsys, "verify", db, "--pubkey", pub, "--checkpoint", note)
    assert (code, err) == (0, ""), out
    assert out.splitlines()[0].startswith(f"OK: {db}: {size} entries, chain intact")
    assert f"  note: {NO_CHECKPOINT_OF_KEY}\n" in out
    assert out.endswith(f"checkpoint {note}: OK: the log ({size} entries) extends the checkpoint of {size} entries "
                        f"of {origin}\n")
    code, out, _ = run(capsys, "verify", db, "--pubkey", pub, "--checkpoint", note, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["problems"] == [] and doc["notes"][-1] == NO_CHECKPOINT_OF_KEY
    assert read_tree(db).root() == before  # read as an auditor: nothing written
    # --pubkey alone still asks for a checkpoint of the key in the log
    code, out, _ = run(capsys, "verify", db, "--pubkey", pub)
    assert code == 1 and "problem [unsigned] -: no checkpoint in the log is signed by the given key" in out
    # ... and says where a checkpoint of the key comes from, and how to check the note instead
    assert out.endswith("\n  problem [unsigned] -: no checkpoint in the log is signed by the given key\n"
                        f"{NO_SIGNED_CHECKPOINT_HINT}\n")
    code, out, _ = run(capsys, "verify", db, "--pubkey", pub, "--json")
    assert code == 1 and json.loads(out)["problems"][-1]["kind"] == "unsigned"  # one JSON document, no hint
    # the note still pins the log: a note of more entries than the log holds (another, longer history)
    with MnemoClient(tmp_path / "other.db", "agent-1", durability="none") as client:
        for i in range(size + 2):
            client.remember(f"other {i}")
    longer = tmp_path / "longer.note"
    assert run(capsys, "checkpoint", tmp_path / "other.db", "--key", key, "--origin", origin, "-o", longer)[0] == 0
    code, out, _ = run(capsys, "verify", db, "--pubkey", pub, "--checkpoint", longer)
    assert code == 1 and f"FAILED: checkpoint {longer}: 1 problem\n  problem [truncated]: " in out
    # and a note of the same size over other entries
    with MnemoClient(tmp_path / "same.db", "agent-1", durability="none") as client:
        while read_tree(tmp_path / "same.db").size < size:
            client.remember("another history")
    forged = tmp_path / "forged.note"
    assert run(capsys, "checkpoint", tmp_path / "same.db", "--key", key, "--origin", origin, "-o", forged)[0] == 0
    code, out, _ = run(capsys, "verify", db, "--pubkey", pub, "--checkpoint", forged)
    assert code == 1 and f"FAILED: checkpoint {forged}: 1 problem\n  problem [rewritten]: " in out


def test_a_log_signed_with_the_notes_key_keeps_every_in_chain_check(
    db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --checkpoint, a log that holds checkpoints of the key is still checked as --pubkey alone checks
    it: entries appended without the key fail; a log signed only by another key is checked against the
    keys its checkpoints name."""
    key = tmp_path / "k"
    key.write_bytes(SEED)
    with MnemoClient(db, "agent-1", durability="none", signing_key=SEED) as client:
        client.remember("signed")
        client.checkpoint()
    note = tmp_path / "kept.note"
    assert run(capsys, "checkpoint", db, "--key", key, "-o", note)[0] == 0
    code, out, _ = run(capsys, "verify", db, "--pubkey", PUBKEY.hex(), "--checkpoint", note)
    assert code == 0 and NO_CHECKPOINT_OF_KEY not in out
    with MnemoClient(db, "agent-1", durability="none") as client:  # appended by someone without the key
        client.remember("appended later")
    last = read_tree(db).size - 1
    code, out, _ = run(capsys, "verify", db, "--pubkey", PUBKEY.hex(), "--checkpoint", note)
    assert code == 1 and NO_CHECKPOINT_OF_KEY not in out
    assert f"problem [unsigned] seq {last}: entries seq {last}..{last} follow the last checkpoint signed by the " \
           "given key" in out
    assert f"checkpoint {note}: OK: " in out  # the note itself holds: the log extends it
    # a log whose only checkpoints are another key's, and a note of this key
    other = tmp_path / "other.db"
    with MnemoClient(other, "agent-1", durability="none", signing_key=bytes(range(32))) as client:
        client.remember("signed by another key")
        client.checkpoint()
    other_note = tmp_path / "other.note"
    assert run(capsys, "checkpoint", other, "--key", key, "-o", other_note)[0] == 0
    code, out, _ = run(capsys, "verify", other, "--pubkey", PUBKEY.hex(), "--checkpoint", other_note)
    assert code == 0 and f"  note: {NO_CHECKPOINT_OF_KEY}\n" in out
    assert "erased versions: 0; checkpoints verified: 1" in out
