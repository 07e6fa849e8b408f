"""Record the pgoutput capture the decode benchmarks replay.

Starts a throwaway PostgreSQL (15 by default), creates

    create table bench (id bigint primary key, name text, amount numeric(12,2),
                        ts timestamptz, flag bool, score float8, doc jsonb, uid uuid);

and a publication ``benchpub`` for it, creates two ``pgoutput`` slots (one read in
text mode, one in binary mode), inserts ``--rows`` rows (default 1,000,000) with random
values in transactions of ``--batch`` rows (default 10,000), then drains both slots with
``pg_logical_slot_get_binary_changes(slot, NULL, <upto_nchanges>, 'proto_version', '1',
'publication_names', 'benchpub' [, 'binary', 'true'])`` in chunks, so memory stays
bounded, and writes every message to a capture file. The server is stopped and its
data directory removed afterwards.

Output (in ``benches/.cache/`` unless ``--out-dir`` / ``PGWIRE_CDC_BENCH_CACHE`` says
otherwise; the directory is git-ignored):

* ``bench_text.bin``   -- text tuple format (``proto_version 1``)
* ``bench_binary.bin`` -- binary tuple format (``proto_version 1``, ``binary true``)
* ``bench_text.json`` / ``bench_binary.json`` -- sidecar metadata: row and message
  counts, message counts per tag, payload and file sizes, SHA-256 of the file, server
  version, the options used, and how long generation took.

Capture file format
-------------------
No header. A plain concatenation of records, one per pgoutput message, in the order the
server returned them::

    u64  lsn   big-endian  -- the ``lsn`` column of the SQL interface (the WAL position
                              the server reported for the message)
    u32  len   big-endian  -- length of the message in bytes
    u8[len]    the bare pgoutput message (the ``data`` column): its first byte is the
               message tag ('B', 'R', 'I', 'C', ...)

A file ends exactly after its last record; a truncated record is an error. The stream of a
run is: for each transaction ``B``, then ``R`` (relation, the first time and whenever the
server re-sends it), ``I`` x rows, ``C``.

The files are reused when present and their sidecar matches the requested ``--rows`` and
``--batch``; pass ``--force`` to re-record.

Usage::

    .venv/bin/python benches/capture_stream.py [--rows N] [--batch N] [--force]

Runs a throwaway PostgreSQL 15 (Debian's ``postgresql-15``) through
tests/support/server.py, as the ``postgres`` OS user when run as root.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg

sys.path.append(str(Path(__file__).resolve().parent.parent / "tests"))
from support.server import PgCluster

HERE = Path(__file__).resolve().parent
DEFAULT_CACHE = Path(os.environ.get("PGWIRE_CDC_BENCH_CACHE", HERE / ".cache"))

RECORD_HEADER = struct.Struct(">QI")  # u64 lsn, u32 len, both big-endian

TABLE_DDL = """
create table bench (
    id bigint primary key,
    name text,
    amount numeric(12,2),
    ts timestamptz,
    flag bool,
    score float8,
    doc jsonb,
    uid uuid
)
"""

# One transaction of random rows; %(lo)s and %(hi)s bound the ids (inclusive).
# name: hex text of 8..64 chars, 3 % NULL; amount: +-1,000,000 with cents;
# ts: within ~10 years; doc: a small nested jsonb object (2 % NULL); uid: random v4.
INSERT_SQL = """
insert into bench (id, name, amount, ts, flag, score, doc, uid)
select g,
       case when random() < 0.03 then null
            else substr(md5(random()::text) || md5(random()::text), 1,
                        8 + (random() * 56)::int) end,
       round((random() * 2000000 - 1000000)::numeric, 2),
       timestamptz '2015-01-01 00:00:00+00' + random() * interval '3650 days',
       random() < 0.5,
       random() * 1000,
       case when random() < 0.02 then null
            else jsonb_build_object(
                     'seq', g,
                     'tag', substr(md5(random()::text), 1, 12),
                     'qty', (random() * 100)::int,
                     'price', round((random() * 500)::numeric, 2),
                     'ok', random() < 0.9,
                     'tags', jsonb_build_array(substr(md5(random()::text), 1, 6),
                                               substr(md5(random()::text), 1, 6)),
                     'meta', jsonb_build_object('src', 'bench', 'w', random()))
       end,
       gen_random_uuid()
from generate_series(%(lo)s::bigint, %(hi)s::bigint) as g
"""

GET_CHANGES_SQL = """
select (lsn - '0/0'::pg_lsn)::bigint, data
from pg_logical_slot_get_binary_changes(%s, NULL, %s, {options})
"""


# --------------------------------------------------------------------------------------
# Capture file I/O (also used by test_decode_bench.py and report.py)
# --------------------------------------------------------------------------------------


def iter_records(path: Path) -> Iterator[tuple[int, bytes]]:
    """Yield (lsn, message) from a capture file; raises ValueError on a truncated file."""
    data = Path(path).read_bytes()
    view = memoryview(data)
    pos, end, hdr = 0, len(data), RECORD_HEADER.size
    while pos < end:
        if pos + hdr > end:
            raise ValueError(f"{path}: truncated record header at byte {pos}")
        lsn, length = RECORD_HEADER.unpack_from(view, pos)
        pos += hdr
        if pos + length > end:
            raise ValueError(f"{path}: truncated record body at byte {pos}")
        yield lsn, bytes(view[pos : pos + length])
        pos += length


def load_capture(path: Path) -> tuple[list[bytes], list[int]]:
    """The whole capture as (messages, lsns)."""
    msgs: list[bytes] = []
    lsns: list[int] = []
    for lsn, msg in iter_records(path):
        lsns.append(lsn)
        msgs.append(msg)
    return msgs, lsns


def capture_paths(out_dir: Path, mode: str) -> tuple[Path, Path]:
    return out_dir / f"bench_{mode}.bin", out_dir / f"bench_{mode}.json"


# --------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------


def _options_sql(binary: bool) -> tuple[str, list[str]]:
    opts = ["proto_version", "1", "publication_names", "benchpub"]
    if binary:
        opts += ["binary", "true"]
    return ", ".join(["%s"] * len(opts)), opts


def drain_slot(
    conn: psycopg.Connection[Any],
    slot: str,
    binary: bool,
    dest: Path,
    expected_rows: int,
    chunk: int,
) -> dict[str, Any]:
    placeholders, opts = _options_sql(binary)
    sql = GET_CHANGES_SQL.format(options=placeholders)
    tags: collections.Counter[str] = collections.Counter()
    n_msgs = payload_bytes = 0
    sha = hashlib.sha256()
    tmp = dest.with_suffix(dest.suffix + ".tmp")
    t0 = time.perf_counter()
    with open(tmp, "wb") as f:
        while True:
            rows = conn.execute(sql, [slot, chunk, *opts]).fetchall()
            if not rows:
                break
            buf = bytearray()
            for lsn, data in rows:
                data = bytes(data)
                buf += RECORD_HEADER.pack(lsn, len(data))
                buf += data
                tags[chr(data[0])] += 1
                payload_bytes += len(data)
            n_msgs += len(rows)
            sha.update(buf)
            f.write(buf)
            print(
                f"  [{slot}] {n_msgs:>9,} messages, {tags['I']:>9,}/{expected_rows:,} inserts,"
                f" {payload_bytes / 1e6:8.1f} MB",
                flush=True,
            )
    if tags["I"] != expected_rows:
        tmp.unlink()
        raise SystemExit(f"{slot}: expected {expected_rows} inserts, got {tags['I']}")
    tmp.replace(dest)
    return {
        "messages": n_msgs,
        "messages_by_tag": dict(sorted(tags.items())),
        "payload_bytes": payload_bytes,
        "file_bytes": dest.stat().st_size,
        "sha256": sha.hexdigest(),
        "drain_seconds": round(time.perf_counter() - t0, 2),
    }


def record(out_dir: Path, rows: int, batch: int, chunk: int) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    print("starting a throwaway PostgreSQL 15 ...", flush=True)
    # Throwaway server: durability is irrelevant, a large WAL budget avoids checkpoints.
    settings = {"max_wal_size": "'4GB'", "logical_decoding_work_mem": "'256MB'"}
    cluster = PgCluster.for_server("pg15", settings=settings)
    with cluster as pg, psycopg.connect(pg.dsn, autocommit=True) as conn:
        server_version = conn.execute("show server_version").fetchone()[0]  # type: ignore[index]
        print(f"PostgreSQL {server_version} on port {pg.port}", flush=True)
        conn.execute(TABLE_DDL)
        conn.execute("create publication benchpub for table bench")
        slots = {"text": "bench_text", "binary": "bench_binary"}
        for slot in slots.values():
            conn.execute("select pg_create_logical_replication_slot(%s, 'pgoutput')", [slot])

        t0 = time.perf_counter()
        for lo in range(1, rows + 1, batch):
            hi = min(lo + batch - 1, rows)
            conn.execute(INSERT_SQL, {"lo": lo, "hi": hi})  # autocommit: one transaction
            if hi % (10 * batch) == 0 or hi == rows:
                rate = hi / (time.perf_counter() - t0)
                print(f"  inserted {hi:>9,}/{rows:,} rows ({rate:,.0f} rows/s)", flush=True)
        insert_seconds = time.perf_counter() - t0

        for mode, slot in slots.items():
            dest, meta_path = capture_paths(out_dir, mode)
            print(f"draining slot {slot} ({mode} tuples) into {dest} ...", flush=True)
            stats = drain_slot(conn, slot, mode == "binary", dest, rows, chunk)
            _, opts = _options_sql(mode == "binary")
            meta = {
                "format": "records of [u64 lsn BE][u32 len BE][message bytes], no header",
                "mode": mode,
                "rows": rows,
                "batch": batch,
                "options": dict(zip(opts[::2], opts[1::2], strict=True)),
                "server_version": server_version,
                "table_ddl": " ".join(TABLE_DDL.split()),
                "insert_seconds": round(insert_seconds, 2),
                "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                **stats,
            }
            meta_path.write_text(json.dumps(meta, indent=2) + "\n")
            print(
                f"  wrote {stats['messages']:,} messages, {stats['file_bytes'] / 1e6:.1f} MB",
                flush=True,
            )
    print(f"capture generated in {time.perf_counter() - t_start:.1f} s", flush=True)


def is_cached(out_dir: Path, rows: int, batch: int) -> bool:
    for mode in ("text", "binary"):
        data, meta_path = capture_paths(out_dir, mode)
        if not (data.exists() and meta_path.exists()):
            return False
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            return False
        if (
            meta.get("rows") != rows
            or meta.get("batch") != batch
            or meta.get("file_bytes") != data.stat().st_size
        ):
            return False
    return True


def ensure_capture(
    out_dir: Path = DEFAULT_CACHE, rows: int = 1_000_000, batch: int = 10_000
) -> Path:
    """Record the captures unless cached; returns the text-mode capture path."""
    if not is_cached(out_dir, rows, batch):
        record(out_dir, rows, batch, chunk=50_000)
    return capture_paths(out_dir, "text")[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=10_000, help="rows per transaction")
    ap.add_argument("--chunk", type=int, default=50_000, help="upto_nchanges per slot read")
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_CACHE)
    ap.add_argument("--force", action="store_true", help="re-record even if cached")
    args = ap.parse_args(argv)
    if args.rows < 1 or args.batch < 1 or args.chunk < 1:
        ap.error("--rows, --batch and --chunk must be positive")
    if not args.force and is_cached(args.out_dir, args.rows, args.batch):
        for mode in ("text", "binary"):
            data, _ = capture_paths(args.out_dir, mode)
            print(f"cached: {data} ({data.stat().st_size / 1e6:.1f} MB)")
        return 0
    record(args.out_dir, args.rows, args.batch, args.chunk)
    return 0


if __name__ == "__main__":
    sys.exit(main())
