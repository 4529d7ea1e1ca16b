"""The Mnemo transparency vectors (docs/TRANSPARENCY.md §8 B) and the database they come from: the five
entries of tests/data/chain-vectors.json as a log, db_id 00..0f, key seed 0x42 * 32."""

from __future__ import annotations

import json
from pathlib import Path

from mnemo.audit import load_private_key, public_key_bytes
from mnemo.chain.codec import encode_forget_payload, encode_put_payload
from mnemo.storage.file.framing import encode_file_header, encode_frame

VECTORS = json.loads((Path(__file__).resolve().parents[1] / "data" / "chain-vectors.json").read_text())["vectors"]
ENTRIES = [bytes.fromhex(v["entry_hex"]) for v in VECTORS]
DB_ID = bytes(range(16))
SEED = b"\x42" * 32
PUBKEY = public_key_bytes(load_private_key(SEED))
ORIGIN = "mnemo.local/000102030405060708090a0b0c0d0e0f"

ROOTS = {
    1: (
        "6c4347610ac116b4122e44aa7aff68a5265c1ea2aa776e40baa6525783ef5c1c",
        "bENHYQrBFrQSLkSqev9opSZcHqKqd25AuqZSV4PvXBw=",
    ),
    2: (
        "137f273f844a3c2cfc53e8a26d66dfb4ab03d2b9311f8bfc83440f36dfc4ca8b",
        "E38nP4RKPCz8U+iibWbftKsD0rkxH4v8g0QPNt/Eyos=",
    ),
    3: (
        "bf31127fe1325ff272a7ccb134846286d9d0f0687b020e720bddcfac84bf4327",
        "vzESf+EyX/Jyp8yxNIRihtnQ8Gh7Ag5yC93PrIS/Qyc=",
    ),
    4: (
        "ad542fefe582f2f1c09c76514ba546a04201826c7b79cbf0680e6e759099237d",
        "rVQv7+WC8vHAnHZRS6VGoEIBgmx7ecvwaA5udZCZI30=",
    ),
    5: (
        "162dde87704bbd3289e62bec7f9e4cc6b5ede2d2ffe89ea4a7c9a03f0a4a63cd",
        "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=",
    ),
}
KEY_ID = "053b8902"
VKEY = "mnemo.local/000102030405060708090a0b0c0d0e0f+053b8902+ASFS+NGbeR0kRTJC4V8uq2y3z/p7al7TAJeWDgaYgdsS"

NOTE_5 = (
    "mnemo.local/000102030405060708090a0b0c0d0e0f\n"
    "5\n"
    "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=\n"
    "\n"
    "\u2014 mnemo.local/000102030405060708090a0b0c0d0e0f BTuJAhLiQcXhIH97bzppzqksj1PtZm6P/Zz/l38OxIeCVDheC5WcexK1Tb"
    "FV9Oxmv6KuvCu7TasXLzQi3mbE+nnD7Qo=\n"
)

BUNDLE_1 = (
    "c2sp.org/tlog-proof@v1\n"
    "extra lwEBzxh8w2a6LUPoxCA3uwzBgOCtq1g8zNZVfONDUBmqe/GI5e5wNqtMmM39daNwdXSnYWdlbnQtMYWmZGlnZXN0xCBihuUHUw0+ZV2"
    "S0UrgKyzSZE2EU9S99e6URwHeULvjdKJpZNkgMDE5M2ExYjJjM2Q0ZTVmNmE3YjhjOWQwZTFmMmEzYjSlc2NvcGWtYWdlbnQ6YWdlbnQtMa"
    "RzaXplC6N2ZXIB\n"
    "index 1\n"
    "bENHYQrBFrQSLkSqev9opSZcHqKqd25AuqZSV4PvXBw=\n"
    "8CRQaZ5CEQQsqUFQTihPZ5twhYVzKkPLIuv2//UyUM4=\n"
    "cQ5E8Wfqi+1IPIX+GvF5v23c20QW4KyGKUf8MEfYSIU=\n"
    "\n" + NOTE_5
)

# §8's consistency JSON from 3 to 5, as printed there over several lines
CONSISTENCY_3_5_DISPLAY = """{"origin": "mnemo.local/000102030405060708090a0b0c0d0e0f", "old_size": 3, "new_size": 5,
 "old_root": "vzESf+EyX/Jyp8yxNIRihtnQ8Gh7Ag5yC93PrIS/Qyc=", "new_root": "Fi3eh3BLvTKJ5ivsf55MxrXt4tL/6J6kp8mgPwpKY80=",
 "consistency": ["uxpS/n2XtrjfFmNx23B+mX2U5cQjNGa43XowXvX7i+s=", "jygqtbTks1NxZZPIdo6OOmtF0XUUpP96zOeP/qytskA=",
                 "E38nP4RKPCz8U+iibWbftKsD0rkxH4v8g0QPNt/Eyos=", "cQ5E8Wfqi+1IPIX+GvF5v23c20QW4KyGKUf8MEfYSIU="]}"""


def vector_log() -> bytes:
    """The vectors as a database file, one frame per entry, with the put's and forget's payloads."""
    (put,) = [v for v in VECTORS if "payload" in v]
    p = put["payload"]
    payloads = {
        put["seq"]: encode_put_payload(bytes.fromhex(p["salt"]), bytes.fromhex(p["packed_hex"])),
        3: encode_forget_payload(None),
    }
    data = encode_file_header(DB_ID)
    for v in VECTORS:
        data += encode_frame([(bytes.fromhex(v["entry_hex"]), payloads.get(v["seq"]))])
    return data


def write_vector_db(path: Path) -> Path:
    path.write_bytes(vector_log())
    return path
