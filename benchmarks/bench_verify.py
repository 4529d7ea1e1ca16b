"""How fast `verify_db` checks a clean log, beside plain SHA-256 over the same bytes.

    python benchmarks/bench_verify.py [ENTRIES] [--keep PATH]

Builds a log of ENTRIES entries (default 100,000: puts with ~100-byte payloads, one entry per frame,
a signed checkpoint every 1,000 and at the end), then times
  - verify_db (framing, CRCs, every hash and link, payload digests, signatures),
  - verify_db --pubkey,
  - verify_db_and_index (the same pass, also gathering what a client's index must hold: client.verify),
  - verify_db with the scan core's pure-Python twin in place of the C loop,
  - SHA-256 of every entry and every payload digest alone (the floor any verifier pays),
  - SHA-256 of the whole file in one pass (what the disk-and-hash part costs),
and prints entries/s for each.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mnemo.audit import (  # noqa: E402
    load_private_key,
    public_key_bytes,
    sign_checkpoint,
    verify_db,
    verify_db_and_index,
)
from mnemo.chain.codec import (  # noqa: E402
    ZERO_HASH,
    encode_put_payload,
    make_entry,
    pack_record_fields,
    payload_digest,
)
from mnemo.storage.file import verify as verify_file  # noqa: E402
from mnemo.storage.file.framing import encode_file_header, encode_frame  # noqa: E402
from mnemo.storage.file.scan import pure_scan  # noqa: E402

SEED = b"\x42" * 32


def build_log(path: Path, n: int, checkpoint_every: int = 1000) -> tuple[list[bytes], list[bytes]]:
    """Write a clean log of n entries; return the entry bytes and the (salt + packed) digest inputs."""
    db_id = bytes(range(16))
    ts = 1_764_500_000_000_000_000
    raws: list[bytes] = []
    digest_inputs: list[bytes] = []
    e = make_entry(0, ts, ZERO_HASH, "genesis", "owner", {"db_id": db_id, "format": 1})
    parts = [encode_file_header(db_id), encode_frame([(e.raw, None)], 0)]
    raws.append(e.raw)
    prev = e
    for seq in range(1, n):
        if seq % checkpoint_every == 0 or seq == n - 1:
            body = sign_checkpoint(SEED, db_id, prev.seq, prev.hash)
            e = make_entry(seq, ts + seq, prev.hash, "checkpoint", "owner", body)
            payload = None
        else:
            salt = seq.to_bytes(16, "big")
            content = f"memory {seq:08d}: " + "x" * 80
            packed = pack_record_fields(content, ["bench", f"t{seq % 50}"], {"n": seq})
            body = {"digest": payload_digest(salt, packed), "id": f"rec-{seq:08d}", "scope": "agent:bench",
                    "size": len(content), "ver": 1}  # keys in sorted order: no need to canonicalise
            e = make_entry(seq, ts + seq, prev.hash, "put", "bench", body, trusted=True)
            payload = encode_put_payload(salt, packed)
            digest_inputs.append(salt + packed)
        raws.append(e.raw)
        parts.append(encode_frame([(e.raw, payload)], seq))
        prev = e
    path.write_bytes(b"".join(parts))
    return raws, digest_inputs


def timed(fn: Callable[[], object]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process): CPU time is steadier on a busy machine."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("entries", type=int, nargs="?", default=100_000)
    ap.add_argument("--keep", type=Path, help="write the log here and keep it")
    args = ap.parse_args([] if argv is None else argv)  # main() alone: the defaults
    n = args.entries
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or Path(tmp) / "bench.mnemo.db"
        t0 = time.perf_counter()
        raws, digest_inputs = build_log(path, n)
        t_build = time.perf_counter() - t0
        size = os.path.getsize(path)
        pub = public_key_bytes(load_private_key(SEED))

        reports = []
        t_verify = timed(lambda: reports.append(verify_db(path)))
        t_verify_key = timed(lambda: reports.append(verify_db(path, pubkey=pub)))
        t_verify_index = timed(lambda: reports.append(verify_db_and_index(path)[0]))
        with mock.patch.object(verify_file, "scan_frames", pure_scan):
            t_verify_pure = timed(lambda: reports.append(verify_db(path)))
        for r in reports:
            assert r.ok and r.entries == n, r.problems[:5]

        def entry_hashes() -> None:
            sha = hashlib.sha256
            for raw in raws:
                sha(raw).digest()
            for data in digest_inputs:
                sha(data).digest()

        def file_hash() -> None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            h.digest()

        t_sha_entries = timed(entry_hashes)
        t_sha_file = timed(file_hash)

    print(f"log: {n:,} entries, {size / 1e6:.1f} MB (built in {t_build:.1f} s)")
    rows = [
        ("verify_db", t_verify),
        ("verify_db --pubkey", t_verify_key),
        ("verify_db_and_index", t_verify_index),
        ("verify_db, pure-Python scan", t_verify_pure),
        ("SHA-256 of every entry and payload", t_sha_entries),
        ("SHA-256 of the whole file", t_sha_file),
    ]
    print(f"  {'':<36} {'wall':>8}    {'CPU':>8}    {'entries/s (CPU)':>15}  {'MB/s (CPU)':>10}")
    for name, (wall, cpu) in rows:
        cpu = max(cpu, 1e-9)
        print(f"  {name:<36} {wall:8.3f} s  {cpu:8.3f} s  {n / cpu:>15,.0f}  {size / cpu / 1e6:10.1f}")
    ratio = t_verify[1] / max(t_sha_entries[1], 1e-9)
    print(f"  verify_db costs {ratio:.0f}x the CPU of the bare SHA-256 of entries and payloads")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
