"""Check a Mnemo inclusion bundle, or a consistency proof between two checkpoints, with nothing but
hashlib, base64, json and cryptography (docs/TRANSPARENCY.md §2-§5). Exit 0: the proof holds; 1: problems
(each printed); 2: a file cannot be read.

    python examples/verify_proof.py BUNDLE --pubkey HEX
    python examples/verify_proof.py OLD_CHECKPOINT NEW_CHECKPOINT PROOF.json --pubkey HEX
    python examples/verify_proof.py      # alone: makes a database, a key and the proofs, and checks them

The inputs: `mnemo keygen -o KEY` (HEX is the line in KEY.pub), then `mnemo prove DB --seq N --key KEY -o
BUNDLE`, or two `mnemo checkpoint DB --key KEY` notes and `mnemo prove DB --from OLD_SIZE` between them.
"""

import base64
import hashlib
import json
import sys
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def b64(text):
    return base64.b64decode(text, validate=True)


def node(left, right):
    return hashlib.sha256(b"\x01" + left + right).digest()


def verify_inclusion(leaf, index, size, path, root):  # RFC 9162 §2.1.3.2
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in path:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node(p, r)
            while fn & 1 == 0 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def verify_consistency(m, n, old_root, new_root, proof):  # RFC 9162 §2.1.4.2
    if m == n:
        return not proof and old_root == new_root
    if not (0 < m < n) or not proof:
        return False
    path = ([old_root] if m & (m - 1) == 0 else []) + list(proof)
    fn, sn = m - 1, n - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while fn & 1 == 0 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and fr == old_root and sr == new_root


def checkpoint(note, pubkey, problems):
    """(origin, size, root) of a checkpoint note whose one signature line by the log key verifies."""
    text, _, sigs = note.rpartition("\n\n")
    origin, size, root = text.split("\n")[:3]  # anything unreadable raises, and main reports it
    size, root = int(size), b64(root)
    key_id = hashlib.sha256(origin.encode() + b"\n\x01" + pubkey).digest()[:4]  # name, type 0x01, key
    sigs = [b64(s.split(" ")[2]) for s in sigs[:-1].split("\n") if s.split(" ")[:2] == ["\u2014", origin]]
    mine = [s[4:] for s in sigs if s[:4] == key_id]  # lines of other keys are ignored
    try:
        Ed25519PublicKey.from_public_bytes(pubkey).verify(mine[0] if len(mine) == 1 else b"", (text + "\n").encode())
    except InvalidSignature:
        problems.append(f"no one signature line of the given key verifies ({len(mine)} lines of it)")
        return None
    return origin, size, root


def uint(b, i):  # a msgpack unsigned integer at b[i]: (value, next index)
    n = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}.get(b[i], 0)
    return (b[i], i + 1) if b[i] < 0x80 else (int.from_bytes(b[i + 1:i + 1 + n], "big"), i + 1 + n)


def text_at(b, i):  # a msgpack str (fixstr or str 8) at b[i]: (text, next index); TypeError if none
    n, i = (b[i] - 0xA0, i + 1) if 0xA0 <= b[i] <= 0xBF else (b[i + 1], i + 2) if b[i] == 0xD9 else (None, i)
    return b[i:i + n].decode(), i + n


def verify_bundle(text, pubkey, problems):
    head, _, note = text.partition("\n\n")
    lines = head.split("\n")
    if lines[0] != "c2sp.org/tlog-proof@v1" or len(lines) < 3 or not lines[1].startswith("extra "):
        raise ValueError("not a Mnemo bundle (first line, extra, index)")
    entry, index, path = b64(lines[1][6:]), int(lines[2].removeprefix("index ")), [b64(h) for h in lines[3:]]
    seq, i = uint(entry, 2)  # the entry: [1, seq, ts_ns, prev (bin 32), op, agent, body]
    op, i = text_at(entry, uint(entry, i)[1] + 34)
    agent, _ = text_at(entry, i)
    if entry[:2] != b"\x97\x01" or seq != index:
        problems.append(f"the entry is not the Mnemo entry of seq {index}")
    cp = checkpoint(note, pubkey, problems)
    if cp and not verify_inclusion(hashlib.sha256(b"\x00" + entry).digest(), index, cp[1], path, cp[2]):
        problems.append("the inclusion path does not lead to the checkpoint's root")
    return f"seq {seq} ({op} by {agent}, hash {hashlib.sha256(entry).hexdigest()}) is in the tree of " \
           f"{cp[1]} entries of {cp[0]}" if cp else ""


def verify_consistency_files(old_note, new_note, proof_text, pubkey, problems):
    old, new = checkpoint(old_note, pubkey, problems), checkpoint(new_note, pubkey, problems)
    p = json.loads(proof_text)
    if old and new:
        if old[0] != new[0] or p["origin"] != old[0]:
            problems.append("the checkpoints and the proof are not of one origin")
        if (p["old_size"], b64(p["old_root"]), p["new_size"], b64(p["new_root"])) != (*old[1:], *new[1:]):
            problems.append("the proof's sizes and roots are not the checkpoints'")
        if not verify_consistency(old[1], new[1], old[2], new[2], [b64(h) for h in p["consistency"]]):
            problems.append("the consistency proof does not verify")
    return f"the tree of {new[1]} entries of {new[0]} extends the tree of {old[1]} entries" if old and new else ""


def demo():
    """Run alone: the one part that uses Mnemo makes what the checks above then read without it."""
    import tempfile

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from mnemo import MnemoClient
    from mnemo.transparency import commands

    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes_raw().hex()
    with tempfile.TemporaryDirectory() as tmp, MnemoClient(f"{tmp}/m.db", "agent-1") as client:
        files = {name: f"{tmp}/{name}" for name in ("entry-1.tlog-proof", "old.note", "new.note", "proof.json")}
        client.remember("prefers trains")
        Path(files["old.note"]).write_text(commands.checkpoint(f"{tmp}/m.db", key).note)
        for note in ("lives in Lisbon", "allergic to cats"):
            client.remember(note)
        bundle = commands.prove_seq(f"{tmp}/m.db", 1, key=key).bundle
        Path(files["entry-1.tlog-proof"]).write_text(bundle)
        Path(files["new.note"]).write_text(commands.checkpoint(f"{tmp}/m.db", key).note)
        Path(files["proof.json"]).write_text(commands.prove_range(f"{tmp}/m.db", 2).to_text())
        print("made a database, a key, the bundle of seq 1, two checkpoints and the proof between them")
        codes = [main([files["entry-1.tlog-proof"], "--pubkey", pub]),
                 main([files["old.note"], files["new.note"], files["proof.json"], "--pubkey", pub])]
        Path(files["entry-1.tlog-proof"]).write_text(bundle.replace("index 1\n", "index 2\n"))
        print("the bundle, its index changed:")
        return 0 if codes == [0, 0] and main([files["entry-1.tlog-proof"], "--pubkey", pub]) == 1 else 1


def main(argv):
    if not argv:
        return demo()
    try:
        pubkey = bytes.fromhex(argv[-1]) if len(argv) in (3, 5) and argv[-2] == "--pubkey" else b""
    except ValueError:
        pubkey = b""
    if len(pubkey) != 32:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        return 2
    try:
        texts = [Path(name).read_text(encoding="utf-8") for name in argv[:-2]]
    except (OSError, UnicodeDecodeError) as exc:
        print(f"cannot read: {exc}", file=sys.stderr)
        return 2
    problems, check = [], verify_bundle if len(texts) == 1 else verify_consistency_files
    try:
        ok_line = check(*texts, pubkey, problems)
    except (ValueError, KeyError, IndexError, TypeError) as exc:  # unreadable fields: a defect in the file
        problems.append(f"malformed: {exc}")
    for p in problems:
        print(p)
    print(f"FAILED: {len(problems)} problems" if problems else f"OK: {ok_line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
