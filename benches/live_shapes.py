"""`stream()` against `pg_recvlogical` for two transaction shapes: one large transaction
and many small ones.

A throwaway PostgreSQL 15 gets the ``bench`` table and a slot ``base`` created before the
workload: either one transaction of ``--rows`` inserts or ``--rows / 100`` transactions of
100. Each consumer drains its own copy of ``base`` up to the same end LSN, ``--repeat``
times, in one run:

* ``pg_recvlogical -f /dev/null`` with protocol 1 (the server holds a large transaction
  until it commits, spilling it to disk: the baseline of the project's goals), and with
  protocol 2 and ``streaming=on`` (the server sends it while it runs, as ``stream()``
  asks by default);
* ``pgwire_cdc.stream(..., snapshot=False, until_lsn=end)`` in text and binary, acking
  every batch: typed Arrow tables, with the client process's CPU time.

The walsender's decoding takes one of the machine's cores; the ratios say whether the
client keeps up with it. Writes ``benches/results/live_shapes.md``.

    .venv/bin/python benches/live_shapes.py [--rows 500000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import datetime as dt
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "tests"))  # support.server: the tests' PgCluster

import capture_stream  # noqa: E402
import pgwire_cdc  # noqa: E402
from bench_common import check_release_build  # noqa: E402
from live import BENCH_TABLE, SETTINGS, lsn_now, run_stream  # noqa: E402
from support.server import PgCluster  # noqa: E402


def run_recvlogical(cluster: PgCluster, dsn: str, slot: str, end: int, streaming: bool) -> float:
    cmd = [
        str(cluster.bindir / "pg_recvlogical"),
        *("-d", dsn, "--slot", slot, "--start", "--no-loop", "-f", "/dev/null"),
        *("-o", f"proto_version={2 if streaming else 1}", "-o", "publication_names=benchpub"),
        *("--endpos", pgwire_cdc.int_to_lsn(end)),
    ]
    if streaming:
        cmd += ["-o", "streaming=on"]
    started = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - started


def shape(cluster: PgCluster, rows: int, small: bool, repeat: int) -> list[str]:
    name = cluster.create_database("small" if small else "large")
    dsn = cluster.dsn_for(name)
    conn = cluster.connect(name)
    conn.execute(BENCH_TABLE)
    conn.execute("create publication benchpub for table bench")
    prefix = "small" if small else "large"  # slot names are the cluster's
    conn.execute("select pg_create_logical_replication_slot(%s, 'pgoutput')", (f"{prefix}_base",))
    step = 100 if small else rows
    for lo in range(1, rows + 1, step):
        conn.execute(capture_stream.INSERT_SQL, {"lo": lo, "hi": min(lo + step - 1, rows)})
    end = lsn_now(conn)
    what = (
        f"{rows // 100:,} transactions of 100 inserts"
        if small
        else f"one transaction of {rows:,} inserts"
    )
    print(what, flush=True)
    lines = [
        f"## {what}",
        "",
        "| run | pg_recvlogical v1 | pg_recvlogical v2 streaming | stream() text | stream() binary "
        "| text / v1 | binary / v1 | text / v2 | binary / v2 | client CPU (text, binary) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in range(1, repeat + 1):
        slots = {k: f"{prefix}_{k}{run}" for k in ("v1", "v2", "t", "b")}
        for slot in slots.values():
            conn.execute(
                "select pg_copy_logical_replication_slot(%s, %s)", (f"{prefix}_base", slot)
            )
        v1 = run_recvlogical(cluster, dsn, slots["v1"], end, streaming=False)
        v2 = run_recvlogical(cluster, dsn, slots["v2"], end, streaming=True)
        text, text_cpu, n = run_stream(dsn, slots["t"], end, binary=False)
        assert n == rows, (n, rows)
        binary, binary_cpu, n = run_stream(dsn, slots["b"], end, binary=True)
        assert n == rows, (n, rows)
        line = (
            f"| {run} | {v1:.2f} s | {v2:.2f} s | {text:.2f} s | {binary:.2f} s "
            f"| {v1 / text:.2f}x | {v1 / binary:.2f}x | {v2 / text:.2f}x | {v2 / binary:.2f}x "
            f"| {text_cpu:.2f} s, {binary_cpu:.2f} s |"
        )
        print(line, flush=True)
        lines.append(line)
        for slot in slots.values():
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
    conn.execute("select pg_drop_replication_slot(%s)", (f"{prefix}_base",))
    conn.close()
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    check_release_build()
    lines = [
        "# stream() and pg_recvlogical by transaction shape",
        "",
        f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC, PostgreSQL 15 and the client on "
        "one 2-core machine, release build: `benches/live_shapes.py`. Ratios above 1: "
        "stream() took less time.",
        "",
    ]
    with PgCluster.for_server("pg15", settings=SETTINGS).start() as cluster:
        for small in (False, True):
            lines += shape(cluster, args.rows, small, args.repeat)
    out = HERE / "results" / "live_shapes.md"
    out.write_text("\n".join(lines))
    print(out.read_text())


if __name__ == "__main__":
    main()
