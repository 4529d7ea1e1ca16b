"""Check a Mnemo audit export with nothing but hashlib, json, base64, msgpack and cryptography.

    python examples/verify_export.py EXPORT.jsonl [--pubkey HEX]
    python examples/verify_export.py       # alone: makes a signed database and its export, and checks it

Follows docs/FORMAT.md, "Verification of an export". Prints each problem and exits 1 if there are any,
0 if the export is intact, 2 if the file cannot be read. An export to check: `mnemo audit export DB -o
EXPORT.jsonl`; the key, if the database signs its checkpoints: `mnemo keygen`'s KEY.pub.
"""

import base64
import hashlib
import json
import sys
from datetime import datetime, timezone

import msgpack
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def rfc3339(ts_ns):
    secs, frac = divmod(ts_ns, 10**9)
    return datetime.fromtimestamp(secs, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S") + f".{frac:09d}Z"


def as_json(value):
    """A decoded msgpack value as the export shows it: bytes as hex."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [as_json(v) for v in value]
    return value


def verify(path, pubkey=None):
    problems = []
    prev_seq, prev_hash = None, None
    signed_upto = None
    db_id = None
    with open(path, encoding="utf-8") as f:
        for lineno, text in enumerate(f, 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
                entry = base64.b64decode(line["entry"], validate=True)
                version, seq, ts_ns, prev, op, agent, body = msgpack.unpackb(entry, raw=False)
            except Exception as exc:  # anything unreadable is a problem on this line
                problems.append(f"line {lineno}: unreadable: {exc}")
                prev_seq = prev_hash = None
                continue
            where = f"line {lineno} (seq {seq})"
            digest = hashlib.sha256(entry).digest()
            # 1. the hash is SHA-256 of the exact entry bytes; the readable fields are those bytes
            if line.get("hash") != digest.hex():
                problems.append(f"{where}: hash is not SHA-256(entry)")
            shown = {"seq": seq, "ts": rfc3339(ts_ns), "op": op, "agent": agent, "prev": prev.hex(),
                     "body": as_json(body)}
            for key, value in shown.items():
                if line.get(key) != value:
                    problems.append(f"{where}: {key} does not match the entry")
            if version != 1:
                problems.append(f"{where}: unknown entry version {version}")
            # 2. the chain: seq follows, prev is the hash of the line before (the first line anchors it)
            if prev_seq is None:
                if seq == 0 and (op != "genesis" or prev != bytes(32)):
                    problems.append(f"{where}: seq 0 must be genesis with a zero prev")
            else:
                if seq != prev_seq + 1:
                    problems.append(f"{where}: seq does not follow {prev_seq}")
                if prev != prev_hash:
                    problems.append(f"{where}: prev is not the hash of the line before")
            prev_seq, prev_hash = seq, digest
            if op == "genesis":
                db_id = body["db_id"]
            # 3. a put's payload: SHA-256(salt + packed) is the digest; the readable fields are `packed`
            payload = line.get("payload")
            if op == "put" and payload is not None:
                try:
                    salt = bytes.fromhex(payload["salt"])
                    packed = base64.b64decode(payload["packed"], validate=True)
                    if hashlib.sha256(salt + packed).digest() != body["digest"]:
                        problems.append(f"{where}: payload digest mismatch")
                    content, tags, metadata = msgpack.unpackb(packed, raw=False)
                    if isinstance(content, bytes):
                        ok = base64.b64decode(payload.get("content_b64", "")) == content
                    else:
                        ok = payload.get("content") == content
                    ok = ok and payload.get("tags") == tags and payload.get("metadata") == as_json(metadata)
                except Exception as exc:
                    problems.append(f"{where}: unreadable payload: {exc}")
                    ok = True
                if not ok:
                    problems.append(f"{where}: payload fields do not match packed")
            # 4. a checkpoint: Ed25519 over b"mnemo-checkpoint/v1" + db_id + seq (8 bytes) + head
            if op == "checkpoint":
                db_id = db_id or body.get("db_id")
                try:
                    seq_bytes = body["seq"].to_bytes(8, "big")
                    message = b"mnemo-checkpoint/v1" + body["db_id"] + seq_bytes + body["head"]
                    Ed25519PublicKey.from_public_bytes(body["key"]).verify(body["sig"], message)
                    good = body["seq"] == seq - 1 and body["head"] == prev and body["db_id"] == db_id
                except (InvalidSignature, ValueError, KeyError, TypeError, AttributeError):
                    good = False
                if not good:
                    problems.append(f"{where}: checkpoint does not verify")
                elif pubkey is not None and body["key"] != pubkey:
                    problems.append(f"{where}: checkpoint signed by another key")
                else:
                    signed_upto = seq
    if prev_seq is None:
        problems.append("no entries")
    elif pubkey is not None and signed_upto != prev_seq:
        problems.append(f"entries after seq {signed_upto} are not covered by a checkpoint of this key")
    return problems, prev_seq, prev_hash


def demo():
    """Run alone: the one part that uses Mnemo makes what the checks above then read without it."""
    import tempfile

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from mnemo import MnemoClient
    from mnemo.audit import export_audit

    key = Ed25519PrivateKey.generate()
    pub = key.public_key().public_bytes_raw().hex()
    with tempfile.TemporaryDirectory() as tmp, MnemoClient(f"{tmp}/m.db", "agent-1", signing_key=key) as client:
        for note in ("prefers trains", "lives in Lisbon", "allergic to cats"):
            client.remember(note, tags=["user"])
        client.forget(client.remember("a secret").id, reason="asked to")
        client.checkpoint()
        print(f"made an export of {export_audit(f'{tmp}/m.db', f'{tmp}/export.jsonl')} entries; checking it:")
        code = main([f"{tmp}/export.jsonl", "--pubkey", pub])
        with open(f"{tmp}/export.jsonl") as f:
            lines = f.readlines()
        lines[2] = lines[2].replace('"agent":"agent-1"', '"agent":"mallory"')  # the readable field, not the entry
        with open(f"{tmp}/export.jsonl", "w") as f:
            f.writelines(lines)
        print("the same export, one line changed:")
        return code if main([f"{tmp}/export.jsonl", "--pubkey", pub]) == 1 else 1


def main(argv):
    if not argv:
        return demo()
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--pubkey"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    pubkey = bytes.fromhex(argv[2]) if len(argv) == 3 else None
    try:
        problems, head_seq, head_hash = verify(argv[0], pubkey)
    except OSError as exc:
        print(f"cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 2
    for p in problems:
        print(p)
    if problems:
        print(f"FAILED: {len(problems)} problems")
        return 1
    print(f"OK: head {head_seq}:{head_hash.hex()}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
