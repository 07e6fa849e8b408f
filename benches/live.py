"""Live benchmarks: `stream()` against pg_recvlogical and psycopg2 + pypgoutput on copies
of one slot, and the initial snapshot against the ADBC PostgreSQL driver.

Streaming: a throwaway PostgreSQL gets the ``bench`` table of ``capture_stream.py`` and a
slot ``base`` created before the workload; then ``--rows`` inserts (transactions of 10,000
rows) and as many updates. Each contender drains its own copy of ``base``
(``pg_copy_logical_replication_slot``) up to the same end LSN:

* ``pg_recvlogical -f /dev/null`` (text and binary tuples: ``-o binary=true``);
* ``pgwire_cdc.stream(..., snapshot=False, until_lsn=end)`` acking every batch, text and
  binary (typed Arrow tables, one process; CPU time is reported to show it stays within
  one core);
* psycopg2's ``LogicalReplicationConnection`` with pypgoutput decoding every message
  (text only: pypgoutput has no binary tuple support).

Snapshot: ``--snapshot-rows`` rows in ``bench``; ``stream()`` on a new slot with
``until_lsn`` at the consistent point (so it ends after the snapshot), one and two
connections, versus ``adbc_driver_postgresql`` reading ``SELECT * FROM bench`` into Arrow.

Writes ``benches/results/live.md``. Usage::

    .venv/bin/python benches/live.py [--rows 1000000] [--snapshot-rows 5000000] [--server pg15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

import capture_stream  # noqa: E402
import pgwire_cdc  # noqa: E402
from bench_common import check_release_build, write_ratios  # noqa: E402
from support.server import PgCluster  # noqa: E402

#: The bench table of the live benchmarks (the shape of the capture and synthetic streams).
BENCH_TABLE = (
    "create table bench (id bigint primary key, name text, amount numeric(12,2), "
    "ts timestamptz, flag bool, score float8, doc jsonb, uid uuid)"
)

SETTINGS = {"max_wal_size": "8GB", "shared_buffers": "512MB", "wal_sender_timeout": "600s"}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def lsn_now(conn: Any) -> int:
    return pgwire_cdc.lsn_to_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def fill(conn: Any, rows: int, start: int = 1, batch: int = 10_000) -> None:
    for lo in range(start, start + rows, batch):
        hi = min(lo + batch - 1, start + rows - 1)
        conn.execute(capture_stream.INSERT_SQL, {"lo": lo, "hi": hi})
        done = hi - start + 1
        if done % 200_000 == 0 or done == rows:
            print(f"  inserted {done:,}/{rows:,}", flush=True)


def update_all(conn: Any, rows: int, batch: int = 10_000) -> None:
    for lo in range(1, rows + 1, batch):
        conn.execute(
            "UPDATE bench SET score = score + 1, flag = NOT flag WHERE id BETWEEN %s AND %s",
            (lo, lo + batch - 1),
        )
    print(f"  updated {rows:,}", flush=True)


def run_recvlogical(cluster: PgCluster, dsn: str, slot: str, end: int, binary: bool) -> float:
    cmd = [
        str(cluster.bindir / "pg_recvlogical"),
        "-d",
        dsn,
        "--slot",
        slot,
        "--start",
        "-o",
        "proto_version=1",
        "-o",
        "publication_names=benchpub",
        "--endpos",
        pgwire_cdc.int_to_lsn(end),
        "--no-loop",
        "-f",
        "/dev/null",
    ]
    if binary:
        cmd += ["-o", "binary=true"]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t0


def run_stream(dsn: str, slot: str, end: int, binary: bool) -> tuple[float, float, int]:
    c0, t0 = cpu_seconds(), time.perf_counter()
    rows = 0
    for batch in pgwire_cdc.stream(
        dsn,
        publication="benchpub",
        slot=slot,
        snapshot=False,
        binary=binary,
        until_lsn=end,
        max_batch_rows=100_000,
        max_batch_ms=5_000,
    ):
        rows += batch.rows
        batch.ack()
    return time.perf_counter() - t0, cpu_seconds() - c0, rows


def run_psycopg2(dsn: str, slot: str, end: int, expected: int) -> tuple[float, int]:
    import psycopg2
    import psycopg2.extras
    from bench_common import pypgoutput_classes

    by_tag = pypgoutput_classes()
    conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(
        slot_name=slot,
        decode=False,
        options={"proto_version": "1", "publication_names": "benchpub"},
    )
    rows = 0
    t0 = time.perf_counter()
    while True:
        msg = cur.read_message()
        if msg is None:
            time.sleep(0.001)
            continue
        payload = msg.payload
        by_tag[payload[0]](payload)
        if payload[:1] in (b"I", b"U"):
            rows += 1
        if payload[:1] == b"C":
            # Commit: end_lsn at bytes 10..18.
            commit_end = int.from_bytes(payload[10:18], "big")
            cur.send_feedback(flush_lsn=commit_end)
            if commit_end >= end or rows >= expected:
                break
    elapsed = time.perf_counter() - t0
    conn.close()
    return elapsed, rows


def run_snapshot(dsn: str, slot: str, workers: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = 0
    for batch in pgwire_cdc.stream(
        dsn,
        publication="benchpub",
        slot=slot,
        snapshot=True,
        binary=True,
        until_lsn=0,
        snapshot_workers=workers,
        max_batch_rows=131_072,
    ):
        rows += batch.rows
        batch.ack()
    return time.perf_counter() - t0, rows


def run_adbc(uri: str) -> tuple[float, int]:
    import adbc_driver_postgresql.dbapi as adbc

    t0 = time.perf_counter()
    with adbc.connect(uri) as conn, conn.cursor() as cur:
        cur.execute("SELECT * FROM bench")
        table = cur.fetch_arrow_table()
    return time.perf_counter() - t0, table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--snapshot-rows", type=int, default=5_000_000)
    parser.add_argument("--server", default="pg15", choices=("pg15", "pg18"))
    parser.add_argument("--skip-psycopg2", action="store_true")
    args = parser.parse_args()
    check_release_build()
    lines: list[str] = []
    with PgCluster.for_server(args.server, settings=SETTINGS).start() as cluster:
        name = cluster.create_database("bench")
        dsn = cluster.dsn_for(name)
        conn = cluster.connect(name)
        conn.execute(BENCH_TABLE)
        conn.execute("create publication benchpub for table bench")
        conn.execute("select pg_create_logical_replication_slot('base', 'pgoutput')")
        print(f"workload: {args.rows:,} inserts + {args.rows:,} updates", flush=True)
        fill(conn, args.rows)
        update_all(conn, args.rows)
        end = lsn_now(conn)
        contenders = ["recv_t", "recv_b", "ours_t", "ours_b", "psy"]
        for slot in contenders:
            conn.execute("select pg_copy_logical_replication_slot('base', %s)", (slot,))
        changes = 2 * args.rows
        results: dict[str, float] = {}
        results["recv_t"] = run_recvlogical(cluster, dsn, "recv_t", end, binary=False)
        print(f"pg_recvlogical text   {results['recv_t']:.2f} s", flush=True)
        results["recv_b"] = run_recvlogical(cluster, dsn, "recv_b", end, binary=True)
        print(f"pg_recvlogical binary {results['recv_b']:.2f} s", flush=True)
        cpu: dict[str, float] = {}
        for slot, binary in (("ours_t", False), ("ours_b", True)):
            wall, used, rows = run_stream(dsn, slot, end, binary)
            assert rows == changes, (rows, changes)
            results[slot], cpu[slot] = wall, used
            print(
                f"stream() {'binary' if binary else 'text'}: {wall:.2f} s, cpu {used:.2f} s",
                flush=True,
            )
        if not args.skip_psycopg2:
            results["psy"], _ = run_psycopg2(dsn, "psy", end, changes)
            print(f"psycopg2+pypgoutput {results['psy']:.2f} s", flush=True)

        lines += [
            f"## Streaming {args.rows:,} inserts + {args.rows:,} updates ({args.server})",
            "",
            "| consumer | seconds | changes/s | ratio |",
            "|---|---:|---:|---:|",
        ]
        rows_def = [
            ("pg_recvlogical -f /dev/null, text", "recv_t", "recv_t"),
            ("stream(), text, typed Arrow", "ours_t", "recv_t"),
            ("pg_recvlogical -f /dev/null, binary", "recv_b", "recv_b"),
            ("stream(), binary, typed Arrow", "ours_b", "recv_b"),
            ("psycopg2 + pypgoutput (text)", "psy", "ours_t"),
        ]
        for label, key, base in rows_def:
            if key not in results:
                continue
            ratio = (
                f"{results[base] / results[key]:.2f}x of {base}"
                if key != base and key != "psy"
                else (
                    "1.00x"
                    if key == base
                    else f"stream() text is {results[key] / results['ours_t']:.1f}x faster"
                )
            )
            lines.append(
                f"| {label} | {results[key]:.2f} | {changes / results[key]:,.0f} | {ratio} |"
            )
        lines += [
            "",
            f"stream() CPU time: text {cpu['ours_t']:.2f} s over {results['ours_t']:.2f} s wall, "
            f"binary {cpu['ours_b']:.2f} s over {results['ours_b']:.2f} s wall "
            "(the client process; at most one core means cpu <= wall).",
            "",
        ]

        # Snapshot.
        conn.execute("drop publication benchpub")
        conn.execute("truncate bench")
        conn.execute("create publication benchpub for table bench")
        for slot in [*contenders, "base"]:
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
        print(f"snapshot table: {args.snapshot_rows:,} rows", flush=True)
        fill(conn, args.snapshot_rows, batch=100_000)
        conn.execute("vacuum analyze bench")
        uri = f"postgresql://postgres@127.0.0.1:{cluster.port}/{name}"
        snap: dict[str, float] = {}
        snap["adbc"], n = run_adbc(uri)
        assert n == args.snapshot_rows
        print(f"ADBC {snap['adbc']:.2f} s", flush=True)
        for workers in (1, 2):
            slot = f"snap{workers}"
            snap[f"w{workers}"], n = run_snapshot(dsn, slot, workers)
            assert n == args.snapshot_rows, (n, args.snapshot_rows)
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
            print(
                f"stream() snapshot, {workers} connection(s): {snap[f'w{workers}']:.2f} s",
                flush=True,
            )
        lines += [
            f"## Initial snapshot of {args.snapshot_rows:,} rows ({args.server})",
            "",
            "| reader | seconds | rows/s | vs ADBC |",
            "|---|---:|---:|---:|",
            f"| ADBC PostgreSQL driver, SELECT * into Arrow | {snap['adbc']:.2f} | "
            f"{args.snapshot_rows / snap['adbc']:,.0f} | 1.00x |",
        ]
        for workers in (1, 2):
            t = snap[f"w{workers}"]
            lines.append(
                f"| stream() snapshot, {workers} connection(s) | {t:.2f} | "
                f"{args.snapshot_rows / t:,.0f} | {snap['adbc'] / t:.2f}x |"
            )
        conn.close()
    header = [
        "# Live benchmarks",
        "",
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, release build. Server and client share the machine "
        "(2 cores): `benches/live.py`.",
        "",
    ]
    out = HERE / "results" / "live.md"
    out.write_text("\n".join(header + lines) + "\n")
    figures = {
        "stream() text vs pg_recvlogical": results["recv_t"] / results["ours_t"],
        "stream() binary vs pg_recvlogical": results["recv_b"] / results["ours_b"],
        "snapshot, 1 connection, vs ADBC": snap["adbc"] / snap["w1"],
        "snapshot, 2 connections, vs ADBC": snap["adbc"] / snap["w2"],
    }
    if "psy" in results:
        figures["stream() vs psycopg2 + pypgoutput"] = results["psy"] / results["ours_t"]
    write_ratios("live", figures)
    print(out.read_text())


if __name__ == "__main__":
    main()
