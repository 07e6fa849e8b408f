"""``pgwire-cdc bench``: a quick throughput measurement on a throwaway (or given) server.

``rows`` rows go into a fresh table (the ``bench`` shape of the source tree's benchmarks);
then, each against a baseline in the same process:

* the initial snapshot through ``stream()`` (COPY BINARY decoded into Arrow) versus
  psycopg 3 reading the same rows with ``SELECT *`` (``fetchall``);
* ``rows`` updates streamed by ``stream()`` (binary tuples into Arrow tables);
* the same changes kept in Delta tables end to end (:func:`pgwire_cdc.delta.run`, the
  pipeline every sink runs in, delta-rs writer: stream, Rust batch reducer, one Delta MERGE
  per table and batch, ack), on a slot of its own that copied the table first.

The full side-by-side comparisons (pypgoutput, pg_recvlogical, psycopg2, ADBC, the pandas
path into Spark) are ``make bench`` in the source tree.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

TABLE_SQL = """
CREATE TABLE {t} (id bigint PRIMARY KEY, name text, amount numeric(12,2), ts timestamptz,
                  flag bool, score float8, doc jsonb, uid uuid)
"""
FILL_SQL = """
INSERT INTO {t} SELECT g, md5(g::text), round((random() * 1000)::numeric, 2),
    timestamptz '2020-01-01 00:00:00+00' + g * interval '1 second', g %% 2 = 0, random(),
    jsonb_build_object('seq', g, 'tag', md5((g * 7)::text)), gen_random_uuid()
FROM generate_series(%s::bigint, %s::bigint) g
"""


def _say(text: str) -> None:
    """Where the throwaway server is announced: stdout."""
    print(text, flush=True)


def run_bench(dsn: str | None, rows: int = 200_000) -> dict[str, Any]:
    import psycopg

    from .. import delta
    from ..connection import connect
    from ..lsn import lsn_to_int
    from ..streaming import stream
    from .postgres import demo_server

    name = f"pgwire_cdc_bench_{uuid.uuid4().hex[:8]}"
    work = Path(tempfile.mkdtemp(prefix="pgwire_cdc_quickbench_"))
    with (
        demo_server(dsn, _say) as (server_dsn, where),
        connect(server_dsn) as conn,
    ):
        conn.execute(TABLE_SQL.format(t=name))
        try:
            for lo in range(1, rows + 1, 50_000):
                conn.execute(FILL_SQL.format(t=name), (lo, min(lo + 49_999, rows)))
            conn.execute(f"CREATE PUBLICATION {name} FOR TABLE {name}")

            def now() -> int:
                row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
                assert row is not None
                return lsn_to_int(row[0])

            start = time.perf_counter()
            with psycopg.connect(server_dsn) as reader:
                fetched = len(reader.execute(f"SELECT * FROM {name}").fetchall())
            select_s = time.perf_counter() - start

            # The Delta tables (delta-rs writer) copy the table through the pipeline, on
            # a slot of their own, before the updates (untimed).
            lake = f"{name}_delta"
            delta.run(server_dsn, work, publication=name, slot=lake, until_lsn=now())

            start = time.perf_counter()
            snap = 0
            for batch in stream(server_dsn, publication=name, slot=name, until_lsn=now()):
                snap += batch.rows
                batch.ack()
            snapshot_s = time.perf_counter() - start

            conn.execute(f"UPDATE {name} SET score = score + 1, flag = NOT flag")
            until = now()
            start = time.perf_counter()
            live = 0
            for batch in stream(server_dsn, publication=name, slot=name, until_lsn=until):
                live += batch.rows
                batch.ack()
            live_s = time.perf_counter() - start

            # The same changes into the Delta tables, end to end: stream, reduce, MERGE,
            # ack (pgwire_cdc.pipeline.run, as `pgwire-cdc stream --delta` runs it).
            start = time.perf_counter()
            applied = delta.run(
                server_dsn, work, publication=name, slot=lake, until_lsn=until
            ).changes
            apply_s = time.perf_counter() - start
        finally:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = ANY(%s) AND NOT active",
                ([name, f"{name}_delta"],),
            )
            conn.execute(f"DROP PUBLICATION IF EXISTS {name}")
            conn.execute(f"DROP TABLE IF EXISTS {name}")
            shutil.rmtree(work, ignore_errors=True)
    select_rate, snapshot_rate = fetched / select_s, snap / snapshot_s
    stream_rate, apply_rate = live / live_s, applied / max(apply_s, 1e-9)
    return {
        "server": where,
        "rows": rows,
        "psycopg_select_rows_per_s": select_rate,
        "snapshot_rows_per_s": snapshot_rate,
        "stream_changes_per_s": stream_rate,
        "delta_apply_changes_per_s": apply_rate,
        "lines": [
            f"server: {where}; {rows:,} rows",
            f"snapshot into Arrow (stream):  {snapshot_rate:>12,.0f} rows/s  "
            f"({snapshot_rate / select_rate:.1f}x psycopg SELECT at {select_rate:,.0f} rows/s)",
            f"changes into Arrow (stream):   {stream_rate:>12,.0f} changes/s",
            f"changes into Delta (delta-rs): {apply_rate:>12,.0f} changes/s "
            "(stream, MERGE and ack)",
        ],
    }
